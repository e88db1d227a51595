// Policy losses that act on a selected subset of tokens or on whole sequences: Clip-Cov and
// KL-Cov (Cui et al. 2025, entropy mechanism) and GMPO's geometric mean ("geo_mean").
// Cov_t = (A_t − mean(A))·(logp_t − mean(logp)) over response tokens. Decision: token choice is
// vectorised (nonzero / topk / index_fill on flat row-major indices) but made in the same order
// as verl, so with the same generator state clip_cov picks the same tokens; kl_cov's topk runs
// on the CPU as in verl, so ties break the same way.
#pragma once

#include <ATen/ops/clamp.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/index_fill.h>
#include <ATen/ops/log.h>
#include <ATen/ops/masked_select.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/minimum.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/randperm.h>
#include <ATen/ops/sign.h>
#include <ATen/ops/topk.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <tuple>

#include <verlpp/algo/agg_loss.hpp>
#include <verlpp/algo/masked.hpp>
#include <verlpp/algo/policy_loss_types.hpp>

namespace verlpp::algo {

// clip_cov (verl: compute_policy_loss_clip_cov): PPO clip, plus the gradient of a few random
// high-covariance tokens is cut.
//   r = e^ℓ (no clamp); L1 = −A·r; L2 = −A·clip(r, 1−ε_low, 1+ε_high);
//   candidates: response tokens with lb < Cov < ub that PPO did not already clip (L2 <= L1);
//   k = max(int(clip_cov_ratio·Σm), 1); min(k, #candidates) of them, chosen by randperm, get
//   corr = 0 (others 1); loss_t = max(L1, L2)·corr (×w); agg(loss_agg_mode).
//   clipfrac = mean_m(corr == 0); clipfrac_lower = 0; ppo_kl = mean_m(−ℓ).
inline PolicyLossOutput compute_policy_loss_clip_cov(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
  const std::string where = "policy loss 'clip_cov'";
  detail::check_policy_inputs(in, where);
  VERLPP_CHECK(cfg.clip_cov_ratio > 0, "{}: clip_cov_ratio must be > 0; got {}", where, cfg.clip_cov_ratio);
  const torch::Tensor& adv = in.advantages;
  const torch::Tensor& mask = in.response_mask;
  const torch::Tensor neg_kl = in.log_prob - in.old_log_prob;
  const torch::Tensor ratio = at::exp(neg_kl);
  const torch::Tensor loss1 = -adv * ratio;
  const torch::Tensor loss2 = -adv * at::clamp(ratio, 1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high);
  const torch::Tensor in_response = mask > 0;
  const torch::Tensor logp = in.log_prob.detach();
  const torch::Tensor clip_by_origin = (loss2 > loss1).detach() & in_response;
  const torch::Tensor cov = (adv.detach() - masked_mean(adv.detach(), mask)) * (logp - masked_mean(logp, mask));
  const torch::Tensor excluded = (mask == 0) | clip_by_origin;
  const torch::Tensor candidates = (cov < cfg.clip_cov_ub) & (cov > cfg.clip_cov_lb) & in_response & ~excluded;
  const int64_t clip_num = std::max<int64_t>(static_cast<int64_t>(cfg.clip_cov_ratio * mask.sum().item<double>()), 1);
  const torch::Tensor flat_ids = at::nonzero(candidates.reshape({-1})).reshape({-1});  // [n]
  torch::Tensor corr = at::ones_like(adv);
  const int64_t n = flat_ids.size(0);
  if (n > 0) {
    c10::optional<at::Generator> gen;
    if (cfg.generator.defined()) gen = cfg.generator;
    const torch::Tensor perm = at::randperm(n, gen, at::kLong);  // CPU, as verl
    const torch::Tensor chosen =
        flat_ids.index_select(0, perm.narrow(0, 0, std::min(clip_num, n)).to(flat_ids.device()));
    corr = corr.reshape({-1}).index_fill(0, chosen, 0).reshape(adv.sizes());
  }
  const torch::Tensor pg_losses = detail::apply_is_weights(at::maximum(loss1, loss2) * corr, in);
  PolicyLossOutput out;
  out.loss = agg_loss(pg_losses, mask, cfg.loss_agg_mode, cfg.agg);
  out.clipfrac = masked_mean((corr == 0).to(at::kFloat), mask).detach();
  out.clipfrac_lower = detail::zero_metric(out.loss);
  out.ppo_kl = masked_mean(-neg_kl, mask).detach();
  return out;
}

// kl_cov (verl: compute_policy_loss_kl_cov): the k = max(1, int(N·kl_cov_ratio)) response
// tokens with the largest Cov (N = #response tokens, plain means over them) get a KL penalty:
//   r = e^ℓ (no clamp); loss_t = −A·r, or −A·r + ppo_kl_coef·|ℓ| on the chosen tokens (×w);
//   agg(loss_agg_mode). ppo_kl = mean_m(|ℓ|) (verl reports the absolute value here);
//   clipfrac = clipfrac_lower = 0.
inline PolicyLossOutput compute_policy_loss_kl_cov(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
  const std::string where = "policy loss 'kl_cov'";
  detail::check_policy_inputs(in, where);
  VERLPP_CHECK(cfg.kl_cov_ratio > 0, "{}: kl_cov_ratio must be > 0; got {}", where, cfg.kl_cov_ratio);
  const torch::Tensor& adv = in.advantages;
  const torch::Tensor& mask = in.response_mask;
  const torch::Tensor neg_kl = in.log_prob - in.old_log_prob;
  const torch::Tensor abs_kl = neg_kl.abs();
  const torch::Tensor ratio = at::exp(neg_kl);
  const torch::Tensor loss1 = -adv * ratio;
  const torch::Tensor loss_kl = -adv * ratio + cfg.ppo_kl_coef * abs_kl;
  const torch::Tensor valid = mask > 0;
  const torch::Tensor valid_ids = at::nonzero(valid.reshape({-1})).reshape({-1});  // [N]
  const int64_t num_valid = valid_ids.size(0);
  torch::Tensor pg_losses = loss1;
  if (num_valid > 0) {
    const torch::Tensor adv_v = at::masked_select(adv.detach(), valid).cpu();
    const torch::Tensor logp_v = at::masked_select(in.log_prob.detach(), valid).cpu();
    const torch::Tensor cov = (adv_v - adv_v.mean()) * (logp_v - logp_v.mean());
    const int64_t k = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(num_valid) * cfg.kl_cov_ratio));
    const torch::Tensor top = std::get<1>(at::topk(cov, k, -1, /*largest=*/true));
    const torch::Tensor chosen = valid_ids.index_select(0, top.to(valid_ids.device()));
    const torch::Tensor selected =
        at::zeros({adv.numel()}, valid.options()).index_fill(0, chosen, true).reshape(adv.sizes());
    pg_losses = at::where(selected, loss_kl, loss1);
  }
  pg_losses = detail::apply_is_weights(pg_losses, in);
  PolicyLossOutput out;
  out.loss = agg_loss(pg_losses, mask, cfg.loss_agg_mode, cfg.agg);
  out.clipfrac = detail::zero_metric(out.loss);
  out.clipfrac_lower = detail::zero_metric(out.loss);
  out.ppo_kl = masked_mean(abs_kl, mask).detach();
  return out;
}

