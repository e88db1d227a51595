// Entropy of the categorical distribution given by logits, per position (verl:
// torch_functional.entropy_from_logits and entropy_from_logits_with_chunking), and the entropy
// bonus aggregated like a loss. Decision: H = logsumexp(z) − Σ softmax(z)·z, which never takes
// log of a probability (no log 0 for tokens whose probability underflows).
#pragma once

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/logsumexp.h>
#include <ATen/ops/softmax.h>

#include <algorithm>
#include <string>
#include <vector>

#include <verlpp/algo/agg_loss.hpp>
#include <verlpp/algo/common.hpp>

namespace verlpp::algo {

// logits [..., V] float -> entropy [...] in the logits' dtype, differentiable.
inline torch::Tensor entropy_from_logits(const torch::Tensor& logits) {
  VERLPP_CHECK(logits.defined() && logits.dim() >= 1, "entropy_from_logits: logits has shape {}; expected [..., vocab]",
               detail::shape_str(logits));
  const torch::Tensor pd = at::softmax(logits, -1);
  return at::logsumexp(logits, {-1}) - (pd * logits).sum(-1);
}

// The same value computed chunk_size rows at a time (rows = all leading dims flattened), each
// chunk cast to fp32, so at most one chunk of fp32 probabilities exists at a time (a
// [4096, 152064] bf16 logits tensor would otherwise need 2.5 GB of fp32 softmax).
// logits [..., V] -> entropy [...] in fp32.
inline torch::Tensor entropy_from_logits_with_chunking(const torch::Tensor& logits, int64_t chunk_size = 2048) {
  VERLPP_CHECK(logits.defined() && logits.dim() >= 1,
               "entropy_from_logits_with_chunking: logits has shape {}; expected [..., vocab]",
               detail::shape_str(logits));
  VERLPP_CHECK(chunk_size > 0, "entropy_from_logits_with_chunking: chunk_size must be > 0; got {}", chunk_size);
  const auto lead = logits.sizes().slice(0, logits.dim() - 1);
  const torch::Tensor rows = logits.reshape({-1, logits.size(-1)});  // [N, V]
  const int64_t num_rows = rows.size(0);
  std::vector<torch::Tensor> parts;
  for (int64_t start = 0; start < num_rows; start += chunk_size) {
    const torch::Tensor chunk = rows.narrow(0, start, std::min(chunk_size, num_rows - start)).to(at::kFloat);
    const torch::Tensor pd = at::softmax(chunk, -1);
    parts.push_back(at::logsumexp(chunk, {-1}) - (pd * chunk).sum(-1));
  }
  const torch::Tensor entropy = parts.empty() ? at::empty({0}, rows.options().dtype(at::kFloat)) : at::cat(parts, 0);
  return entropy.reshape(lead);
}

// The entropy of logits [B, T, V] aggregated over response tokens (verl: compute_entropy_loss).
inline torch::Tensor compute_entropy_loss(const torch::Tensor& logits, const torch::Tensor& response_mask,
                                          const std::string& loss_agg_mode = "token-mean",
                                          const AggLossOptions& agg = {}) {
  return agg_loss(entropy_from_logits(logits), response_mask, loss_agg_mode, agg);
}

}  // namespace verlpp::algo
