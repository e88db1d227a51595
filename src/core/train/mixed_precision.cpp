// MixedPrecision: the compute copy and the two transfers between it and the fp32 masters.
#include <verlpp/train/mixed_precision.hpp>

#include <verlpp/core/error.hpp>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty_like.h>

// LibTorch 2.1+: one multi-tensor kernel for a list of copies, casts included, where the
// per-parameter copy_ / to() launched ~290 kernels (and as many host round trips through the
// dispatcher) twice per optimizer step for a Qwen2.5-0.5B-sized model.
#if __has_include(<ATen/ops/_foreach_copy.h>)
#include <ATen/ops/_foreach_copy.h>
#define VERLPP_HAVE_FOREACH_COPY 1
#endif

#include <vector>

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
  // The copy's weights follow the masters': one version counts both (an engine sharing the
  // copy sees a write to the masters as a change).
  compute_->share_weights_version(master_);
  refresh_compute();
}

namespace {

// dst[i].copy_(src[i]) for every i (casting), as one multi-tensor launch where LibTorch has it.
void copy_all(const std::vector<at::Tensor>& dst, const std::vector<at::Tensor>& src) {
  if (dst.empty()) return;
#ifdef VERLPP_HAVE_FOREACH_COPY
  at::_foreach_copy_(dst, src);
#else
  for (size_t i = 0; i < dst.size(); ++i) const_cast<at::Tensor&>(dst[i]).copy_(src[i]);
#endif
}

}  // namespace

void MixedPrecision::accumulate_gradients() {
  if (!compute_) return;
  at::NoGradGuard no_grad;
  flush_gradients();  // an earlier backward's deferred gradients first
  const auto& masters = master_.named_parameters();
  const auto& computes = compute_->named_parameters();
  std::vector<at::Tensor> fresh, fresh_src;  // the first backward's gradients: one cast each, no zero fill
  for (size_t i = 0; i < masters.size(); ++i) {
    at::Tensor& cp = const_cast<at::Tensor&>(computes[i].second);
    if (!cp.grad().defined()) continue;
    at::Tensor& mp = const_cast<at::Tensor&>(masters[i].second);
    if (mp.grad().defined()) {
      mp.mutable_grad().add_(cp.grad());  // add_ promotes the 16-bit gradient into the fp32 sum
    } else if (defer_) {
      if (deferred_.empty()) deferred_.resize(masters.size());
      deferred_[i] = cp.grad();  // moved out, so that the next backward starts a fresh gradient
    } else {
      mp.mutable_grad() = at::empty_like(mp);
      fresh.push_back(mp.grad());
      fresh_src.push_back(cp.grad());  // kept alive here until the copy below
    }
    cp.mutable_grad() = at::Tensor();
  }
  copy_all(fresh, fresh_src);
}

void MixedPrecision::flush_gradients() {
  if (deferred_.empty()) return;
  at::NoGradGuard no_grad;
  const auto& masters = master_.named_parameters();
  std::vector<at::Tensor> fresh, fresh_src;
  for (size_t i = 0; i < deferred_.size(); ++i) {
    if (!deferred_[i].defined()) continue;
    at::Tensor& mp = const_cast<at::Tensor&>(masters[i].second);
    if (mp.grad().defined()) {
      mp.mutable_grad().add_(deferred_[i]);
    } else {
      mp.mutable_grad() = at::empty_like(mp);
      fresh.push_back(mp.grad());
      fresh_src.push_back(deferred_[i]);
    }
  }
  copy_all(fresh, fresh_src);
  deferred_.clear();
}

std::vector<at::Tensor> MixedPrecision::take_deferred_gradients() {
  std::vector<at::Tensor> out = std::move(deferred_);
  deferred_.clear();
  if (out.empty()) out.resize(master_.named_parameters().size());
  return out;
}

std::vector<at::Tensor> MixedPrecision::compute_parameters() const {
  std::vector<at::Tensor> out;
  if (!compute_) return out;
  for (const auto& [name, p] : compute_->named_parameters()) out.push_back(p);
  return out;
}

void MixedPrecision::refresh_compute() {
  if (!compute_) return;
  at::NoGradGuard no_grad;
  const auto& masters = master_.named_parameters();
  const auto& computes = compute_->named_parameters();
  std::vector<at::Tensor> dst, src;
  for (size_t i = 0; i < masters.size(); ++i) {
    dst.push_back(computes[i].second.detach());
    src.push_back(masters[i].second.detach());
  }
  copy_all(dst, src);
  compute_->note_weights_changed();  // an engine sharing the compute copy sees the change
}

}  // namespace verlpp::train
