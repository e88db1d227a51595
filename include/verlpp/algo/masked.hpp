// Masked reductions over response tokens: sum, mean, unbiased variance, whitening.
// They follow verl's torch_functional definitions: values outside the mask are zeroed with
// where() before the product (so a NaN in padding cannot leak in), the mean divides by
// (Σm + 1e-8), the variance is unbiased (× N/(N−1)), whitening uses rsqrt(var + 1e-8).
// The mask may be bool, integer or float; a float mask weights the values.
#pragma once

#include <ATen/ops/rsqrt.h>
#include <ATen/ops/where.h>

#include <verlpp/algo/common.hpp>

namespace verlpp::algo {

namespace detail {

// where(mask, values, 0) · mask, in place on the fresh where() result when that keeps the
// dtype out-of-place promotion would give (saves one full-size temporary; autograd-safe, as
// neither where() nor mul() needs its own output for backward).
inline torch::Tensor masked_values(const torch::Tensor& values, const torch::Tensor& mask) {
  torch::Tensor valid = at::where(mask.to(at::kBool), values, 0.0);
  if (at::promote_types(valid.scalar_type(), mask.scalar_type()) == valid.scalar_type()) return valid.mul_(mask);
  return valid * mask;
}

}  // namespace detail

// Σ values·mask over all elements (0-dim tensor). values: any float shape; mask: same shape.
inline torch::Tensor masked_sum(const torch::Tensor& values, const torch::Tensor& mask) {
  return detail::masked_values(values, mask).sum();
}

// Σ values·mask along `dim` (e.g. -1 for a per-row sum).
inline torch::Tensor masked_sum(const torch::Tensor& values, const torch::Tensor& mask, int64_t dim) {
  return detail::masked_values(values, mask).sum(dim);
}

// masked_sum / (Σmask + 1e-8) over all elements; 0 when the mask is empty.
inline torch::Tensor masked_mean(const torch::Tensor& values, const torch::Tensor& mask) {
  return masked_sum(values, mask) / (mask.sum() + 1e-8);
}

// masked_sum / (Σmask + 1e-8) along `dim`.
inline torch::Tensor masked_mean(const torch::Tensor& values, const torch::Tensor& mask, int64_t dim) {
  return masked_sum(values, mask, dim) / (mask.sum(dim) + 1e-8);
}

// Masked variance over all elements; unbiased multiplies by N/(N−1) with N = Σmask, which must
// then be neither 0 nor 1 (verl raises there too). Reads N on the host when unbiased.
inline torch::Tensor masked_var(const torch::Tensor& values, const torch::Tensor& mask, bool unbiased = true) {
  torch::Tensor mean = masked_mean(values, mask);
  torch::Tensor centered = values - mean;
  torch::Tensor variance = masked_mean(centered.square(), mask);
  if (unbiased) {
    torch::Tensor mask_sum = mask.sum();
    const double n = mask_sum.item<double>();
    VERLPP_CHECK(n != 0.0,
                 "masked_var: the mask of shape {} selects no element; the unbiased "
                 "variance needs at least two",
                 detail::shape_str(mask));
    VERLPP_CHECK(n != 1.0,
                 "masked_var: the mask of shape {} selects exactly one element; the "
                 "unbiased variance (x N/(N-1)) would divide by zero",
                 detail::shape_str(mask));
    variance = variance * (mask_sum / (mask_sum - 1));
  }
  return variance;
}

// (values − μ)·rsqrt(var + 1e-8) with μ and the unbiased var taken over the masked elements of
// the whole tensor. Every element is transformed (padding too); callers re-mask if they need.
// shift_mean = false adds μ back after scaling.
inline torch::Tensor masked_whiten(const torch::Tensor& values, const torch::Tensor& mask, bool shift_mean = true) {
  torch::Tensor mean = masked_mean(values, mask);
  torch::Tensor var = masked_var(values, mask);
  torch::Tensor scale = at::rsqrt(var + 1e-8);
  // In place on the fresh difference, unless autograd needs that difference for mul's backward.
  torch::Tensor whitened =
      values.requires_grad() || scale.requires_grad() ? (values - mean) * scale : (values - mean).mul_(scale);
  if (!shift_mean) whitened = whitened + mean;
  return whitened;
}

}  // namespace verlpp::algo
