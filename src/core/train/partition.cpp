// Karmarkar-Karp (largest differencing) k-way partitioning. Each state is k bins; states are
// merged pairwise, largest spread first, pairing one state's fullest bin with the other's
// emptiest, until one state remains. Written from the method's description, not from verl's code.
#include <verlpp/train/partition.hpp>
#include <verlpp/core/error.hpp>

#include <algorithm>
#include <numeric>
#include <queue>

namespace verlpp::train {
namespace {

struct Bin {
  int64_t sum = 0;
  std::vector<int64_t> items;
};

struct State {
  std::vector<Bin> bins;  // sorted by sum, descending
  int64_t spread() const { return bins.front().sum - bins.back().sum; }
  void sort() {
    std::sort(bins.begin(), bins.end(), [](const Bin& a, const Bin& b) {
      return a.sum != b.sum ? a.sum > b.sum : a.items < b.items;  // deterministic ties
    });
  }
};

struct BySpread {
  bool operator()(const State& a, const State& b) const {
    if (a.spread() != b.spread()) return a.spread() < b.spread();  // max-heap on spread
    return a.bins.front().items > b.bins.front().items;
  }
};

}  // namespace

std::vector<std::vector<int64_t>> balanced_partitions(const std::vector<int64_t>& seq_lens, int64_t k,
                                                      bool equal_size) {
  const int64_t n = int64_t(seq_lens.size());
  if (k < 1) throw Error("balanced_partitions", fmt::format("k = {} must be >= 1", k));
  if (n < k) throw Error("balanced_partitions", fmt::format("{} sequences cannot fill {} groups", n, k));
  if (equal_size && n % k != 0)
    throw Error("balanced_partitions", fmt::format("{} sequences do not split into {} equal groups", n, k));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return seq_lens[size_t(a)] > seq_lens[size_t(b)]; });
  std::priority_queue<State, std::vector<State>, BySpread> heap;
  // Initial states: one item each (or, for equal sizes, k consecutive sorted items, one per bin).
  const int64_t per_state = equal_size ? k : 1;
  for (int64_t start = 0; start < n; start += per_state) {
    State s;
    s.bins.resize(size_t(k));
    for (int64_t j = 0; j < per_state; ++j) {
      int64_t idx = order[size_t(start + j)];
      s.bins[size_t(j)].sum = seq_lens[size_t(idx)];
      s.bins[size_t(j)].items.push_back(idx);
    }
    s.sort();
    heap.push(std::move(s));
  }
  while (heap.size() > 1) {
    State a = heap.top();
    heap.pop();
    State b = heap.top();
    heap.pop();
    // a's bins run fullest -> emptiest; pair them with b's emptiest -> fullest.
    for (size_t i = 0; i < size_t(k); ++i) {
      Bin& target = a.bins[i];
      Bin& source = b.bins[size_t(k) - 1 - i];
      target.sum += source.sum;
      target.items.insert(target.items.end(), source.items.begin(), source.items.end());
    }
    a.sort();
    heap.push(std::move(a));
  }
  std::vector<std::vector<int64_t>> groups;
  State last = heap.top();
  for (auto& bin : last.bins) {
    std::sort(bin.items.begin(), bin.items.end());
    groups.push_back(bin.items);
  }
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
    return a.empty() ? false : b.empty() ? true : a.front() < b.front();
  });
  return groups;
}

std::vector<std::vector<int64_t>> dynamic_micro_batches(const std::vector<int64_t>& seq_lens, int64_t max_tokens,
                                                        int64_t min_micro_batches) {
  if (seq_lens.empty()) return {};
  if (max_tokens < 1) throw Error("ppo_max_token_len_per_gpu", fmt::format("{} must be >= 1", max_tokens));
  int64_t total = 0;
  for (size_t i = 0; i < seq_lens.size(); ++i) {
    if (seq_lens[i] > max_tokens)
      throw Error("ppo_max_token_len_per_gpu",
                  fmt::format("sequence {} has {} tokens, more than the budget of {} per micro-batch", i, seq_lens[i],
                              max_tokens));
    total += seq_lens[i];
  }
  const int64_t n = int64_t(seq_lens.size());
  int64_t k = std::max<int64_t>({(total + max_tokens - 1) / max_tokens, min_micro_batches, 1});
  // The balanced split can overshoot the budget in a group; then try one more group (at most n).
  for (; k <= n; ++k) {
    auto groups = balanced_partitions(seq_lens, k, false);
    bool fits = std::all_of(groups.begin(), groups.end(), [&](const std::vector<int64_t>& g) {
      int64_t s = 0;
      for (int64_t i : g) s += seq_lens[size_t(i)];
      return s <= max_tokens;
    });
    if (fits) return groups;
  }
  return balanced_partitions(seq_lens, n, false);  // one sequence each always fits
}

std::vector<int32_t> owners_by_size(const std::vector<int64_t>& sizes, int32_t world) {
  std::vector<size_t> order(sizes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  std::vector<int64_t> load(size_t(std::max<int32_t>(world, 1)), 0);
  std::vector<int32_t> owner(sizes.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    owner[i] = int32_t(least);
    load[size_t(least)] += sizes[i];
  }
  return owner;
}

}  // namespace verlpp::train
