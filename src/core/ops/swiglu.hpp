// ops: SwiGLU's product silu(gate) * up and its backward through a plugin's silu_mul and
// silu_mul_backward (ABI 1.2), or the contract's formulas in LibTorch ops (silu and its
// derivative in fp32) where the plugin (or a null `kernels`) has none: both round where HF's
// forward and autograd's backward round.
#pragma once

#include <ATen/core/Tensor.h>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::ops {

// out = round(round(silu(gate)) * up). gate, up, out [N, F], one f32/bf16/f16 dtype, columns
// dense, any row stride (gate and up may be the two halves of one [N, 2F] tensor).
void silu_mul(const hw::Kernels* kernels, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& out);

// grad_up = grad_out * silu(gate); grad_gate = silu'(gate) * (grad_out * up), as autograd
// computes them. Shapes as silu_mul's; grad_gate and grad_up may be halves of one tensor.
void silu_mul_backward(const hw::Kernels* kernels, const at::Tensor& gate, const at::Tensor& up,
                       const at::Tensor& grad_out, const at::Tensor& grad_gate, const at::Tensor& grad_up);

}  // namespace verlpp::ops
