// Outcome-reward estimators with a per-group baseline: GRPO (and Dr.GRPO), GRPO pass@k, RLOO,
// REINFORCE++-baseline, OPO, GPG, and verl's *_vectorized variants. Each works on the row
// scores s_i = Σ_t r_it, computes group statistics with scatters (groups.hpp) and broadcasts
// one scalar per row over its response tokens. Decision: a group of one follows verl per
// estimator (grpo: μ=0, σ=1; rloo: A = s; rloo_vectorized: A = 0; ...), see docs/algorithms.md.
#pragma once

#include <ATen/ops/count_nonzero.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/sqrt.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>

#include <tuple>

#include <verlpp/algo/advantage_types.hpp>
#include <verlpp/algo/masked.hpp>

namespace verlpp::algo {

namespace detail {

inline void check_outcome_inputs(const torch::Tensor& rewards, const torch::Tensor& mask, const Groups& groups,
                                 const std::string& where) {
  check_2d(rewards, "token_level_rewards", where);
  check_floating(rewards, "token_level_rewards", where);
  check_same_shape(mask, "response_mask", rewards, "token_level_rewards", where);
  VERLPP_CHECK(groups.ids.defined() && groups.ids.dim() == 1 && groups.ids.size(0) == rewards.size(0),
               "{}: {} group ids for {} rows", where, groups.ids.defined() ? groups.ids.numel() : 0, rewards.size(0));
}

// Per-row group mean with verl's singleton rule (μ = 0 for a group of one): [B].
inline torch::Tensor row_mean_singleton_zero(const GroupStats& st, const Groups& groups) {
  return per_row(at::where(st.count == 1, 0.0, st.mean), groups);
}

}  // namespace detail

// GRPO (verl: compute_grpo_outcome_advantage). Per group mean μ and unbiased std σ; a group of
// one uses μ = 0, σ = 1. A_i = (s_i − μ)/(σ + ε), or s_i − μ when !norm_adv_by_std (Dr.GRPO);
// advantages = returns = A_i·m.
inline AdvantageOutputs compute_grpo_outcome_advantage(const torch::Tensor& token_level_rewards,
                                                       const torch::Tensor& response_mask, const Groups& groups,
                                                       double epsilon = 1e-6, bool norm_adv_by_std_in_grpo = true) {
  detail::check_outcome_inputs(token_level_rewards, response_mask, groups, "grpo");
  c10::NoGradGuard no_grad;
  const torch::Tensor scores = token_level_rewards.sum(-1);  // [B]
  const GroupStats st = group_stats(scores, groups, /*with_std=*/true);
  const torch::Tensor single = st.count == 1;
  const torch::Tensor mean = per_row(at::where(single, 0.0, st.mean), groups);
  torch::Tensor scalars = scores - mean;
  if (norm_adv_by_std_in_grpo) scalars = scalars / (per_row(at::where(single, 1.0, st.stddev), groups) + epsilon);
  torch::Tensor adv = scalars.unsqueeze(-1) * response_mask;
  return {adv, adv};
}

// verl's grpo_vectorized (compute_grpo_vectorized_outcome_advantage): statistics in fp32 with
// the one-pass variance and a floor, σ = sqrt(max((Σs² − (Σs)²/n)/max(n−1, 1), ε)), μ = Σs/n;
// a group of one uses μ = 0, σ = 1. A_i = (s_i − μ)/(σ + ε) (or s_i − μ); ×m.
inline AdvantageOutputs compute_grpo_vectorized_outcome_advantage(const torch::Tensor& token_level_rewards,
                                                                  const torch::Tensor& response_mask,
                                                                  const Groups& groups, double epsilon = 1e-6,
                                                                  bool norm_adv_by_std_in_grpo = true) {
  detail::check_outcome_inputs(token_level_rewards, response_mask, groups, "grpo_vectorized");
  c10::NoGradGuard no_grad;
  const torch::Tensor scores = token_level_rewards.sum(-1);  // [B]
  const torch::Tensor s32 = scores.to(at::kFloat);
  const torch::Tensor count = group_sum(at::ones_like(s32), groups);
  const torch::Tensor s1 = group_sum(s32, groups), s2 = group_sum(s32 * s32, groups);
  torch::Tensor mean = s1 / count.clamp_min(1.0);
  const torch::Tensor var = (s2 - s1 * s1 / count.clamp_min(1.0)) / (count - 1.0).clamp_min(1.0);
  torch::Tensor stddev = at::sqrt(var.clamp_min(epsilon));
  const torch::Tensor single = count <= 1.0;
  mean = at::where(single, 0.0, mean);
  stddev = at::where(single, 1.0, stddev);
  torch::Tensor scalars = scores - per_row(mean, groups);
  if (norm_adv_by_std_in_grpo) scalars = scalars / (per_row(stddev, groups) + epsilon);
  torch::Tensor adv = scalars.unsqueeze(-1) * response_mask;
  return {adv, adv};
}

// GRPO pass@k (verl: compute_grpo_passk_outcome_advantage). Every group needs >= 2 rows; only
// the group's best row gets r_max − r_second (0 on a tie for the max), divided by (σ + ε) when
// normalising (σ = unbiased group std); every other row gets 0. ×m. `index` (optional) names
// groups in the error message.
inline AdvantageOutputs compute_grpo_passk_outcome_advantage(const torch::Tensor& token_level_rewards,
                                                             const torch::Tensor& response_mask, const Groups& groups,
                                                             double epsilon = 1e-6, bool norm_adv_by_std_in_grpo = true,
                                                             const std::vector<std::string>* index = nullptr) {
  detail::check_outcome_inputs(token_level_rewards, response_mask, groups, "grpo_passk");
  c10::NoGradGuard no_grad;
  const torch::Tensor scores = token_level_rewards.sum(-1);  // [B]
  const GroupStats st = group_stats(scores, groups, /*with_std=*/norm_adv_by_std_in_grpo);
  const torch::Tensor too_small = ((st.count < 2) & (st.count > 0)).nonzero();
  if (too_small.numel() > 0) {
    const int64_t g = too_small.select(0, 0).item<int64_t>();
    std::string name = std::to_string(g);
    if (index) {  // first row of group g
      const int64_t row = (groups.ids == g).nonzero().select(0, 0).item<int64_t>();
      name = "'" + (*index)[static_cast<size_t>(row)] + "'";
    }
    VERLPP_FAIL_AT("grpo_passk", "group {} has {} sample(s); Pass@k needs at least 2 per group", name,
                   static_cast<int64_t>(st.count.select(0, g).item<double>()));
  }
  // Rows ordered by (group ascending, score descending): sort by score, then stably by group.
  const torch::Tensor by_score = std::get<1>(at::sort(scores, /*stable=*/true, 0, true));
  const torch::Tensor by_group = std::get<1>(at::sort(groups.ids.index_select(0, by_score), /*stable=*/true, 0, false));
  const torch::Tensor order = by_score.index_select(0, by_group);        // [B]
  const torch::Tensor present = (st.count > 0).nonzero().reshape({-1});  // used group ids
  const torch::Tensor counts = st.count.to(at::kLong);
  const torch::Tensor start = (at::cumsum(counts, 0) - counts).index_select(0, present);
  const torch::Tensor best = order.index_select(0, start);        // [G'] row of each max
  const torch::Tensor second = order.index_select(0, start + 1);  // [G'] runner-up (a tie: 0 gap)
  torch::Tensor gap = scores.index_select(0, best) - scores.index_select(0, second);
  if (norm_adv_by_std_in_grpo) gap = gap / (st.stddev.index_select(0, present) + epsilon);
  const torch::Tensor scalars = at::zeros_like(scores).index_copy_(0, best, gap);
  torch::Tensor adv = scalars.unsqueeze(-1) * response_mask;
  return {adv, adv};
}

// RLOO (verl: compute_rloo_outcome_advantage). Group of n > 1: A = s·n/(n−1) − μ·n/(n−1)
// (leave-one-out mean as baseline); a group of one keeps A = s. ×m.
inline AdvantageOutputs compute_rloo_outcome_advantage(const torch::Tensor& token_level_rewards,
                                                       const torch::Tensor& response_mask, const Groups& groups) {
  detail::check_outcome_inputs(token_level_rewards, response_mask, groups, "rloo");
  c10::NoGradGuard no_grad;
  const torch::Tensor scores = token_level_rewards.sum(-1);  // [B]
  const GroupStats st = group_stats(scores, groups);
  const torch::Tensor n = per_row(st.count, groups), mean = per_row(st.mean, groups);
  const torch::Tensor loo = scores * n / (n - 1) - mean * n / (n - 1);
  torch::Tensor adv = at::where(n > 1, loo, scores).unsqueeze(-1) * response_mask;
  return {adv, adv};
}

// verl's rloo_vectorized: A = (n·s − Σ_group s)/max(n−1, 1) for n > 1, and 0 for a group of one
// (unlike rloo, which keeps s there). ×m.
inline AdvantageOutputs compute_rloo_vectorized_outcome_advantage(const torch::Tensor& token_level_rewards,
                                                                  const torch::Tensor& response_mask,
                                                                  const Groups& groups) {
  detail::check_outcome_inputs(token_level_rewards, response_mask, groups, "rloo_vectorized");
  c10::NoGradGuard no_grad;
  const torch::Tensor scores = token_level_rewards.sum(-1);  // [B]
  const GroupStats st = group_stats(scores, groups);
  const torch::Tensor c = per_row(st.count, groups);
  const torch::Tensor scalars = (c * scores - per_row(st.sum, groups)) / (c - 1).clamp_min(1) * (c > 1);
  torch::Tensor adv = scalars.unsqueeze(-1) * response_mask;
  return {adv, adv};
}

// REINFORCE++ with baseline (verl: compute_reinforce_plus_plus_baseline_outcome_advantage).
// (s − group mean, 0 for a group of one) over the response tokens, then masked_whiten over the
// batch and re-masked: A = whiten((s − μ)·m, m)·m; returns = A.
inline AdvantageOutputs compute_reinforce_plus_plus_baseline_outcome_advantage(const torch::Tensor& token_level_rewards,
                                                                               const torch::Tensor& response_mask,
                                                                               const Groups& groups) {
  detail::check_outcome_inputs(token_level_rewards, response_mask, groups, "reinforce_plus_plus_baseline");
  c10::NoGradGuard no_grad;
  const torch::Tensor scores = token_level_rewards.sum(-1);  // [B]
  const GroupStats st = group_stats(scores, groups);
  const torch::Tensor centered = scores - detail::row_mean_singleton_zero(st, groups);
  torch::Tensor adv = centered.unsqueeze(-1) * response_mask;
  adv = masked_whiten(adv, response_mask) * response_mask;
  return {adv, adv};
}

// OPO (verl: compute_opo_outcome_advantage). Length-weighted baseline b = Σ_j L_j·s_j / Σ_j L_j
// over the group with L = Σ_t m (0 for a group of one); A = (s − b)·m.
inline AdvantageOutputs compute_opo_outcome_advantage(const torch::Tensor& token_level_rewards,
                                                      const torch::Tensor& response_mask, const Groups& groups) {
  detail::check_outcome_inputs(token_level_rewards, response_mask, groups, "opo");
  c10::NoGradGuard no_grad;
  const torch::Tensor lengths = response_mask.sum(-1);       // [B]
  const torch::Tensor scores = token_level_rewards.sum(-1);  // [B]
  const torch::Tensor count = group_sum(at::ones_like(scores), groups);
  const torch::Tensor baseline = group_sum(lengths * scores, groups) / group_sum(lengths, groups);
  const torch::Tensor b = per_row(at::where(count == 1, 0.0, baseline), groups);
  torch::Tensor adv = (scores - b).unsqueeze(-1) * response_mask;
  return {adv, adv};
}

// GPG (verl: compute_gpg_outcome_advantage). α = B / max(#rows with s ≠ 0, 1), evaluated as verl
// does (reciprocal of the integer count in fp32, times B); A = α·(s − μ)·m, μ the group mean
// (0 for a group of one).
inline AdvantageOutputs compute_gpg_outcome_advantage(const torch::Tensor& token_level_rewards,
                                                      const torch::Tensor& response_mask, const Groups& groups) {
  detail::check_outcome_inputs(token_level_rewards, response_mask, groups, "gpg");
  c10::NoGradGuard no_grad;
  const torch::Tensor scores = token_level_rewards.sum(-1);  // [B]
  const int64_t batch = scores.size(0);
  const torch::Tensor alpha = at::count_nonzero(scores).clamp_min(1).reciprocal() * batch;
  const GroupStats st = group_stats(scores, groups);
  const torch::Tensor scalars = alpha * (scores - detail::row_mean_singleton_zero(st, groups));
  torch::Tensor adv = scalars.unsqueeze(-1) * response_mask;
  return {adv, adv};
}

}  // namespace verlpp::algo
