// ops: RMSNorm and ABI 1.3's residual add fused with it, through a plugin's rms_norm and
// add_rms_norm, or the model's own RMSNorm where the plugin (or a null `kernels`) has none. The
// kernels round the normalised value before the weight multiply (HF's order); so does the
// reference (model::rms_norm), up to LibTorch's fused rms_norm op for 16-bit inputs.
#pragma once

#include <ATen/core/Tensor.h>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::ops {

// out = x / sqrt(mean(x^2) + eps) * weight, rows of x [N, D] (contiguous; out likewise, weight [D],
// one f32/bf16/f16 dtype).
void rms_norm(const hw::Kernels* kernels, const at::Tensor& x, const at::Tensor& weight, double eps,
              const at::Tensor& out);

// residual += x (rounded once to the dtype) in place, then out = rms_norm(residual). x,
// residual, out [N, D] contiguous, one dtype; out overlaps neither input.
void add_rms_norm(const hw::Kernels* kernels, const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                  double eps, const at::Tensor& out);

}  // namespace verlpp::ops
