// ops: ABI 1.4's adamw_update (one multi-tensor AdamW step, the mixed-precision casts folded in)
// through a plugin's kernel, or the same formula in fp32 LibTorch ops, tensor by tensor, where
// the plugin (or a null `kernels`) has none. The reference reads a non-finite grad_scale on the
// host (one wait) to skip the step, as the kernel skips it on the device.
#pragma once

#include <verlpp/plugin_abi.h>

#include <ATen/core/Tensor.h>

#include <vector>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::ops {

// The tensors of one call: params, exp_avg, exp_avg_sq f32, contiguous, updated in place; grads
// of their shapes, one f32/bf16/f16 dtype; copies empty or one per param (one dtype), written
// with round(param) after the update.
struct AdamwTensors {
  std::vector<at::Tensor> params, grads, exp_avg, exp_avg_sq, copies;
};

// One AdamW step of every tensor with `options` (plugin_abi.h's formula; step counts from 1),
// gradients scaled by grad_scale (f32, one element, on the tensors' device; undefined = 1); a
// non-finite scale writes nothing.
void adamw_update(const hw::Kernels* kernels, const AdamwTensors& tensors, const verlpp_adamw_options& options,
                  const at::Tensor& grad_scale);

}  // namespace verlpp::ops
