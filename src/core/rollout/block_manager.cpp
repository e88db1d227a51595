// BlockManager: reference-counted fixed-size blocks. A table holding t tokens owns
// blocks_for(t) blocks; the token at position t goes to block t / block_size.
#include <verlpp/rollout/block_manager.hpp>

#include <verlpp/core/error.hpp>

#include <algorithm>

namespace verlpp::rollout {

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size)
    : block_size_(block_size), ref_counts_(size_t(num_blocks > 0 ? num_blocks : 0), 0) {
  VERLPP_CHECK(num_blocks > 0 && block_size > 0, "BlockManager: num_blocks {} and block_size {} must be positive",
               num_blocks, block_size);
  for (int64_t b = 0; b < num_blocks; ++b) free_.push_back(b);
}

int64_t BlockManager::take() {
  VERLPP_CHECK(!free_.empty(), "BlockManager: no free block (call can_allocate/can_append first)");
  const int64_t b = free_.front();
  free_.pop_front();
  ref_counts_[size_t(b)] = 1;
  return b;
}

bool BlockManager::can_allocate(int64_t num_tokens) const { return blocks_for(num_tokens) <= num_free_blocks(); }

void BlockManager::allocate(std::vector<int64_t>& table, int64_t num_tokens) {
  VERLPP_CHECK(table.empty(), "BlockManager::allocate: the table already holds {} blocks", table.size());
  VERLPP_CHECK(can_allocate(num_tokens), "BlockManager::allocate: {} tokens need {} blocks, {} free", num_tokens,
               blocks_for(num_tokens), num_free_blocks());
  for (int64_t i = 0; i < blocks_for(num_tokens); ++i) table.push_back(take());
}

void BlockManager::fork(const std::vector<int64_t>& parent, std::vector<int64_t>& child) {
  VERLPP_CHECK(child.empty(), "BlockManager::fork: the child table already holds {} blocks", child.size());
  for (int64_t b : parent) {
    VERLPP_CHECK(ref_counts_.at(size_t(b)) > 0, "BlockManager::fork: block {} is free", b);
    ++ref_counts_[size_t(b)];
  }
  child = parent;
}

bool BlockManager::can_append(const std::vector<int64_t>& table, int64_t num_tokens) const {
  if (num_tokens % block_size_ == 0)  // starts a new block, unless it was taken ahead
    return int64_t(table.size()) > num_tokens / block_size_ || num_free_blocks() >= 1;
  const int64_t last = table.at(size_t(num_tokens / block_size_));
  return ref_counts_[size_t(last)] == 1 || num_free_blocks() >= 1;  // shared: copy on write
}

std::optional<BlockCopy> BlockManager::append(std::vector<int64_t>& table, int64_t num_tokens) {
  VERLPP_CHECK(int64_t(table.size()) == blocks_for(num_tokens) || int64_t(table.size()) == blocks_for(num_tokens + 1),
               "BlockManager::append: a table of {} blocks cannot hold exactly {} tokens (nor them and the next "
               "position's block, taken ahead)",
               table.size(), num_tokens);
  VERLPP_CHECK(can_append(table, num_tokens), "BlockManager::append: no free block (call can_append first)");
  if (num_tokens % block_size_ == 0) {
    if (int64_t(table.size()) == num_tokens / block_size_) table.push_back(take());
    return std::nullopt;  // a block taken ahead is fresh: only this table references it
  }
  int64_t& last = table[size_t(num_tokens / block_size_)];
  if (ref_counts_[size_t(last)] == 1) return std::nullopt;
  const int64_t copy = take();
  --ref_counts_[size_t(last)];
  BlockCopy op{last, copy};
  last = copy;
  return op;
}

int64_t BlockManager::blocks_to_extend(const std::vector<int64_t>& table, int64_t num_cached,
                                       int64_t num_tokens) const {
  const int64_t fresh = std::max<int64_t>(0, blocks_for(num_tokens) - int64_t(table.size()));
  const size_t partial = size_t(num_cached / block_size_);
  const bool copy = num_tokens > num_cached && num_cached % block_size_ != 0 && partial < table.size() &&
                    ref_counts_[size_t(table[partial])] > 1;
  return fresh + (copy ? 1 : 0);
}

std::optional<BlockCopy> BlockManager::extend(std::vector<int64_t>& table, int64_t num_cached, int64_t num_tokens) {
  VERLPP_CHECK(blocks_to_extend(table, num_cached, num_tokens) <= num_free_blocks(),
               "BlockManager::extend: {} -> {} tokens need {} blocks, {} free", num_cached, num_tokens,
               blocks_to_extend(table, num_cached, num_tokens), num_free_blocks());
  std::optional<BlockCopy> copy;
  for (int64_t p = num_cached; p < num_tokens; ++p)
    if (auto c = append(table, p)) copy = c;  // only the first position can copy
  return copy;
}

void BlockManager::free(std::vector<int64_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    int64_t& count = ref_counts_.at(size_t(*it));
    VERLPP_CHECK(count > 0, "BlockManager::free: block {} is already free", *it);
    if (--count == 0) free_.push_back(*it);
  }
  table.clear();
}

}  // namespace verlpp::rollout
