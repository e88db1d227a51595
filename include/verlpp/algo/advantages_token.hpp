// Token-level advantage estimators: GAE, REINFORCE++ and ReMax.
// Decision: the backward loops over t run on a [T, B] (transposed, contiguous) layout, so each
// step works on one contiguous B-vector (stepping over columns of [B, T] touches a cache line
// per row per step: ~10x slower on CPU). They are first-order linear recurrences, so off the CPU
// they run as a two-level scan instead (Recurrence below).
#pragma once

#include <ATen/ops/add.h>
#include <ATen/ops/addcmul.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/flip.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include <verlpp/algo/advantage_types.hpp>
#include <verlpp/algo/masked.hpp>

namespace verlpp::algo {

namespace detail {

// [B, T] -> a new contiguous [T, B] in `dtype` (ATen's fast path for a transposed copy). Always
// a copy, never a view of the caller's tensor (contiguous() would return one when B or T is 1),
// since the scans work in place.
inline torch::Tensor to_time_major(const torch::Tensor& t, at::ScalarType dtype) {
  return t.to(dtype).t().clone(at::MemoryFormat::Contiguous);
}

// In place over dim 0 of contiguous [T, B] tensors: x_t = a_t·x_{t+1} + b_t, x_T = 0; on return
// `b` holds x and `a` is overwritten. Two levels, so the number of ops grows as 3·sqrt(T), not
// T: the last T mod C steps run one by one; the rest, viewed as [T/C, C, B] chunks, are scanned
// locally in C steps of ops on [T/C, B] (x with zero carry-in, P = product of a to the chunk
// end), the true value at each chunk start follows in T/C steps, and x += P·carry fixes all.
inline void reverse_linear_scan_(torch::Tensor& a, torch::Tensor& b) {
  const int64_t steps = b.size(0), width = b.size(1);
  if (steps == 0) return;
  const int64_t chunk = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(steps))));
  const int64_t num_chunks = steps / chunk, body = num_chunks * chunk;
  for (int64_t t = steps - 2; t >= body; --t) {  // the tail, one step at a time
    torch::Tensor b_t = b.select(0, t);
    at::addcmul_out(b_t, b_t, a.select(0, t), b.select(0, t + 1));
  }
  if (num_chunks == 0) return;
  torch::Tensor x = b.narrow(0, 0, body).view({num_chunks, chunk, width});  // [nC, C, B]
  torch::Tensor p = a.narrow(0, 0, body).view({num_chunks, chunk, width});
  for (int64_t c = chunk - 2; c >= 0; --c) {
    torch::Tensor x_c = x.select(1, c), p_c = p.select(1, c);
    at::addcmul_out(x_c, x_c, p_c, x.select(1, c + 1));  // local x (reads a_c before P)
    at::mul_out(p_c, p_c, p.select(1, c + 1));           // P_c = a_c·P_{c+1}
  }
  torch::Tensor carry = at::zeros({num_chunks, width}, b.options());  // x at next chunk start
  if (body < steps) carry.select(0, num_chunks - 1).copy_(b.select(0, body));
  const torch::Tensor x_start = x.select(1, 0), p_start = p.select(1, 0);  // [nC, B]
  for (int64_t k = num_chunks - 2; k >= 0; --k) {
    torch::Tensor carry_k = carry.select(0, k);
    at::addcmul_out(carry_k, x_start.select(0, k + 1), p_start.select(0, k + 1), carry.select(0, k + 1));
  }
  x.addcmul_(p, carry.unsqueeze(1));
}

