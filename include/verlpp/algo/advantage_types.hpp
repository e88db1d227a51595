// Inputs, config and outputs shared by all advantage estimators, and the estimator signature
// the registry stores. Shapes: B = batch (rows), T = response_length.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <verlpp/algo/common.hpp>
#include <verlpp/algo/groups.hpp>

namespace verlpp::algo {

struct AdvantageInputs {
  torch::Tensor token_level_rewards;  // [B, T] float, device: reward per response token
  torch::Tensor response_mask;        // [B, T] bool/int/float, device: 1 for response tokens
  torch::Tensor values;               // [B, T] float, device: critic values (gae only)
  torch::Tensor reward_baselines;     // [B] float, device: greedy-rollout reward (remax only)
  std::vector<std::string> index;     // [B] group id (uid) per row (grouped estimators)
  // Optional [B] integer group ids (>= 0) on the device; when defined it is used instead of
  // `index` (saves hashing the strings when the caller already has integer ids).
  torch::Tensor group_ids;
};

struct AdvantageConfig {
  double gamma = 1.0;                   // discount (gae, reinforce_plus_plus)
  double lam = 1.0;                     // GAE lambda
  bool norm_adv_by_std_in_grpo = true;  // grpo, grpo_passk: divide by (std + epsilon)
  double epsilon = 1e-6;                // grpo family: std guard
};

// advantages and returns: [B, T], dtype of the rewards. Estimators whose verl version returns
// (scores, scores) return the same tensor twice (shared storage, no copy).
struct AdvantageOutputs {
  torch::Tensor advantages;
  torch::Tensor returns;
};

using AdvantageEstimatorFn = std::function<AdvantageOutputs(const AdvantageInputs&, const AdvantageConfig&)>;

namespace detail {

// The groups of `in`: group_ids when defined, else dense ids from the string index.
inline Groups groups_of(const AdvantageInputs& in, const std::string& where) {
  const int64_t batch = in.token_level_rewards.size(0);
  if (in.group_ids.defined()) {
    VERLPP_CHECK(in.group_ids.dim() == 1 && in.group_ids.size(0) == batch, "{}: group_ids has shape {}; expected [{}]",
                 where, shape_str(in.group_ids), batch);
    return make_groups(in.group_ids);
  }
  VERLPP_CHECK(static_cast<int64_t>(in.index.size()) == batch,
               "{}: index has {} uids but the batch has {} rows (one group id per row)", where, in.index.size(), batch);
  return make_groups(in.index, in.token_level_rewards.device());
}

// Checks rewards [B, T] float and response_mask of the same shape.
inline void check_rewards_and_mask(const AdvantageInputs& in, const std::string& where) {
  check_2d(in.token_level_rewards, "token_level_rewards", where);
  check_floating(in.token_level_rewards, "token_level_rewards", where);
  check_same_shape(in.response_mask, "response_mask", in.token_level_rewards, "token_level_rewards", where);
}

}  // namespace detail

}  // namespace verlpp::algo
