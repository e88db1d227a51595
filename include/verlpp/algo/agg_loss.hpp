// Aggregation of a per-token loss matrix into the scalar that is back-propagated (verl:
// core_algos.agg_loss). Decision: the optional global-batch numbers (tokens, sequences,
// data-parallel size) are taken as given, so a loss computed on a micro-batch can be made
// invariant to how the global batch is split; left unset, the local batch is used.
#pragma once

#include <optional>
#include <string>

#include <verlpp/algo/common.hpp>
#include <verlpp/algo/masked.hpp>

namespace verlpp::algo {

// verl's config.global_batch_info and loss_scale_factor.
struct AggLossOptions {
  double dp_size = 1.0;                     // data-parallel size (token-mean, seq-mean-*)
  std::optional<double> batch_num_tokens;   // token-mean denominator; default Σ mask (local)
  std::optional<double> global_batch_size;  // seq-mean-* denominator; default non-empty rows
  std::optional<double> loss_scale_factor;  // seq-mean-token-sum-norm divisor; default T
};

// The aggregation modes agg_loss accepts.
inline const std::vector<std::string>& agg_loss_modes() {
  static const std::vector<std::string> modes = {"token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                                 "seq-mean-token-sum-norm"};
  return modes;
}

// Aggregates loss_mat [B, T] with mask [B, T] (ℓ = loss, m = mask, non-empty row: Σ_t m > 0):
//   token-mean              Σ ℓm / N_tok · dp                (N_tok = Σ m unless given)
//   seq-mean-token-sum      Σ_rows (Σ_t ℓm) / N_seq · dp     (over non-empty rows; N_seq = their
//                                                             count unless given)
//   seq-mean-token-mean     Σ_rows (Σ_t ℓm / (Σ_t m + 1e-8)) / N_seq · dp
//   seq-mean-token-sum-norm Σ ℓm / loss_scale_factor         (default T = response_length)
// As in verl, an all-empty mask gives 0/0 = NaN for the mean modes. Returns a 0-dim tensor.
inline torch::Tensor agg_loss(const torch::Tensor& loss_mat, const torch::Tensor& mask, const std::string& mode,
                              const AggLossOptions& opts = {}) {
  const std::string where = "agg_loss('" + mode + "')";
  detail::check_2d(loss_mat, "loss_mat", where);
  detail::check_same_shape(mask, "mask", loss_mat, "loss_mat", where);
  if (mode == "token-mean") {
    const torch::Tensor sum = masked_sum(loss_mat, mask);
    if (opts.batch_num_tokens) return sum / *opts.batch_num_tokens * opts.dp_size;
    return sum / mask.sum() * opts.dp_size;
  }
  if (mode == "seq-mean-token-sum" || mode == "seq-mean-token-mean") {
    const torch::Tensor row_tokens = mask.sum(-1);         // [B]
    torch::Tensor seq_losses = (loss_mat * mask).sum(-1);  // [B]
    if (mode == "seq-mean-token-mean") seq_losses = seq_losses / (row_tokens + 1e-8);
    const torch::Tensor seq_mask = (row_tokens > 0).to(at::kFloat);  // non-empty rows
    const torch::Tensor sum = masked_sum(seq_losses, seq_mask);
    if (opts.global_batch_size) return sum / *opts.global_batch_size * opts.dp_size;
    return sum / seq_mask.sum() * opts.dp_size;
  }
  if (mode == "seq-mean-token-sum-norm") {
    const torch::Tensor total = (loss_mat * mask).sum(-1).sum();
    const double factor = opts.loss_scale_factor ? *opts.loss_scale_factor : static_cast<double>(loss_mat.size(-1));
    return total / factor;
  }
  std::string valid;
  for (const std::string& m : agg_loss_modes()) valid += (valid.empty() ? "" : ", ") + m;
  VERLPP_FAIL_AT("agg_loss", "unknown loss_agg_mode '{}'; valid modes: {}", mode, valid);
}

}  // namespace verlpp::algo
