// device_clip and plugin_adamw_update (plugin_adamw.hpp).
#include "plugin_adamw.hpp"

#include <verlpp/core/error.hpp>

#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/stack.h>

#include <limits>
#include <utility>

namespace verlpp::train::detail {
namespace {

// Per-tensor L2 norms in fp32: one multi-tensor launch where LibTorch's _foreach_norm takes an
// output dtype (2.3+), which keeps a 16-bit gradient's norm from being rounded to 16 bits.
template <class List>
auto norms_f32(const List& grads, int) -> decltype(at::_foreach_norm(grads, 2, at::kFloat)) {
  return at::_foreach_norm(grads, 2, at::kFloat);
}
template <class List>
std::vector<at::Tensor> norms_f32(const List& grads, long) {
  std::vector<at::Tensor> out;
  for (const auto& g : grads) out.push_back(at::linalg_vector_norm(g, 2, c10::nullopt, false, at::kFloat));
  return out;
}

}  // namespace

DeviceClip device_clip(const std::vector<at::Tensor>& grads, double max_norm) {
  VERLPP_CHECK(!grads.empty(), "device_clip: no gradients");
  const at::TensorList list(grads);
  const std::vector<at::Tensor> norms = norms_f32(list, 0);
  DeviceClip clip;
  clip.norm = at::stack(norms).norm();
  // PyTorch's clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6), clamped at 1, in the
  // norm's dtype on the device.
  at::Tensor scale = clip.norm.new_full({}, max_norm).div_(clip.norm.add(1e-6)).clamp_max_(1.0);
  clip.scale = scale.masked_fill_(clip.norm.isfinite().logical_not(), std::numeric_limits<double>::quiet_NaN());
  return clip;
}

void plugin_adamw_update(const hw::Kernels& kernels, const AdamwGroup& group, const AdamWConfig& config, double lr,
                         const at::Tensor& grad_scale) {
  verlpp_adamw_options options{};
  options.struct_size = sizeof(options);
  options.lr = lr;
  options.beta1 = config.beta1;
  options.beta2 = config.beta2;
  options.eps = config.eps;
  options.weight_decay = config.weight_decay;
  options.step = group.step;
  ops::adamw_update(&kernels, group.tensors, options, grad_scale);
}

}  // namespace verlpp::train::detail
