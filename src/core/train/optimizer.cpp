// OptimizerStep: the one train file that includes LibTorch's optimizer headers (the C++
// frontend needs full ATen), hence the #undef of the lean-include guard below.
#undef TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <verlpp/train/optimizer.hpp>

#include <verlpp/core/error.hpp>

#include <torch/optim/adamw.h>

#include <ATen/ops/stack.h>

#include <cmath>

namespace verlpp::train {

double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  // The same formula as PyTorch's clip_grad_norm_, written out: LibTorch 1.13's C++
  // torch/nn/utils/clip_grad.h does not compile on its own (it needs torch:: ops in scope).
  std::vector<at::Tensor> norms;
  for (const auto& p : params)
    if (p.grad().defined()) norms.push_back(p.grad().detach().norm());
  if (norms.empty()) return 0.0;
  const double total = at::stack(norms).norm().item<double>();
  const double coef = std::min(1.0, max_norm / (total + 1e-6));
  if (std::isfinite(total) && coef < 1.0)
    for (const auto& p : params)
      if (p.grad().defined()) p.grad().detach().mul_(coef);
  return total;
}

struct OptimizerStep::Impl {
  std::vector<at::Tensor> params;
  std::unique_ptr<torch::optim::AdamW> adamw;
};

OptimizerStep::OptimizerStep(std::vector<at::Tensor> params, AdamWConfig config, LrSchedule schedule)
    : impl_(std::make_unique<Impl>()), config_(config), schedule_(std::move(schedule)) {
  VERLPP_CHECK(config_.grad_clip > 0, "grad_clip {} must be > 0", config_.grad_clip);
  impl_->params = std::move(params);
  torch::optim::AdamWOptions options(schedule_.lr(0));
  options.betas({config_.beta1, config_.beta2}).eps(config_.eps).weight_decay(config_.weight_decay);
  impl_->adamw = std::make_unique<torch::optim::AdamW>(impl_->params, options);
}

OptimizerStep::~OptimizerStep() = default;

double OptimizerStep::set_lr_for_update(int64_t update) {
  const double lr = schedule_.lr(update);
  for (auto& group : impl_->adamw->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  return lr;
}

void OptimizerStep::zero_grad() { impl_->adamw->zero_grad(); }

double OptimizerStep::clip_and_step() {
  const double norm = clip_grad_norm(impl_->params, config_.grad_clip);
  last_skipped_ = !std::isfinite(norm);
  if (last_skipped_) {
    ++skipped_;
    impl_->adamw->zero_grad();
  } else {
    impl_->adamw->step();
    ++steps_;
  }
  return norm;
}

}  // namespace verlpp::train
