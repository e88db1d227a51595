// The paged KV cache's bookkeeping: fixed-size blocks, reference counts, and check-then-commit
// pairs (can_allocate/allocate, can_append/append) so a caller never half-commits. Samples of
// one prompt share its blocks (fork adds references); the first write into a shared, partly
// filled last block copies it (copy on write) and the copy is returned for the runner to do.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace verlpp::rollout {

// A block copy the runner must perform (every layer, K and V) before the next forward.
struct BlockCopy {
  int64_t src = 0;
  int64_t dst = 0;
};

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int64_t block_size);

  int64_t num_blocks() const { return int64_t(ref_counts_.size()); }
  int64_t block_size() const { return block_size_; }
  int64_t num_free_blocks() const { return int64_t(free_.size()); }
  // References held on block `block` (0 = free).
  int64_t ref_count(int64_t block) const { return ref_counts_.at(size_t(block)); }
  // Blocks needed to hold `num_tokens` tokens.
  int64_t blocks_for(int64_t num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  // Whether a fresh table for `num_tokens` tokens fits now; allocate() fills `table` (which
  // must be empty) with that many blocks, each referenced once.
  bool can_allocate(int64_t num_tokens) const;
  void allocate(std::vector<int64_t>& table, int64_t num_tokens);

  // A second owner of every block of `parent` (n samples sharing a prompt): child = parent,
  // each block's count + 1. `child` must be empty.
  void fork(const std::vector<int64_t>& parent, std::vector<int64_t>& child);

  // Whether a table holding `num_tokens` tokens can take the token at position num_tokens
  // (a new block when it starts one, unless the table already holds it; a copy when the last
  // block is shared); append() commits, returning the copy to perform, if any. Appending at a
  // position one past the table's tokens takes that position's block ahead (Scheduler's
  // reserve_ahead); the later append there then takes nothing.
  bool can_append(const std::vector<int64_t>& table, int64_t num_tokens) const;
  std::optional<BlockCopy> append(std::vector<int64_t>& table, int64_t num_tokens);

  // Blocks a table whose first `num_cached` tokens are written needs to hold `num_tokens`: new
  // blocks past its end, and a copy of its partly filled last block when that is shared. extend()
  // takes them (appending position by position), returning the copy to perform, if any.
  int64_t blocks_to_extend(const std::vector<int64_t>& table, int64_t num_cached, int64_t num_tokens) const;
  std::optional<BlockCopy> extend(std::vector<int64_t>& table, int64_t num_cached, int64_t num_tokens);

  // Drops the table's references (blocks reaching 0 become free) and clears it.
  void free(std::vector<int64_t>& table);

 private:
  int64_t take();
  int64_t block_size_;
  std::vector<int64_t> ref_counts_;  // [num_blocks]
  std::deque<int64_t> free_;         // free block ids, lowest first at start
};

}  // namespace verlpp::rollout
