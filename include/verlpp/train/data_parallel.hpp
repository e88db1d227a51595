// Data parallelism for the trainers (actor, critic, SFT): which rows of a batch this rank
// works on (verl's dispatch: equal counts per rank, token load balanced by the Karmarkar-Karp
// partition of attention-mask lengths), the results gathered back into the batch's order, and
// gradients summed over ranks. Losses are already scaled by the whole mini-batch's token and
// row counts, so the summed gradient equals the one-rank gradient of the same global batch.
#pragma once

#include <verlpp/data/batch.hpp>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace verlpp::hw {
class ProcessGroup;
}

namespace verlpp::train {

class DataParallel {
 public:
  // One rank (no group): every row is local, reductions are identities.
  DataParallel() = default;
  // Ranks of `group`; `device` is where this rank's tensors live (collectives run there).
  DataParallel(const hw::ProcessGroup* group, c10::Device device) : group_(group), device_(device) {}

  int32_t rank() const;
  int32_t world_size() const;
  bool is_distributed() const { return world_size() > 1; }
  const hw::ProcessGroup* group() const { return group_; }

  // Row groups of `batch`, one per rank, balanced by attention_mask length with equal counts.
  // Error when the rows do not divide by the world size.
  std::vector<std::vector<int64_t>> partition(const data::Batch& batch) const;
  // This rank's rows of `batch` (the batch itself with one rank), from `parts` or partition().
  data::Batch local_rows(const data::Batch& batch, const std::vector<std::vector<int64_t>>& parts) const;
  data::Batch local_rows(const data::Batch& batch) const;
  // Each rank's `local` result [rows_r, ...] back in the batch's row order [B, ...].
  at::Tensor gather(const at::Tensor& local, const std::vector<std::vector<int64_t>>& parts) const;

  // Sums the gradients of `params` over ranks in place (an undefined gradient counts as zero).
  // Buckets of at most `bucket_elements` elements bound the extra memory.
  void all_reduce_gradients(const std::vector<at::Tensor>& params, int64_t bucket_elements = int64_t(1) << 24) const;
  // Sums each value over ranks (metrics), in place.
  void all_reduce_sum(std::vector<double>& values) const;
  // The largest `value` of any rank (collective; `value` itself with one rank).
  int64_t max_over_ranks(int64_t value) const;
  // `t` of rank `root` on every rank (contiguous, on this rank's device).
  void broadcast(at::Tensor& t, int32_t root) const;

  // ZeRO-1 ownership: each parameter's owner rank, whole parameters assigned largest first to
  // the rank holding the fewest elements so far (the same answer on every rank).
  std::vector<int32_t> owners(const std::vector<at::Tensor>& params) const;
  // Every parameter's values from its owner (one broadcast of a flat buffer per owner).
  void broadcast_from_owners(const std::vector<at::Tensor>& params, const std::vector<int32_t>& owners) const;

 private:
  const hw::ProcessGroup* group_ = nullptr;
  c10::Device device_ = c10::Device(c10::kCPU);
};

}  // namespace verlpp::train
