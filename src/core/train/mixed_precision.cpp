// MixedPrecision: the compute copy and the two transfers between it and the fp32 masters.
#include <verlpp/train/mixed_precision.hpp>

#include <verlpp/core/error.hpp>

#include <ATen/core/grad_mode.h>

namespace verlpp::train {

MixedPrecision::MixedPrecision(model::DecoderLM& master, at::ScalarType compute_dtype) : master_(master) {
  if (compute_dtype == master_.options().dtype) return;
  VERLPP_CHECK(compute_dtype == at::kBFloat16 || compute_dtype == at::kHalf || compute_dtype == at::kFloat,
               "mixed precision: compute dtype {} is not bfloat16, float16 or float32", c10::toString(compute_dtype));
  model::ModelOptions options = master_.options();
  options.dtype = compute_dtype;
  options.requires_grad = true;
  compute_.emplace(master_.config(), options);
  compute_->set_gradient_checkpointing(master_.gradient_checkpointing());
  refresh_compute();
}

void MixedPrecision::accumulate_gradients() {
  if (!compute_) return;
  at::NoGradGuard no_grad;
  const auto& masters = master_.named_parameters();
  const auto& computes = compute_->named_parameters();
  for (size_t i = 0; i < masters.size(); ++i) {
    at::Tensor& cp = const_cast<at::Tensor&>(computes[i].second);
    if (!cp.grad().defined()) continue;
    at::Tensor& mp = const_cast<at::Tensor&>(masters[i].second);
    if (!mp.grad().defined()) {
      mp.mutable_grad() = cp.grad().to(mp.scalar_type());  // the first backward: one cast, no zero fill
    } else {
      mp.mutable_grad().add_(cp.grad());  // add_ promotes the 16-bit gradient into the fp32 sum
    }
    cp.mutable_grad() = at::Tensor();
  }
}

void MixedPrecision::refresh_compute() {
  if (!compute_) return;
  at::NoGradGuard no_grad;
  const auto& masters = master_.named_parameters();
  const auto& computes = compute_->named_parameters();
  for (size_t i = 0; i < masters.size(); ++i) computes[i].second.detach().copy_(masters[i].second.detach());
}

}  // namespace verlpp::train
