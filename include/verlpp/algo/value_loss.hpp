// The clipped value-function loss of PPO's critic (verl: core_algos.compute_value_loss).
// Decision: the clip keeps the new prediction within ±cliprange_value of the rollout-time
// value, and the larger of the clipped and unclipped squared errors is taken (pessimistic).
#pragma once

#include <ATen/ops/maximum.h>
#include <ATen/ops/minimum.h>

#include <string>

#include <verlpp/algo/agg_loss.hpp>
#include <verlpp/algo/masked.hpp>

namespace verlpp::algo {

struct ValueLossOutput {
  torch::Tensor loss;      // 0-dim, differentiable in vpreds
  torch::Tensor clipfrac;  // 0-dim fp32, no grad: mean_m((v_c − R)² > (v̂ − R)²)
};

// vpreds v̂, returns R, values V (rollout-time critic values), response_mask m: all [B, T].
//   v_c = max(min(v̂, V + c), V − c); loss = 0.5·agg(max((v̂ − R)², (v_c − R)²), m, mode);
//   clipfrac = masked_mean((v_c − R)² > (v̂ − R)², m).
inline ValueLossOutput compute_value_loss(const torch::Tensor& vpreds, const torch::Tensor& returns,
                                          const torch::Tensor& values, const torch::Tensor& response_mask,
                                          double cliprange_value, const std::string& loss_agg_mode = "token-mean",
                                          const AggLossOptions& agg = {}) {
  const std::string where = "compute_value_loss";
  detail::check_2d(vpreds, "vpreds", where);
  detail::check_floating(vpreds, "vpreds", where);
  detail::check_same_shape(returns, "returns", vpreds, "vpreds", where);
  detail::check_same_shape(values, "values", vpreds, "vpreds", where);
  detail::check_same_shape(response_mask, "response_mask", vpreds, "vpreds", where);
  const torch::Tensor vpred_clipped =
      at::maximum(at::minimum(vpreds, values + cliprange_value), values - cliprange_value);
  const torch::Tensor losses1 = (vpreds - returns).square();
  const torch::Tensor losses2 = (vpred_clipped - returns).square();
  const torch::Tensor clipped_losses = at::maximum(losses1, losses2);
  ValueLossOutput out;
  out.loss = 0.5 * agg_loss(clipped_losses, response_mask, loss_agg_mode, agg);
  out.clipfrac = masked_mean((losses2 > losses1).to(at::kFloat), response_mask).detach();
  return out;
}

}  // namespace verlpp::algo
