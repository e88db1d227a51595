// ops: the LM head's softmax math through a plugin's logprob_entropy and logprob_backward
// (ABI 1.2), or LibTorch's reference where the plugin (or `kernels`, which may be null) has none.
// Outputs are caller-owned tensors written in place, so callers can hand in row slices of one
// buffer. The reference computes in fp32 from the logits as stored, as the kernels do.
#pragma once

#include <ATen/core/Tensor.h>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::ops {

// Per row of logits [N, V] (f32/bf16/f16; rows may be strided, columns dense): the log-prob of
// labels [N] int64 under softmax(logits / temperature) into logprob [N] f32, and that
// distribution's entropy into entropy [N] f32 when it is defined.
void logprob_entropy(const hw::Kernels* kernels, const at::Tensor& logits, const at::Tensor& labels, double temperature,
                     const at::Tensor& logprob, const at::Tensor& entropy);

// The gradient of a loss over logprob_entropy's outputs with respect to the logits, into
// out_grad [N, V] of logits' dtype (it may be logits itself): with z = logits / T and p =
// exp(z - lse), out = (g_lp ([j = label] - p) - g_ent p (z - mean_z)) / T. lse, mean_z [N] f32;
// grad_logprob [N] f32 or undefined (zero); mean_z and grad_entropy both or neither.
void logprob_backward(const hw::Kernels* kernels, const at::Tensor& logits, const at::Tensor& labels,
                      const at::Tensor& lse, const at::Tensor& grad_logprob, const at::Tensor& mean_z,
                      const at::Tensor& grad_entropy, double temperature, const at::Tensor& out_grad);

}  // namespace verlpp::ops
