// Learning-rate schedules as verl builds them (optim.lr_scheduler_type): linear warmup, then constant
// or cosine decay to min_lr_ratio. A schedule is a pure function of the step, so resuming a run
// needs only the step count.
#pragma once

#include <cstdint>
#include <string>

namespace verlpp::train {

struct LrScheduleOptions {
  double base_lr = 1e-6;           // optim.lr
  std::string style = "constant";  // optim.lr_scheduler_type: constant | cosine
  int64_t warmup_steps = 0;        // resolved from lr_warmup_steps / lr_warmup_steps_ratio
  int64_t total_steps = 1;         // optim.total_training_steps (injected by the trainer)
  double min_lr_ratio = 0.0;       // cosine floor, as a fraction of base_lr
  double num_cycles = 0.5;         // cosine: 0.5 = one half-wave from base_lr to the floor
};

// verl's rule: lr_warmup_steps if > 0, else int(lr_warmup_steps_ratio * total_steps).
int64_t resolve_warmup_steps(int64_t lr_warmup_steps, double lr_warmup_steps_ratio, int64_t total_steps);

class LrSchedule {
 public:
  explicit LrSchedule(LrScheduleOptions options);
  // `lr` at every step (no warmup, no decay); Error unless lr > 0.
  static LrSchedule constant(double lr);
  // The multiplier of base_lr at optimizer step `step` (0-based, as LambdaLR counts).
  double factor(int64_t step) const;
  // The learning rate at `step`.
  double lr(int64_t step) const { return options_.base_lr * factor(step); }
  const LrScheduleOptions& options() const { return options_; }

 private:
  LrScheduleOptions options_;
};

}  // namespace verlpp::train
