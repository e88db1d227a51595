// Token-level advantage estimators: GAE, REINFORCE++ and ReMax.
// Decision: the backward recurrences over t run in a [T, B] (transposed, contiguous) layout, so
// each step is a handful of in-place ops on one contiguous B-vector; stepping over columns of
// the [B, T] layout is ~10x slower on CPU (one cache line per row per step). The recurrences
// are verl's, rewritten as x + m·(y − x) for m·y + (1 − m)·x (equal up to rounding).
#pragma once

#include <ATen/ops/add.h>
#include <ATen/ops/addcmul.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/flip.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include <verlpp/algo/advantage_types.hpp>
#include <verlpp/algo/masked.hpp>

namespace verlpp::algo {

namespace detail {

// [B, T] -> contiguous [T, B] in `dtype`.
inline torch::Tensor to_time_major(const torch::Tensor& t, at::ScalarType dtype) {
  return t.to(dtype).t().contiguous();
}

}  // namespace detail

// GAE (verl: compute_gae_advantage_return). Backward over t with next value nv and last gae lg
// (both 0 past the end): δ = r_t + γ·nv − V_t; g = δ + γλ·lg; nv ← V_t·m_t + (1−m_t)·nv;
// lg ← g·m_t + (1−m_t)·lg; A_t = lg. returns = A + V; then A = masked_whiten(A, m), not
// re-masked. Masked-out positions are skipped (multi-turn observation tokens carry nv and lg).
// rewards, values, mask: [B, T]. No autograd (verl runs it under no_grad).
inline AdvantageOutputs compute_gae_advantage_return(const torch::Tensor& token_level_rewards,
                                                     const torch::Tensor& values,
                                                     const torch::Tensor& response_mask,
                                                     double gamma, double lam) {
  const std::string where = "gae";
  detail::check_2d(token_level_rewards, "token_level_rewards", where);
  detail::check_floating(token_level_rewards, "token_level_rewards", where);
  detail::check_same_shape(values, "values", token_level_rewards, "token_level_rewards", where);
  detail::check_floating(values, "values", where);
  detail::check_same_shape(response_mask, "response_mask", token_level_rewards,
                           "token_level_rewards", where);
  c10::NoGradGuard no_grad;
  const at::ScalarType dtype =
      at::promote_types(token_level_rewards.scalar_type(), values.scalar_type());
  const int64_t batch = token_level_rewards.size(0), num_steps = token_level_rewards.size(1);
  const torch::Tensor r = detail::to_time_major(token_level_rewards, dtype);  // [T, B]
  const torch::Tensor v = detail::to_time_major(values, dtype);               // [T, B]
  const torch::Tensor m = detail::to_time_major(response_mask, dtype);        // [T, B]
  const auto opts = r.options();
  torch::Tensor adv = at::empty({num_steps, batch}, opts);  // [T, B] lg after each step
  torch::Tensor next_value = at::zeros({batch}, opts);      // nv
  torch::Tensor last_gae = at::zeros({batch}, opts);        // lg (a view into adv after t)
  torch::Tensor delta = at::empty({batch}, opts), diff = at::empty({batch}, opts);
  for (int64_t t = num_steps - 1; t >= 0; --t) {
    const torch::Tensor r_t = r.select(0, t), v_t = v.select(0, t), m_t = m.select(0, t);
    at::add_out(delta, r_t, next_value, gamma);  // r_t + γ·nv
    delta.sub_(v_t);                              // δ
    delta.add_(last_gae, gamma * lam - 1.0);     // g − lg = δ + (γλ − 1)·lg
    torch::Tensor adv_t = adv.select(0, t);
    at::addcmul_out(adv_t, last_gae, m_t, delta);  // lg + m·(g − lg)
    last_gae = adv_t;
    at::sub_out(diff, v_t, next_value);
    next_value.addcmul_(m_t, diff);  // nv + m·(V − nv)
  }
  torch::Tensor advantages = adv.t().contiguous();  // [B, T]
  torch::Tensor returns = advantages + values;
  advantages = masked_whiten(advantages, response_mask);
  return {advantages, returns};
}

// REINFORCE++ (verl: compute_reinforce_plus_plus_outcome_advantage). G_t = r_t + γ·G', with G'
// reset after each masked-out position (G' ← G_t·m_t after storing G_t); returns = G;
// A = masked_whiten(G, m)·m.
inline AdvantageOutputs compute_reinforce_plus_plus_outcome_advantage(
    const torch::Tensor& token_level_rewards, const torch::Tensor& response_mask, double gamma) {
  const std::string where = "reinforce_plus_plus";
  detail::check_2d(token_level_rewards, "token_level_rewards", where);
  detail::check_floating(token_level_rewards, "token_level_rewards", where);
  detail::check_same_shape(response_mask, "response_mask", token_level_rewards,
                           "token_level_rewards", where);
  c10::NoGradGuard no_grad;
  const at::ScalarType dtype = token_level_rewards.scalar_type();
  const int64_t batch = token_level_rewards.size(0), num_steps = token_level_rewards.size(1);
  const torch::Tensor r = detail::to_time_major(token_level_rewards, dtype);  // [T, B]
  const torch::Tensor m = detail::to_time_major(response_mask, dtype);        // [T, B]
  torch::Tensor ret = at::empty({num_steps, batch}, r.options());             // [T, B]
  torch::Tensor running = at::zeros({batch}, r.options());
  for (int64_t t = num_steps - 1; t >= 0; --t) {
    torch::Tensor ret_t = ret.select(0, t);
    at::add_out(ret_t, r.select(0, t), running, gamma);
    at::mul_out(running, ret_t, m.select(0, t));
  }
  torch::Tensor returns = ret.t().contiguous();  // [B, T]
  torch::Tensor advantages = masked_whiten(returns, response_mask) * response_mask;
  return {advantages, returns};
}

// ReMax (verl: compute_remax_outcome_advantage). returns = reverse cumulative sum over t of
// r·m; A = returns − b·m with b = reward_baselines [B].
inline AdvantageOutputs compute_remax_outcome_advantage(const torch::Tensor& token_level_rewards,
                                                        const torch::Tensor& reward_baselines,
                                                        const torch::Tensor& response_mask) {
  const std::string where = "remax";
  detail::check_2d(token_level_rewards, "token_level_rewards", where);
  detail::check_floating(token_level_rewards, "token_level_rewards", where);
  detail::check_same_shape(response_mask, "response_mask", token_level_rewards,
                           "token_level_rewards", where);
  VERLPP_CHECK(reward_baselines.defined() && reward_baselines.dim() == 1 &&
                   reward_baselines.size(0) == token_level_rewards.size(0),
               "{}: reward_baselines has shape {}; expected [{}] (one baseline per row)", where,
               detail::shape_str(reward_baselines), token_level_rewards.size(0));
  c10::NoGradGuard no_grad;
  torch::Tensor returns =
      at::flip(at::cumsum(at::flip(token_level_rewards * response_mask, {-1}), -1), {-1});
  torch::Tensor advantages = returns - reward_baselines.unsqueeze(-1) * response_mask;
  return {advantages, returns};
}

}  // namespace verlpp::algo
