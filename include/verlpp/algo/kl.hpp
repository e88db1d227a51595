// KL between the policy and the reference policy: the per-token estimators by name (k1/k2/k3
// family, extensible), the straight-through "+" form, the fixed and adaptive KL coefficient
// controllers, and apply_kl_penalty (the in-reward KL of PPO). Decision: a trailing '+' is
// handled here for every registered type (value of the named estimator, gradient of k2);
// verl's own '+' path asks its forward function for "k3+" and fails.
#pragma once

#include <ATen/ops/abs.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/exp.h>

#include <algorithm>
#include <memory>
#include <string>

#include <verlpp/algo/common.hpp>
#include <verlpp/algo/masked.hpp>

namespace verlpp::algo {

// A per-token KL estimate from (logprob, ref_logprob), both [B, T] float: returns [B, T].
using KLPenaltyFn = std::function<torch::Tensor(const torch::Tensor& logprob, const torch::Tensor& ref_logprob)>;

namespace detail {

inline torch::Tensor kl_k1(const torch::Tensor& logprob, const torch::Tensor& ref_logprob) {
  return logprob - ref_logprob;
}
inline torch::Tensor kl_abs(const torch::Tensor& logprob, const torch::Tensor& ref_logprob) {
  return (logprob - ref_logprob).abs();
}
inline torch::Tensor kl_k2(const torch::Tensor& logprob, const torch::Tensor& ref_logprob) {
  return 0.5 * (logprob - ref_logprob).square();
}
// Schulman's low-variance k3 = exp(d) − d − 1 with d = ref − logprob, d clamped to ±20 and the
// result to ±10 for stability.
inline torch::Tensor kl_k3(const torch::Tensor& logprob, const torch::Tensor& ref_logprob) {
  const torch::Tensor kl = at::clamp(ref_logprob - logprob, -20.0, 20.0);
  return at::clamp(at::exp(kl) - kl - 1, -10.0, 10.0);
}

inline void register_builtin_kl_penalties(Registry<KLPenaltyFn>& r) {
  r.add("kl", kl_k1);
  r.add("k1", kl_k1);
  r.add("abs", kl_abs);
  r.add("mse", kl_k2);
  r.add("k2", kl_k2);
  r.add("low_var_kl", kl_k3);
  r.add("k3", kl_k3);
}

}  // namespace detail

// The process-wide KL-type registry, with kl/k1, abs, mse/k2, low_var_kl/k3 in it.
inline Registry<KLPenaltyFn>& kl_penalty_registry() {
  static Registry<KLPenaltyFn> registry("KL penalty type", &detail::register_builtin_kl_penalties);
  return registry;
}

// Adds a user KL type; the '+' form then works for it too. Names may not end in '+'.
inline void register_kl_penalty(const std::string& name, KLPenaltyFn fn) {
  VERLPP_CHECK(name.empty() || name.back() != '+',
               "KL penalty type '{}' ends in '+', which is reserved for the straight-through "
               "form of a registered type",
               name);
  kl_penalty_registry().add(name, std::move(fn));
}

// The per-token KL estimate of type `type` (verl: core_algos.kl_penalty); logprob and
// ref_logprob [B, T] float, result [B, T]:
//   kl, k1 -> x;  abs -> |x|;  mse, k2 -> 0.5·x²;  low_var_kl, k3 -> clamp(e^d − d − 1, ±10)
// with x = logprob − ref_logprob and d = clamp(−x, ±20). "<type>+" is the straight-through form:
// value of <type>, gradient of k2, i.e. 0.5x² − sg(0.5x²) + sg(value).
inline torch::Tensor kl_penalty(const torch::Tensor& logprob, const torch::Tensor& ref_logprob,
                                const std::string& type) {
  VERLPP_CHECK(logprob.defined() && ref_logprob.defined() && logprob.sizes() == ref_logprob.sizes(),
               "kl_penalty('{}'): logprob {} and ref_logprob {} must be defined, same shape", type,
               detail::shape_str(logprob), detail::shape_str(ref_logprob));
  const bool straight_through = !type.empty() && type.back() == '+';
  const std::string base = straight_through ? type.substr(0, type.size() - 1) : type;
  const torch::Tensor forward = kl_penalty_registry().get(base)(logprob, ref_logprob);
  if (!straight_through) return forward;
  const torch::Tensor backward = detail::kl_k2(logprob, ref_logprob);
  return backward - backward.detach() + forward.detach();
}

// A KL coefficient β that the trainer may adapt after each batch.
class KLController {
 public:
  virtual ~KLController() = default;
  // Feeds the batch's measured KL; n_steps = number of rows (samples) in that batch.
  virtual void update(double current_kl, int64_t n_steps) = 0;
  virtual double value() const = 0;
};

// β constant (verl: FixedKLController).
class FixedKLController : public KLController {
 public:
  explicit FixedKLController(double kl_coef) : value_(kl_coef) {}
  void update(double, int64_t) override {}
  double value() const override { return value_; }

