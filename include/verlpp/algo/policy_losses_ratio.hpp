// Ratio-based policy losses: vanilla PPO (dual clip), GSPO, SAPO, CISPO, and the plain
// log-prob losses GPG and REINFORCE. ℓ = log_prob − old_log_prob, r = exp(ℓ), A = advantages,
// m = response_mask, sg = stop-gradient. Decision: every loss mirrors verl's op order and
// clamps (e.g. ℓ clamped to ±20 before exp where verl does so, and not where it does not).
#pragma once

#include <ATen/ops/clamp.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/minimum.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/where.h>

#include <verlpp/algo/agg_loss.hpp>
#include <verlpp/algo/masked.hpp>
#include <verlpp/algo/policy_loss_types.hpp>

namespace verlpp::algo {

// vanilla (PPO with dual clip; verl: compute_policy_loss_vanilla):
//   ℓ = clamp(ℓ, ±20); r = e^ℓ; L1 = −A·r; L2 = −A·clip(r, 1−ε_low, 1+ε_high); C = max(L1, L2);
//   L3 = −A·c; loss_t = min(L3, C) where A < 0 else C; (×w); agg(loss_agg_mode).
//   clipfrac = mean_m(L2 > L1); clipfrac_lower = mean_m((C > L3)·(A < 0)); ppo_kl = mean_m(−ℓ).
inline PolicyLossOutput compute_policy_loss_vanilla(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
  detail::check_policy_inputs(in, "policy loss 'vanilla'");
  VERLPP_CHECK(cfg.clip_ratio_c > 1.0,
               "policy loss 'vanilla': clip_ratio_c (dual-clip lower bound) must be > 1; got {}", cfg.clip_ratio_c);
  const torch::Tensor& adv = in.advantages;
  const torch::Tensor& mask = in.response_mask;
  const torch::Tensor neg_kl = at::clamp(in.log_prob - in.old_log_prob, -20.0, 20.0);
  const torch::Tensor ratio = at::exp(neg_kl);
  const torch::Tensor loss1 = -adv * ratio;
  const torch::Tensor loss2 = -adv * at::clamp(ratio, 1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high);
  const torch::Tensor clipped1 = at::maximum(loss1, loss2);
  const torch::Tensor loss3 = -adv * cfg.clip_ratio_c;
  const torch::Tensor clipped2 = at::minimum(loss3, clipped1);
  const torch::Tensor is_neg = adv < 0;
  torch::Tensor pg_losses = at::where(is_neg, clipped2, clipped1);
  pg_losses = detail::apply_is_weights(pg_losses, in);
  PolicyLossOutput out;
  out.loss = agg_loss(pg_losses, mask, cfg.loss_agg_mode, cfg.agg);
  out.clipfrac = masked_mean((loss2 > loss1).to(at::kFloat), mask).detach();
  out.clipfrac_lower = masked_mean(((clipped1 > loss3) * is_neg.to(at::kFloat)), mask).detach();
  out.ppo_kl = masked_mean(-neg_kl, mask).detach();
  return out;
}

// gspo (verl: compute_policy_loss_gspo), sequence-level ratio with a token-level gradient:
//   ℓ̄_i = Σ_t ℓ·m / max(Σ_t m, 1); log s_it = logp − sg(logp) + sg(ℓ̄_i), clamped to <= 10;
//   s = e^(log s); L1 = −A·s; L2 = −A·clip(s, 1−ε_low, 1+ε_high); loss_t = max(L1, L2) (×w);
//   always aggregated with seq-mean-token-mean. clipfrac = mean_m(L2 > L1); clipfrac_lower = 0;
//   ppo_kl = mean_m(−ℓ) (ℓ unclamped).
inline PolicyLossOutput compute_policy_loss_gspo(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
  detail::check_policy_inputs(in, "policy loss 'gspo'");
  const torch::Tensor& adv = in.advantages;
  const torch::Tensor& mask = in.response_mask;
  const torch::Tensor neg_kl = in.log_prob - in.old_log_prob;
  const torch::Tensor seq_lengths = mask.sum(-1).clamp_min(1);
  const torch::Tensor neg_kl_seq = (neg_kl * mask).sum(-1) / seq_lengths;  // [B]
  torch::Tensor log_ratio = in.log_prob - in.log_prob.detach() + neg_kl_seq.detach().unsqueeze(-1);
  log_ratio = log_ratio.clamp_max(10.0);  // for numerical stability, as verl
  const torch::Tensor ratio = at::exp(log_ratio);
  const torch::Tensor loss1 = -adv * ratio;
  const torch::Tensor loss2 = -adv * at::clamp(ratio, 1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high);
  torch::Tensor pg_losses = detail::apply_is_weights(at::maximum(loss1, loss2), in);
  PolicyLossOutput out;
  out.loss = agg_loss(pg_losses, mask, "seq-mean-token-mean", cfg.agg);
  out.clipfrac = masked_mean((loss2 > loss1).to(at::kFloat), mask).detach();
  out.clipfrac_lower = detail::zero_metric(out.loss);
  out.ppo_kl = masked_mean(-neg_kl, mask).detach();
  return out;
}

// sapo (verl: compute_policy_loss_sapo), a smooth gate instead of a hard clip:
//   ℓ = clamp(ℓ, ±20); r = e^ℓ; τ = τ_pos where A > 0 else τ_neg (in A's dtype);
//   f = sigmoid(τ·(r − 1))·4/τ; loss_t = −f·A (×w); always seq-mean-token-mean.
//   clipfrac = clipfrac_lower = 0; ppo_kl = mean_m(−ℓ).
inline PolicyLossOutput compute_policy_loss_sapo(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
  detail::check_policy_inputs(in, "policy loss 'sapo'");
  const torch::Tensor& adv = in.advantages;
  const torch::Tensor& mask = in.response_mask;
  const torch::Tensor neg_kl = at::clamp(in.log_prob - in.old_log_prob, -20.0, 20.0);
  const torch::Tensor ratio = at::exp(neg_kl);
  const auto opts = adv.options();
  const torch::Tensor taus =
      at::where(adv > 0, at::scalar_tensor(cfg.tau_pos, opts), at::scalar_tensor(cfg.tau_neg, opts));
  const torch::Tensor gates = at::sigmoid(taus * (ratio - 1.0)) * (4.0 / taus);
  const torch::Tensor pg_losses = detail::apply_is_weights(-gates * adv, in);
  PolicyLossOutput out;
  out.loss = agg_loss(pg_losses, mask, "seq-mean-token-mean", cfg.agg);
  out.clipfrac = detail::zero_metric(out.loss);
  out.clipfrac_lower = detail::zero_metric(out.loss);
  out.ppo_kl = masked_mean(-neg_kl, mask).detach();
  return out;
}

// cispo (verl: compute_policy_loss_cispo), clipped IS weight as a constant factor:
//   ℓ = clamp(ℓ, ±20); r = e^ℓ; ρ = clip(r, 1−ε_low, 1+ε_high); loss_t = −sg(ρ)·A·logp (×w);
//   agg(loss_agg_mode). clipfrac = mean_m(r ≠ ρ); clipfrac_lower = 0; ppo_kl = mean_m(−ℓ).
inline PolicyLossOutput compute_policy_loss_cispo(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
  detail::check_policy_inputs(in, "policy loss 'cispo'");
  const torch::Tensor& mask = in.response_mask;
  const torch::Tensor neg_kl = at::clamp(in.log_prob - in.old_log_prob, -20.0, 20.0);
  const torch::Tensor ratio = at::exp(neg_kl);
  const torch::Tensor clipped = at::clamp(ratio, 1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high);
  const torch::Tensor pg_losses = detail::apply_is_weights(-clipped.detach() * in.advantages * in.log_prob, in);
  PolicyLossOutput out;
  out.loss = agg_loss(pg_losses, mask, cfg.loss_agg_mode, cfg.agg);
  out.clipfrac = masked_mean((ratio != clipped).to(at::kFloat), mask).detach();
  out.clipfrac_lower = detail::zero_metric(out.loss);
  out.ppo_kl = masked_mean(-neg_kl, mask).detach();
  return out;
}

// gpg (verl: compute_policy_loss_gpg): loss_t = −logp·A (×w); agg(loss_agg_mode).
// verl reports no metric here; clipfrac = clipfrac_lower = 0 (nothing is clipped) and ppo_kl is
// the usual mean_m(old − logp), given for monitoring.
inline PolicyLossOutput compute_policy_loss_gpg(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
  detail::check_policy_inputs(in, "policy loss 'gpg'");
  const torch::Tensor pg_losses = detail::apply_is_weights(-in.log_prob * in.advantages, in);
  PolicyLossOutput out;
  out.loss = agg_loss(pg_losses, in.response_mask, cfg.loss_agg_mode, cfg.agg);
  out.clipfrac = detail::zero_metric(out.loss);
  out.clipfrac_lower = detail::zero_metric(out.loss);
  out.ppo_kl = masked_mean(in.old_log_prob - in.log_prob, in.response_mask).detach();
  return out;
}

// reinforce (verl: compute_policy_loss_reinforce, reached there through bypass_mode):
//   loss_t = −A·logp (×w, w treated as given constants); agg(loss_agg_mode; verl's default for
//   it is seq-mean-token-sum). ppo_kl = mean_m(old − logp); clipfrac = clipfrac_lower = 0.
inline PolicyLossOutput compute_policy_loss_reinforce(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
  detail::check_policy_inputs(in, "policy loss 'reinforce'");
  const torch::Tensor pg_losses = detail::apply_is_weights(-in.advantages * in.log_prob, in);
  PolicyLossOutput out;
  out.loss = agg_loss(pg_losses, in.response_mask, cfg.loss_agg_mode, cfg.agg);
  out.clipfrac = detail::zero_metric(out.loss);
  out.clipfrac_lower = detail::zero_metric(out.loss);
  out.ppo_kl = masked_mean(-(in.log_prob - in.old_log_prob), in.response_mask).detach();
  return out;
}

}  // namespace verlpp::algo
