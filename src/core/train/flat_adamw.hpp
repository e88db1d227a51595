// AdamW on flat fp32 vectors, for the optimizers that keep their state flat (ZeRO-2's shard,
// the sharded and offloaded state of sharded_optimizer.hpp). Two forms of one update:
// adamw_flat runs torch::optim::AdamW's arithmetic op for op (LibTorch 1.13/2.x C++; on CUDA
// LibTorch's fused kernel where this build has it), so it equals the replicated optimizer's
// step; adamw_host is one multi-threaded pass over host memory for offloaded state, where the
// ops' eight passes cost three times the memory traffic (not bit-identical to the ops: LibTorch's
// vectorised kernels contract multiply-adds, this loop rounds each operation as written).
// Internal to the train layer.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace verlpp::train {

struct AdamWConfig;

namespace detail {

// Elements [begin, begin + length) of a flat vector whose parameters all have taken `step` steps
// (this one included): they share AdamW's bias corrections.
struct AdamwRun {
  int64_t begin = 0, length = 0, step = 1;
};

// values, exp_avg, exp_avg_sq updated in place from grad (all [n] fp32 on one device).
void adamw_flat(const at::Tensor& values, const at::Tensor& grad, const at::Tensor& exp_avg,
                const at::Tensor& exp_avg_sq, const std::vector<AdamwRun>& runs, const AdamWConfig& config, double lr);

// The same update as one pass over host memory (all contiguous fp32 CPU tensors [n]); `runs`
// relative to element 0 of the tensors.
void adamw_host(const at::Tensor& values, const at::Tensor& grad, const at::Tensor& exp_avg,
                const at::Tensor& exp_avg_sq, const std::vector<AdamwRun>& runs, const AdamWConfig& config, double lr);

// `runs` restricted to [begin, begin + length) and made relative to `begin`.
std::vector<AdamwRun> runs_within(const std::vector<AdamwRun>& runs, int64_t begin, int64_t length);

}  // namespace detail
}  // namespace verlpp::train
