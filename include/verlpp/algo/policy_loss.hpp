// Policy losses by name (verl's actor.policy_loss.loss_mode): the registry, extensible by
// users, and compute_policy_loss(). Built-ins: vanilla, gspo, sapo, gpg, clip_cov, kl_cov,
// geo_mean, cispo, reinforce (formulas next to each function and in docs/algorithms.md).
#pragma once

#include <string>

#include <verlpp/algo/policy_loss_types.hpp>
#include <verlpp/algo/policy_losses_cov.hpp>
#include <verlpp/algo/policy_losses_ratio.hpp>

namespace verlpp::algo {

namespace detail {

inline void register_builtin_policy_losses(Registry<PolicyLossFn>& r) {
  r.add("vanilla", compute_policy_loss_vanilla);
  r.add("gspo", compute_policy_loss_gspo);
  r.add("sapo", compute_policy_loss_sapo);
  r.add("gpg", compute_policy_loss_gpg);
  r.add("clip_cov", compute_policy_loss_clip_cov);
  r.add("kl_cov", compute_policy_loss_kl_cov);
  r.add("geo_mean", compute_policy_loss_geo_mean);
  r.add("cispo", compute_policy_loss_cispo);
  r.add("reinforce", compute_policy_loss_reinforce);
}

}  // namespace detail

// The process-wide policy-loss registry, with the built-ins already in it.
inline Registry<PolicyLossFn>& policy_loss_registry() {
  static Registry<PolicyLossFn> registry("policy loss", &detail::register_builtin_policy_losses);
  return registry;
}

// Adds a user policy loss under `name`; throws verlpp::Error if the name is taken.
inline void register_policy_loss(const std::string& name, PolicyLossFn fn) {
  policy_loss_registry().add(name, std::move(fn));
}

// The names compute_policy_loss accepts, sorted.
inline std::vector<std::string> policy_loss_names() { return policy_loss_registry().names(); }

// The policy loss `mode` on [B, T] inputs; rollout_is_weights (optional [B, T]) multiplies the
// per-token loss (geo_mean: its per-sequence geometric mean). Unknown mode: verlpp::Error
// listing the valid ones.
inline PolicyLossOutput compute_policy_loss(const std::string& mode, const torch::Tensor& old_log_prob,
                                            const torch::Tensor& log_prob, const torch::Tensor& advantages,
                                            const torch::Tensor& response_mask, const PolicyLossConfig& cfg = {},
                                            const torch::Tensor& rollout_is_weights = {}) {
  const PolicyLossFn fn = policy_loss_registry().get(mode);
  return fn(PolicyLossInputs{old_log_prob, log_prob, advantages, response_mask, rollout_is_weights}, cfg);
}

}  // namespace verlpp::algo
