// The optimizer step through a plugin's adamw_update (ABI 1.4): gradient clipping computed on
// the device (torch.nn.utils.clip_grad_norm_'s formula, in fp32 as PyTorch computes it), handed
// to the kernel as a device scalar, so the update is queued without waiting for the norm; a
// non-finite norm makes the kernel skip the step. Used by OptimizerStep::clip_and_step(MixedPrecision&).
#pragma once

#include "../ops/adamw.hpp"

#include <verlpp/train/optimizer.hpp>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::train::detail {

// The gradient norm over `grads` (any float dtypes; each norm taken in fp32) as a 0-dim fp32
// device tensor, and the factor every gradient is scaled by: min(1, max_norm / (norm + 1e-6)),
// NaN when the norm is not finite (which makes adamw_update skip the step).
struct DeviceClip {
  at::Tensor norm, scale;
};
DeviceClip device_clip(const std::vector<at::Tensor>& grads, double max_norm);

// One adamw_update call: tensors of one gradient dtype and one step count.
struct AdamwGroup {
  ops::AdamwTensors tensors;  // copies empty or one per param
  int64_t step = 0;           // the number of the update being made (from 1)
};
void plugin_adamw_update(const hw::Kernels& kernels, const AdamwGroup& group, const AdamWConfig& config, double lr,
                         const at::Tensor& grad_scale);

}  // namespace verlpp::train::detail
