// adamw_update (adamw.hpp): DLPack views of every list for the kernel, or the reference loop.
#include "adamw.hpp"

#include "kernel_call.hpp"

#include <verlpp/core/error.hpp>

#include <ATen/TensorOperators.h>
#include <c10/core/GradMode.h>

#include <cmath>

namespace verlpp::ops {
using detail::KernelId;

namespace {

void call_kernel(const hw::Kernels& kernels, const AdamwTensors& t, const verlpp_adamw_options& options,
                 const at::Tensor& grad_scale) {
  using hw::detail::dl_view;
  const size_t n = t.params.size();
  std::vector<DLTensor> views;
  views.reserve(5 * n);
  auto view_all = [&](const std::vector<at::Tensor>& list) {
    const size_t first = views.size();
    for (const auto& x : list) views.push_back(dl_view(x));
    return first;
  };
  const size_t p0 = view_all(t.params), g0 = view_all(t.grads), m0 = view_all(t.exp_avg), v0 = view_all(t.exp_avg_sq),
               c0 = view_all(t.copies);
  std::vector<DLTensor*> params(n), exp_avg(n), exp_avg_sq(n), copies(t.copies.empty() ? 0 : n);
  std::vector<const DLTensor*> grads(n);
  for (size_t i = 0; i < n; ++i) {
    params[i] = &views[p0 + i];
    grads[i] = &views[g0 + i];
    exp_avg[i] = &views[m0 + i];
    exp_avg_sq[i] = &views[v0 + i];
    if (!copies.empty()) copies[i] = &views[c0 + i];
  }
  kernels.call<KernelId::adamw_update>(int32_t(n), params.data(), grads.data(), exp_avg.data(), exp_avg_sq.data(),
                                       copies.empty() ? nullptr : copies.data(), &options, detail::Operand(grad_scale),
                                       detail::kernel_stream(kernels, t.params.front()));
}

// plugin_abi.h's update in fp32, its scalars computed in double and rounded once.
void reference(const AdamwTensors& t, const verlpp_adamw_options& o, const at::Tensor& grad_scale) {
  if (grad_scale.defined() && !std::isfinite(grad_scale.item<float>())) return;  // the step is skipped
  const c10::NoGradGuard
      no_grad;  // parameters may be leaves that require grad; the kernel's writes are not recorded either
  const double step = double(o.step);
  const float decay = float(1.0 - double(float(o.lr * o.weight_decay)));
  const float step_size = float(o.lr / (1.0 - std::pow(o.beta1, step)));
  const float bias_correction2_sqrt = float(std::sqrt(1.0 - std::pow(o.beta2, step)));
  for (size_t i = 0; i < t.params.size(); ++i) {
    at::Tensor g = t.grads[i].to(at::kFloat);
    if (grad_scale.defined()) g = g * grad_scale.reshape({}).to(at::kFloat);
    t.params[i].mul_(decay);
    t.exp_avg[i].add_((g - t.exp_avg[i]) * float(1.0 - o.beta1));
    t.exp_avg_sq[i].mul_(float(o.beta2)).add_(g * g * float(1.0 - o.beta2));
    t.params[i].sub_(t.exp_avg[i] * step_size / (t.exp_avg_sq[i].sqrt() / bias_correction2_sqrt + float(o.eps)));
    if (!t.copies.empty()) t.copies[i].copy_(t.params[i]);
  }
}

}  // namespace

void adamw_update(const hw::Kernels* kernels, const AdamwTensors& tensors, const verlpp_adamw_options& options,
                  const at::Tensor& grad_scale) {
  const size_t n = tensors.params.size();
  VERLPP_CHECK(tensors.grads.size() == n && tensors.exp_avg.size() == n && tensors.exp_avg_sq.size() == n &&
                   (tensors.copies.empty() || tensors.copies.size() == n),
               "ops::adamw_update: list lengths differ ({} params)", n);
  if (n == 0) return;
  if (detail::offered(kernels, KernelId::adamw_update)) return call_kernel(*kernels, tensors, options, grad_scale);
  reference(tensors, options, grad_scale);
}

}  // namespace verlpp::ops
