// Advantage estimators by name: the registry (verl's names, extensible by users) and
// compute_advantage(). Decision: the built-ins are registered inside the registry's
// function-local static, so they exist before the first lookup in any translation unit and no
// static-initialisation order matters.
#pragma once

#include <string>

#include <verlpp/algo/advantage_types.hpp>
#include <verlpp/algo/advantages_outcome.hpp>
#include <verlpp/algo/advantages_token.hpp>

namespace verlpp::algo {

namespace detail {

// Adapters from (AdvantageInputs, AdvantageConfig) to each built-in estimator.
inline void register_builtin_advantage_estimators(Registry<AdvantageEstimatorFn>& r) {
  r.add("gae", [](const AdvantageInputs& in, const AdvantageConfig& cfg) {
    check_rewards_and_mask(in, "gae");
    return compute_gae_advantage_return(in.token_level_rewards, in.values, in.response_mask, cfg.gamma, cfg.lam);
  });
  r.add("reinforce_plus_plus", [](const AdvantageInputs& in, const AdvantageConfig& cfg) {
    check_rewards_and_mask(in, "reinforce_plus_plus");
    return compute_reinforce_plus_plus_outcome_advantage(in.token_level_rewards, in.response_mask, cfg.gamma);
  });
  r.add("remax", [](const AdvantageInputs& in, const AdvantageConfig&) {
    check_rewards_and_mask(in, "remax");
    return compute_remax_outcome_advantage(in.token_level_rewards, in.reward_baselines, in.response_mask);
  });
  r.add("grpo", [](const AdvantageInputs& in, const AdvantageConfig& cfg) {
    check_rewards_and_mask(in, "grpo");
    return compute_grpo_outcome_advantage(in.token_level_rewards, in.response_mask, groups_of(in, "grpo"), cfg.epsilon,
                                          cfg.norm_adv_by_std_in_grpo);
  });
  r.add("grpo_vectorized", [](const AdvantageInputs& in, const AdvantageConfig& cfg) {
    check_rewards_and_mask(in, "grpo_vectorized");
    return compute_grpo_vectorized_outcome_advantage(in.token_level_rewards, in.response_mask,
                                                     groups_of(in, "grpo_vectorized"), cfg.epsilon,
                                                     cfg.norm_adv_by_std_in_grpo);
  });
  r.add("grpo_passk", [](const AdvantageInputs& in, const AdvantageConfig& cfg) {
    check_rewards_and_mask(in, "grpo_passk");
    return compute_grpo_passk_outcome_advantage(in.token_level_rewards, in.response_mask, groups_of(in, "grpo_passk"),
                                                cfg.epsilon, cfg.norm_adv_by_std_in_grpo,
                                                in.group_ids.defined() ? nullptr : &in.index);
  });
  r.add("rloo", [](const AdvantageInputs& in, const AdvantageConfig&) {
    check_rewards_and_mask(in, "rloo");
    return compute_rloo_outcome_advantage(in.token_level_rewards, in.response_mask, groups_of(in, "rloo"));
  });
  r.add("rloo_vectorized", [](const AdvantageInputs& in, const AdvantageConfig&) {
    check_rewards_and_mask(in, "rloo_vectorized");
    return compute_rloo_vectorized_outcome_advantage(in.token_level_rewards, in.response_mask,
                                                     groups_of(in, "rloo_vectorized"));
  });
  r.add("reinforce_plus_plus_baseline", [](const AdvantageInputs& in, const AdvantageConfig&) {
    check_rewards_and_mask(in, "reinforce_plus_plus_baseline");
    return compute_reinforce_plus_plus_baseline_outcome_advantage(in.token_level_rewards, in.response_mask,
                                                                  groups_of(in, "reinforce_plus_plus_baseline"));
  });
  r.add("opo", [](const AdvantageInputs& in, const AdvantageConfig&) {
    check_rewards_and_mask(in, "opo");
    return compute_opo_outcome_advantage(in.token_level_rewards, in.response_mask, groups_of(in, "opo"));
  });
  r.add("gpg", [](const AdvantageInputs& in, const AdvantageConfig&) {
    check_rewards_and_mask(in, "gpg");
    return compute_gpg_outcome_advantage(in.token_level_rewards, in.response_mask, groups_of(in, "gpg"));
  });
}

}  // namespace detail

// The process-wide estimator registry, with the built-ins already in it.
inline Registry<AdvantageEstimatorFn>& advantage_estimator_registry() {
  static Registry<AdvantageEstimatorFn> registry("advantage estimator", &detail::register_builtin_advantage_estimators);
  return registry;
}

// Adds a user estimator under `name`; throws verlpp::Error if the name is taken.
inline void register_advantage_estimator(const std::string& name, AdvantageEstimatorFn fn) {
  advantage_estimator_registry().add(name, std::move(fn));
}

// The names compute_advantage accepts (built-in and registered), sorted.
inline std::vector<std::string> advantage_estimator_names() { return advantage_estimator_registry().names(); }

// Runs the estimator called `estimator` (verl's algorithm.adv_estimator); an unknown name
// throws verlpp::Error listing the valid ones.
inline AdvantageOutputs compute_advantage(const std::string& estimator, const AdvantageInputs& in,
                                          const AdvantageConfig& cfg = {}) {
  return advantage_estimator_registry().get(estimator)(in, cfg);
}

}  // namespace verlpp::algo