// lg for every t, one step at a time: 6 in-place ops on contiguous B-vectors per step.
// r, v, m: time-major [T, B] in the result dtype. Returns [T, B].
inline torch::Tensor gae_stepwise(const torch::Tensor& r, const torch::Tensor& v, const torch::Tensor& m, double gamma,
                                  double lam) {
  const int64_t num_steps = r.size(0), batch = r.size(1);
  const auto opts = r.options();
  torch::Tensor adv = at::empty({num_steps, batch}, opts);
  torch::Tensor next_value = at::zeros({batch}, opts), last_gae = at::zeros({batch}, opts);
  torch::Tensor delta = at::empty({batch}, opts), diff = at::empty({batch}, opts);
  for (int64_t t = num_steps - 1; t >= 0; --t) {
    const torch::Tensor r_t = r.select(0, t), v_t = v.select(0, t), m_t = m.select(0, t);
    at::add_out(delta, r_t, next_value, gamma);  // r_t + γ·nv
    delta.sub_(v_t);                             // δ
    delta.add_(last_gae, gamma * lam - 1.0);     // g − lg = δ + (γλ − 1)·lg
    torch::Tensor adv_t = adv.select(0, t);
    at::addcmul_out(adv_t, last_gae, m_t, delta);  // lg + m·(g − lg)
    last_gae = adv_t;
    at::sub_out(diff, v_t, next_value);
    next_value.addcmul_(m_t, diff);  // nv + m·(V − nv)
  }
  return adv;
}

// lg for every t as two scans: nv_t = (1 − m_t)·nv_{t+1} + m_t·V_t, then
// lg_t = (1 − m_t(1 − γλ))·lg_{t+1} + m_t·δ_t with δ_t = r_t − V_t + γ·nv_{t+1}.
// r (overwritten), v, m: time-major [T, B]. Returns [T, B] (r's storage).
inline torch::Tensor gae_scan(torch::Tensor r, const torch::Tensor& v, const torch::Tensor& m, double gamma,
                              double lam) {
  const int64_t num_steps = r.size(0);
  torch::Tensor coef = 1 - m;        // a of the nv scan
  torch::Tensor next_value = m * v;  // b, then nv
  reverse_linear_scan_(coef, next_value);
  torch::Tensor& delta = r.sub_(v);  // r − V, + γ·nv_{t+1}, ·m: b of the lg scan
  if (num_steps > 1) delta.narrow(0, 0, num_steps - 1).add_(next_value.narrow(0, 1, num_steps - 1), gamma);
  delta.mul_(m);
  at::mul_out(coef, m, gamma * lam - 1.0).add_(1.0);  // 1 − m·(1 − γλ)
  reverse_linear_scan_(coef, delta);
  return delta;
}

// REINFORCE++ returns G, time-major: one step at a time (2 ops per step) or as the scan
// G_t = γ·m_{t+1}·G_{t+1} + r_t. r (overwritten by the scan), m: [T, B]. Returns [T, B].
inline torch::Tensor discounted_returns_stepwise(const torch::Tensor& r, const torch::Tensor& m, double gamma) {
  torch::Tensor ret = at::empty_like(r);
  torch::Tensor running = at::zeros({r.size(1)}, r.options());
  for (int64_t t = r.size(0) - 1; t >= 0; --t) {
    torch::Tensor ret_t = ret.select(0, t);
    at::add_out(ret_t, r.select(0, t), running, gamma);  // G_t = r_t + γ·G'
    at::mul_out(running, ret_t, m.select(0, t));         // G' = G_t·m_t
  }
  return ret;
}

inline torch::Tensor discounted_returns_scan(torch::Tensor r, const torch::Tensor& m, double gamma) {
  const int64_t num_steps = r.size(0);
  torch::Tensor coef = at::zeros_like(r);  // γ·m_{t+1}
  if (num_steps > 1) {
    torch::Tensor head = coef.narrow(0, 0, num_steps - 1);
    at::mul_out(head, m.narrow(0, 1, num_steps - 1), gamma);
  }
  reverse_linear_scan_(coef, r);
  return r;
}

}  // namespace detail

// How the backward recurrences over t run: step by step (6 small ops per step for GAE; the
// fastest on a CPU, where an op on a B-vector costs microseconds) or as a two-level scan
// (~3·sqrt(T) large ops; on a GPU, where each op is a kernel launch, 8192 steps x 6 ops took
// ~0.3 s on an H200). automatic: stepwise on CPU, scan elsewhere. Both equal verl's loop up to
// floating-point reassociation.
enum class Recurrence { automatic, stepwise, scan };

namespace detail {
inline bool use_scan(Recurrence how, const torch::Tensor& t) {
  return how == Recurrence::scan || (how == Recurrence::automatic && !t.is_cpu());
}
}  // namespace detail

