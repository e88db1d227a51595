// ops: one token per row through a plugin's `sample` kernel, or the reference sampler in LibTorch
// ops (batched, any device) where the plugin (or a null `kernels`) has none. Both draw with the
// same counter-based recipe (uniform_draw of the row's seed and the step), so a row's token
// depends only on its logits, its settings, its seed and the step.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::ops {

// splitmix64's finaliser, the hash of every seed derivation and draw.
uint64_t splitmix64(uint64_t x);
// The uniform draw in [0, 1) of (seed, step): 53 bits of splitmix64 of both.
double uniform_draw(uint64_t seed, uint64_t step);

// Per-row settings of a reference draw, on the host: temperature (0 = greedy), top_k (0 or >= V:
// all), top_p in (0, 1], and the row's draw in [0, 1).
struct RowDraws {
  std::vector<float> temperature, top_p, draws;
  std::vector<int64_t> top_k;
};

// The reference sampler over logits [B, V]: greedy rows take the first argmax; the others keep
// the top_k most likely tokens, then the shortest prefix of them whose mass reaches top_p of
// theirs, and pick by inverse CDF at the row's draw. Returns tokens [B] int64 and their log-probs
// [B] f32 under softmax(logits / temperature) before filtering (temperature 1 for greedy rows),
// on logits' device.
std::pair<at::Tensor, at::Tensor> sample_reference(const at::Tensor& logits, const RowDraws& rows);

// The kernel's contract: logits [B, V] (f32, or bf16/f16 for plugins of ABI 1.3+; the reference
// takes any float dtype), temperature, top_p [B] f32, top_k [B] int32, seeds [B] int64 (the bits
// of uint64 seeds), `step`; writes tokens [B] int64 and logprobs [B] f32. The reference reads the
// settings on the host (one wait).
void sample(const hw::Kernels* kernels, const at::Tensor& logits, const at::Tensor& temperature,
            const at::Tensor& top_k, const at::Tensor& top_p, const at::Tensor& seeds, uint64_t step,
            const at::Tensor& tokens, const at::Tensor& logprobs);

}  // namespace verlpp::ops