 private:
  double value_;
};

// Adaptive β (Ziegler et al. 2019; verl: AdaptiveKLController):
// e = clip(current_kl/target − 1, −0.2, 0.2); β ← β·(1 + e·n_steps/horizon).
class AdaptiveKLController : public KLController {
 public:
  AdaptiveKLController(double init_kl_coef, double target_kl, double horizon)
      : value_(init_kl_coef), target_(target_kl), horizon_(horizon) {
    VERLPP_CHECK(horizon > 0, "AdaptiveKLController: horizon must be > 0; got {}", horizon);
  }
  void update(double current_kl, int64_t n_steps) override {
    const double proportional_error = std::clamp(current_kl / target_ - 1.0, -0.2, 0.2);
    value_ *= 1.0 + proportional_error * static_cast<double>(n_steps) / horizon_;
  }
  double value() const override { return value_; }
  double target() const { return target_; }
  double horizon() const { return horizon_; }

 private:
  double value_;
  double target_;
  double horizon_;
};

// verl's get_kl_controller: type "fixed" or "adaptive" (target_kl and horizon used by adaptive).
inline std::unique_ptr<KLController> make_kl_controller(const std::string& type, double kl_coef, double target_kl = 0.0,
                                                        double horizon = 0.0) {
  if (type == "fixed") return std::make_unique<FixedKLController>(kl_coef);
  if (type == "adaptive") return std::make_unique<AdaptiveKLController>(kl_coef, target_kl, horizon);
  VERLPP_FAIL_AT("make_kl_controller", "unknown KL controller type '{}'; valid: adaptive, fixed", type);
}

struct KLRewardOutput {
  torch::Tensor token_level_rewards;  // [B, T] scores − β·kl·m
  double current_kl = 0.0;            // mean over rows of each row's masked-mean kl
  double kl_coef = 0.0;               // β used (the controller's value before its update)
};

// verl's apply_kl_penalty (ray_trainer): kl = kl_penalty(old_log_prob, ref_log_prob, type)·m;
// rewards = scores − β·kl; current_kl = mean over rows of masked_mean(kl, m, -1) (an empty row
// counts as 0); then ctrl.update(current_kl, B). All [B, T]; reads current_kl on the host.
inline KLRewardOutput apply_kl_penalty(const torch::Tensor& token_level_scores, const torch::Tensor& old_log_prob,
                                       const torch::Tensor& ref_log_prob, const torch::Tensor& response_mask,
                                       KLController& ctrl, const std::string& type = "kl") {
  const std::string where = "apply_kl_penalty";
  detail::check_2d(token_level_scores, "token_level_scores", where);
  detail::check_same_shape(old_log_prob, "old_log_prob", token_level_scores, "token_level_scores", where);
  detail::check_same_shape(ref_log_prob, "ref_log_prob", token_level_scores, "token_level_scores", where);
  detail::check_same_shape(response_mask, "response_mask", token_level_scores, "token_level_scores", where);
  const torch::Tensor kld = kl_penalty(old_log_prob, ref_log_prob, type) * response_mask;
  KLRewardOutput out;
  out.kl_coef = ctrl.value();
  out.token_level_rewards = token_level_scores - out.kl_coef * kld;
  out.current_kl = masked_mean(kld, response_mask, -1).mean(0).item<double>();
  ctrl.update(out.current_kl, token_level_scores.size(0));
  return out;
}

}  // namespace verlpp::algo