// geo_mean (GMPO; verl: compute_policy_loss_geo_mean), a sequence-level loss on the geometric
// mean of token ratios with per-token clipping in log space:
//   s = sign(A); ℓ_c = clamp(ℓ, −ε_low, ε_high); ℓ* = s·min(s·ℓ, s·ℓ_c);
//   ρ_i = exp(Σ_t ℓ*·m / (L_i + 1e-8)); Ā_i = Σ_t A·m / (L_i + 1e-8); L_i = Σ_t m;
//   loss = mean over all rows of −Ā_i·ρ_i (×w̄_i = exp(Σ_t log(w + 1e-10)·m / (L_i + 1e-8))).
//   loss_agg_mode is not used. clipfrac = mean_m((ℓ ≠ ℓ_c)·(A > 0));
//   clipfrac_lower = mean_m((ℓ ≠ ℓ_c)·(A < 0)); ppo_kl = mean_m(−ℓ).
inline PolicyLossOutput compute_policy_loss_geo_mean(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
  detail::check_policy_inputs(in, "policy loss 'geo_mean'");
  const torch::Tensor& adv = in.advantages;
  const torch::Tensor& mask = in.response_mask;
  const torch::Tensor neg_kl = in.log_prob - in.old_log_prob;
  const torch::Tensor sgn = at::sign(adv);
  const torch::Tensor neg_kl_clamp = at::clamp(neg_kl, -cfg.clip_ratio_low, cfg.clip_ratio_high);
  const torch::Tensor neg_kl_min = sgn * at::minimum(sgn * neg_kl, sgn * neg_kl_clamp);
  const torch::Tensor lengths = mask.sum(-1);  // [B]
  const torch::Tensor ratio = at::exp((neg_kl_min * mask).sum(-1) / (lengths + 1e-8));
  const torch::Tensor seq_adv = (adv * mask).sum(-1) / (lengths + 1e-8);
  torch::Tensor pg_losses = -seq_adv * ratio;  // [B]
  if (in.rollout_is_weights.defined()) {
    const torch::Tensor seq_w = at::exp((at::log(in.rollout_is_weights + 1e-10) * mask).sum(-1) / (lengths + 1e-8));
    pg_losses = pg_losses * seq_w;
  }
  PolicyLossOutput out;
  out.loss = pg_losses.mean();
  const torch::Tensor clipped = (neg_kl != neg_kl_clamp).detach();
  out.clipfrac = masked_mean((clipped & (adv > 0)).to(at::kFloat), mask).detach();
  out.clipfrac_lower = masked_mean((clipped & (adv < 0)).to(at::kFloat), mask).detach();
  out.ppo_kl = masked_mean(-neg_kl, mask).detach();
  return out;
}

}  // namespace verlpp::algo
