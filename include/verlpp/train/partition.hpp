// Splitting sequences into groups of balanced token load: the Karmarkar-Karp largest-differencing
// method verl uses (get_seqlen_balanced_partitions), for data-parallel dispatch (equal counts per
// rank) and for dynamic micro-batches under a token budget (use_dynamic_bsz).
#pragma once

#include <cstdint>
#include <vector>

namespace verlpp::train {

// Splits indices 0..n-1 (with lengths `seq_lens`) into `k` groups whose length sums are as even
// as the method gets; with `equal_size` every group has n/k indices (n must divide by k).
// Each group's indices are sorted ascending; groups are ordered by their smallest index.
std::vector<std::vector<int64_t>> balanced_partitions(const std::vector<int64_t>& seq_lens, int64_t k, bool equal_size);

// Micro-batches for use_dynamic_bsz: the fewest groups (starting at ceil(total / max_tokens),
// and at least `min_micro_batches`) such that every group's length sum is <= max_tokens.
// Error naming the sequence when one sequence alone exceeds max_tokens.
std::vector<std::vector<int64_t>> dynamic_micro_batches(const std::vector<int64_t>& seq_lens, int64_t max_tokens,
                                                        int64_t min_micro_batches = 1);

// ZeRO-1's ownership of whole parameters of element counts `sizes` over `world` ranks: largest
// first to the rank holding the fewest elements so far (the lowest rank on ties).
std::vector<int32_t> owners_by_size(const std::vector<int64_t>& sizes, int32_t world);

}  // namespace verlpp::train
