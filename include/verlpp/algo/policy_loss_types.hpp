// Inputs, config and outputs shared by the policy losses, and the signature the registry
// stores. Shapes: B = batch, T = response_length; log-probs are of the sampled tokens.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/ops/zeros.h>

#include <functional>
#include <string>

#include <verlpp/algo/agg_loss.hpp>
#include <verlpp/algo/common.hpp>

namespace verlpp::algo {

struct PolicyLossInputs {
  torch::Tensor old_log_prob;        // [B, T] float: log π_old (rollout-time policy), no grad
  torch::Tensor log_prob;            // [B, T] float: log π_θ, requires grad when training
  torch::Tensor advantages;          // [B, T] float
  torch::Tensor response_mask;       // [B, T] bool/int/float
  torch::Tensor rollout_is_weights;  // optional [B, T] float: per-token IS weights (multiplied in)
};

// verl's actor config fields used by the losses. Defaults are verl's (actor.yaml).
struct PolicyLossConfig {
  double clip_ratio_low = 0.2, clip_ratio_high = 0.2;  // ε_low, ε_high
  double clip_ratio_c = 3.0;                           // dual-clip bound c (> 1), vanilla
  std::string loss_agg_mode = "token-mean";            // gspo and sapo always use seq-mean-token-mean
  double tau_pos = 1.0, tau_neg = 1.05;                // sapo gate temperatures (A > 0 / A <= 0)
  double clip_cov_ratio = 0.0002;                      // clip_cov: fraction of tokens to detach
  double clip_cov_lb = 1.0, clip_cov_ub = 5.0;         // clip_cov: covariance window
  double kl_cov_ratio = 0.0002;                        // kl_cov: fraction of tokens penalised
  double ppo_kl_coef = 0.1;                            // kl_cov: coefficient of |log ratio|
  AggLossOptions agg;  // global-batch numbers passed to agg_loss (verl: global_batch_info)
  // clip_cov's random choice of tokens; undefined = ATen's default CPU generator (as verl).
  at::Generator generator;
};

// loss: 0-dim, differentiable; metrics: 0-dim, no grad. A metric a loss does not define (e.g.
// clipfrac of gpg) is 0.
struct PolicyLossOutput {
  torch::Tensor loss;            // aggregated policy-gradient loss
  torch::Tensor clipfrac;        // fraction of tokens where clipping was active
  torch::Tensor ppo_kl;          // masked mean of (old_log_prob − log_prob) (kl_cov: of |·|)
  torch::Tensor clipfrac_lower;  // fraction where the dual-clip lower bound was active
};

using PolicyLossFn = std::function<PolicyLossOutput(const PolicyLossInputs&, const PolicyLossConfig&)>;

namespace detail {

inline void check_policy_inputs(const PolicyLossInputs& in, const std::string& where) {
  check_2d(in.log_prob, "log_prob", where);
  check_floating(in.log_prob, "log_prob", where);
  check_same_shape(in.old_log_prob, "old_log_prob", in.log_prob, "log_prob", where);
  check_same_shape(in.advantages, "advantages", in.log_prob, "log_prob", where);
  check_same_shape(in.response_mask, "response_mask", in.log_prob, "log_prob", where);
  if (in.rollout_is_weights.defined())
    check_same_shape(in.rollout_is_weights, "rollout_is_weights", in.log_prob, "log_prob", where);
}

// pg_losses · rollout_is_weights when the weights are given.
inline torch::Tensor apply_is_weights(const torch::Tensor& pg_losses, const PolicyLossInputs& in) {
  return in.rollout_is_weights.defined() ? pg_losses * in.rollout_is_weights : pg_losses;
}

// A 0-dim zero for metrics a loss does not define.
inline torch::Tensor zero_metric(const torch::Tensor& like) { return at::zeros({}, like.options().dtype(at::kFloat)); }

}  // namespace detail

}  // namespace verlpp::algo
