// LrSchedule: verl's get_constant_schedule_with_warmup and get_cosine_schedule_with_warmup.
#include <verlpp/train/lr_schedule.hpp>
#include <verlpp/core/error.hpp>

#include <algorithm>
#include <cmath>

namespace verlpp::train {

int64_t resolve_warmup_steps(int64_t lr_warmup_steps, double lr_warmup_steps_ratio, int64_t total_steps) {
  if (lr_warmup_steps > 0) return lr_warmup_steps;
  if (lr_warmup_steps_ratio < 0 || lr_warmup_steps_ratio > 1)
    throw Error("optim.lr_warmup_steps_ratio", fmt::format("{} must be in [0, 1]", lr_warmup_steps_ratio));
  return int64_t(lr_warmup_steps_ratio * double(total_steps));  // Python's int(): truncation
}

LrSchedule::LrSchedule(LrScheduleOptions options) : options_(std::move(options)) {
  if (options_.style != "constant" && options_.style != "cosine")
    throw Error("optim.lr_scheduler_type", fmt::format("'{}' is not one of constant, cosine", options_.style));
  if (!(options_.base_lr > 0) || !std::isfinite(options_.base_lr))
    throw Error("optim.lr", fmt::format("{} must be a positive finite number", options_.base_lr));
  if (options_.warmup_steps < 0)
    throw Error("optim.lr_warmup_steps", fmt::format("{} must be >= 0", options_.warmup_steps));
  if (options_.min_lr_ratio < 0 || options_.min_lr_ratio > 1)
    throw Error("optim.min_lr_ratio", fmt::format("{} must be in [0, 1]", options_.min_lr_ratio));
}

LrSchedule LrSchedule::constant(double lr) {
  LrScheduleOptions options;
  options.base_lr = lr;
  options.style = "constant";
  return LrSchedule(options);
}

double LrSchedule::factor(int64_t step) const {
  const double warmup = double(options_.warmup_steps);
  if (step < options_.warmup_steps) return double(step) / std::max(1.0, warmup);
  if (options_.style == "constant") return 1.0;
  const double progress = double(step - options_.warmup_steps) / std::max(1.0, double(options_.total_steps) - warmup);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * options_.num_cycles * 2.0 * progress));
  return std::max(0.0, options_.min_lr_ratio + (1.0 - options_.min_lr_ratio) * cosine);
}

}  // namespace verlpp::train
