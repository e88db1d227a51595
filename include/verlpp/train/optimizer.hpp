// The optimizer step shared by the actor and the critic: AdamW (LibTorch's) over a model's
// parameters, the LR from a schedule, gradient clipping as torch.nn.utils.clip_grad_norm_, and a
// step whose gradient norm is not finite skipped (weights kept, counted), as verl does.
#pragma once

#include <verlpp/train/lr_schedule.hpp>

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

namespace verlpp::train {

struct AdamWConfig {
  double weight_decay = 0.01;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double grad_clip = 1.0;  // max L2 norm of all gradients together
};

class OptimizerStep {
 public:
  OptimizerStep(std::vector<at::Tensor> params, AdamWConfig config, LrSchedule schedule);
  ~OptimizerStep();

  // Sets the LR for update number `update` (0-based) and returns it.
  double set_lr_for_update(int64_t update);
  void zero_grad();
  // Clips, then steps unless the norm is not finite. Returns the norm before clipping.
  double clip_and_step();

  int64_t steps() const { return steps_; }
  int64_t skipped() const { return skipped_; }
  bool last_step_skipped() const { return last_skipped_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  AdamWConfig config_;
  LrSchedule schedule_;
  int64_t steps_ = 0, skipped_ = 0;
  bool last_skipped_ = false;
};

// torch.nn.utils.clip_grad_norm_ (L2): scales every gradient by min(1, max_norm / (norm + 1e-6))
// when the norm is finite; returns the norm before clipping.
double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace verlpp::train