// GAE (verl: compute_gae_advantage_return). Backward over t with next value nv and last gae lg
// (both 0 past the end): δ = r_t + γ·nv − V_t; g = δ + γλ·lg; nv ← V_t·m_t + (1−m_t)·nv;
// lg ← g·m_t + (1−m_t)·lg; A_t = lg. returns = A + V; then A = masked_whiten(A, m), not
// re-masked. Masked-out positions are skipped (multi-turn observation tokens carry nv and lg).
// rewards, values, mask: [B, T]. No autograd (verl runs it under no_grad).
inline AdvantageOutputs compute_gae_advantage_return(const torch::Tensor& token_level_rewards,
                                                     const torch::Tensor& values, const torch::Tensor& response_mask,
                                                     double gamma, double lam, Recurrence how = Recurrence::automatic) {
  const std::string where = "gae";
  detail::check_2d(token_level_rewards, "token_level_rewards", where);
  detail::check_floating(token_level_rewards, "token_level_rewards", where);
  detail::check_same_shape(values, "values", token_level_rewards, "token_level_rewards", where);
  detail::check_floating(values, "values", where);
  detail::check_same_shape(response_mask, "response_mask", token_level_rewards, "token_level_rewards", where);
  c10::NoGradGuard no_grad;
  const at::ScalarType dtype = at::promote_types(token_level_rewards.scalar_type(), values.scalar_type());
  torch::Tensor r = detail::to_time_major(token_level_rewards, dtype);  // [T, B]
  const torch::Tensor v = detail::to_time_major(values, dtype);         // [T, B]
  const torch::Tensor m = detail::to_time_major(response_mask, dtype);  // [T, B]
  const torch::Tensor raw =
      detail::use_scan(how, r) ? detail::gae_scan(r, v, m, gamma, lam) : detail::gae_stepwise(r, v, m, gamma, lam);
  torch::Tensor advantages = raw.t().contiguous();  // [B, T]
  torch::Tensor returns = advantages + values;
  advantages = masked_whiten(advantages, response_mask);
  return {advantages, returns};
}

// REINFORCE++ (verl: compute_reinforce_plus_plus_outcome_advantage). G_t = r_t + γ·G', with G'
// reset after each masked-out position (G' ← G_t·m_t after storing G_t); returns = G;
// A = masked_whiten(G, m)·m.
inline AdvantageOutputs compute_reinforce_plus_plus_outcome_advantage(const torch::Tensor& token_level_rewards,
                                                                      const torch::Tensor& response_mask, double gamma,
                                                                      Recurrence how = Recurrence::automatic) {
  const std::string where = "reinforce_plus_plus";
  detail::check_2d(token_level_rewards, "token_level_rewards", where);
  detail::check_floating(token_level_rewards, "token_level_rewards", where);
  detail::check_same_shape(response_mask, "response_mask", token_level_rewards, "token_level_rewards", where);
  c10::NoGradGuard no_grad;
  const at::ScalarType dtype = token_level_rewards.scalar_type();
  torch::Tensor r = detail::to_time_major(token_level_rewards, dtype);  // [T, B]
  const torch::Tensor m = detail::to_time_major(response_mask, dtype);  // [T, B]
  const torch::Tensor ret = detail::use_scan(how, r) ? detail::discounted_returns_scan(r, m, gamma)
                                                     : detail::discounted_returns_stepwise(r, m, gamma);
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
  detail::check_same_shape(response_mask, "response_mask", token_level_rewards, "token_level_rewards", where);
  VERLPP_CHECK(reward_baselines.defined() && reward_baselines.dim() == 1 &&
                   reward_baselines.size(0) == token_level_rewards.size(0),
               "{}: reward_baselines has shape {}; expected [{}] (one baseline per row)", where,
               detail::shape_str(reward_baselines), token_level_rewards.size(0));
  c10::NoGradGuard no_grad;
  torch::Tensor returns = at::flip(at::cumsum(at::flip(token_level_rewards * response_mask, {-1}), -1), {-1});
  torch::Tensor advantages = returns - reward_baselines.unsqueeze(-1) * response_mask;
  return {advantages, returns};
}

}  // namespace verlpp::algo
