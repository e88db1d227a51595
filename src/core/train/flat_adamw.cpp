// AdamW on flat vectors (flat_adamw.hpp). adamw_flat follows torch::optim::AdamW::step: decay
// the weights, update the two moments, then per run of one step count the bias-corrected update.
#include "flat_adamw.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/train/optimizer.hpp>

#include <ATen/Parallel.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <cmath>

#if __has_include(<ATen/ops/_fused_adamw.h>)
#include <ATen/ops/_fused_adamw.h>
#define VERLPP_HAVE_FUSED_ADAMW 1
#endif

namespace verlpp::train::detail {

void adamw_flat(const at::Tensor& values, const at::Tensor& grad, const at::Tensor& exp_avg,
                const at::Tensor& exp_avg_sq, const std::vector<AdamwRun>& runs, const AdamWConfig& c, double lr) {
  if (runs.empty()) return;
#ifdef VERLPP_HAVE_FUSED_ADAMW
  if (values.is_cuda() && values.scalar_type() == at::kFloat) {
    std::vector<at::Tensor> ps, gs, ms, vs, counts;
    for (const AdamwRun& run : runs) {
      ps.push_back(values.narrow(0, run.begin, run.length));
      gs.push_back(grad.narrow(0, run.begin, run.length));
      ms.push_back(exp_avg.narrow(0, run.begin, run.length));
      vs.push_back(exp_avg_sq.narrow(0, run.begin, run.length));
      counts.push_back(at::tensor({float(run.step)}, values.options()).squeeze(0));
    }
    at::_fused_adamw_(ps, gs, ms, vs, {}, counts, lr, c.beta1, c.beta2, c.weight_decay, c.eps, /*amsgrad=*/false,
                      /*maximize=*/false);
    return;
  }
#endif
  // Over the runs' span only (the vectors may hold elements that no run covers).
  const int64_t begin = runs.front().begin, end = runs.back().begin + runs.back().length;
  at::Tensor p = values.narrow(0, begin, end - begin), g = grad.narrow(0, begin, end - begin);
  at::Tensor m = exp_avg.narrow(0, begin, end - begin), v = exp_avg_sq.narrow(0, begin, end - begin);
  if (c.weight_decay != 0) p.mul_(1 - lr * c.weight_decay);
  m.mul_(c.beta1).add_(g, 1 - c.beta1);
  v.mul_(c.beta2).addcmul_(g, g, 1 - c.beta2);
  for (const AdamwRun& run : runs) {
    const double correction1 = 1 - std::pow(c.beta1, double(run.step));
    const double correction2 = 1 - std::pow(c.beta2, double(run.step));
    at::Tensor denom = exp_avg_sq.narrow(0, run.begin, run.length).sqrt().div(std::sqrt(correction2)).add_(c.eps);
    values.narrow(0, run.begin, run.length)
        .addcdiv_(exp_avg.narrow(0, run.begin, run.length), denom, -lr / correction1);
  }
}

void adamw_host(const at::Tensor& values, const at::Tensor& grad, const at::Tensor& exp_avg,
                const at::Tensor& exp_avg_sq, const std::vector<AdamwRun>& runs, const AdamWConfig& c, double lr) {
  for (const at::Tensor* t : {&values, &grad, &exp_avg, &exp_avg_sq})
    VERLPP_CHECK(t->is_cpu() && t->is_contiguous() && t->scalar_type() == at::kFloat,
                 "adamw_host: every tensor must be a contiguous fp32 host tensor, got {} on {}",
                 c10::toString(t->scalar_type()), t->device().str());
  float* p = values.data_ptr<float>();
  const float* g = grad.data_ptr<float>();
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  // The scalars as LibTorch's float kernels take them (each double rounded to float once).
  const float decay = float(1 - lr * c.weight_decay);
  const float b1 = float(c.beta1), b2 = float(c.beta2), one_minus_b1 = float(1 - c.beta1),
              one_minus_b2 = float(1 - c.beta2), eps = float(c.eps);
  const bool decays = c.weight_decay != 0;
  for (const AdamwRun& run : runs) {
    const double correction1 = 1 - std::pow(c.beta1, double(run.step));
    const float root2 = float(std::sqrt(1 - std::pow(c.beta2, double(run.step))));
    const float step_size = float(-lr / correction1);
    // Grain: about 64K elements a task, so that every core streams a long stretch of memory.
    at::parallel_for(run.begin, run.begin + run.length, int64_t(1) << 16, [&](int64_t from, int64_t to) {
      for (int64_t i = from; i < to; ++i) {
        float pi = decays ? p[i] * decay : p[i];
        const float gi = g[i];
        const float mi = m[i] * b1 + one_minus_b1 * gi;
        const float vi = v[i] * b2 + one_minus_b2 * gi * gi;
        const float denom = std::sqrt(vi) / root2 + eps;
        pi = pi + step_size * (mi / denom);
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
      }
    });
  }
}

std::vector<AdamwRun> runs_within(const std::vector<AdamwRun>& runs, int64_t begin, int64_t length) {
  std::vector<AdamwRun> out;
  const int64_t end = begin + length;
  for (const AdamwRun& run : runs) {
    const int64_t b = std::max(begin, run.begin), e = std::min(end, run.begin + run.length);
    if (b < e) out.push_back({b - begin, e - b, run.step});
  }
  return out;
}

}  // namespace verlpp::train::detail
