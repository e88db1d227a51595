// The RL layout of a Batch (see rl_batch.hpp).
#include <verlpp/core/error.hpp>
#include <verlpp/data/rl_batch.hpp>

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/from_blob.h>

#include <algorithm>

namespace verlpp::data {

namespace {

at::Tensor long_tensor(std::vector<int64_t>& values, int64_t rows, int64_t cols) {
  return at::from_blob(values.data(), {rows, cols}, at::TensorOptions().dtype(at::kLong)).clone();
}

at::Tensor float_tensor(std::vector<float>& values, int64_t rows, int64_t cols) {
  return at::from_blob(values.data(), {rows, cols}, at::TensorOptions().dtype(at::kFloat)).clone();
}

}  // namespace

Batch collate_prompt_ids(const std::vector<TokenIds>& prompts, TokenId pad_token_id) {
  if (prompts.empty()) throw Error("collate_prompt_ids", "no prompts");
  size_t longest = 0;
  for (size_t row = 0; row < prompts.size(); ++row) {
    if (prompts[row].empty()) throw Error("collate_prompt_ids", fmt::format("prompt row {} has no tokens", row));
    longest = std::max(longest, prompts[row].size());
  }
  const int64_t b = int64_t(prompts.size()), t = int64_t(longest);
  std::vector<int64_t> ids(size_t(b * t), pad_token_id), mask(size_t(b * t), 0), pos(size_t(b * t), 0);
  for (int64_t row = 0; row < b; ++row) {
    const TokenIds& prompt = prompts[size_t(row)];
    const int64_t len = int64_t(prompt.size()), offset = t - len;  // left padding
    for (int64_t k = 0; k < len; ++k) {
      ids[size_t(row * t + offset + k)] = prompt[size_t(k)];
      mask[size_t(row * t + offset + k)] = 1;
      pos[size_t(row * t + offset + k)] = k;
    }
  }
  Batch out;
  out.set(fields::kInputIds, long_tensor(ids, b, t));
  out.set(fields::kAttentionMask, long_tensor(mask, b, t));
  out.set(fields::kPositionIds, long_tensor(pos, b, t));
  return out;
}

Batch append_responses(const Batch& prompts, const std::vector<TokenIds>& responses, int64_t response_length,
                       TokenId pad_token_id) {
  const int64_t b = prompts.size(), r = response_length;
  if (int64_t(responses.size()) != b)
    throw Error("append_responses", fmt::format("{} responses for {} prompt rows", responses.size(), b));
  if (r < 1) throw Error("append_responses", fmt::format("response_length {} must be >= 1", r));
  std::vector<int64_t> ids(size_t(b * r), pad_token_id);
  std::vector<float> mask(size_t(b * r), 0.0f);
  for (int64_t row = 0; row < b; ++row) {
    const auto& resp = responses[size_t(row)];
    if (int64_t(resp.size()) > r)
      throw Error("append_responses",
                  fmt::format("row {}: the response has {} tokens, more than response_length {}", row, resp.size(), r));
    for (size_t k = 0; k < resp.size(); ++k) {
      ids[size_t(row * r) + k] = resp[k];
      mask[size_t(row * r) + k] = 1.0f;
    }
  }
  at::Tensor response_ids = long_tensor(ids, b, r);
  at::Tensor response_mask = float_tensor(mask, b, r);
  const at::Tensor& prompt_ids = prompts.tensor(fields::kInputIds);
  const at::Tensor& prompt_mask = prompts.tensor(fields::kAttentionMask);
  const at::Tensor& prompt_pos = prompts.tensor(fields::kPositionIds);
  // Positions continue from each row's last prompt position (verl: position_ids[:, -1:] + delta).
  at::Tensor last = prompt_pos.select(1, prompt_ids.size(1) - 1).unsqueeze(1);
  at::Tensor delta = at::arange(1, r + 1, at::TensorOptions().dtype(at::kLong)).unsqueeze(0);
  Batch out = prompts;
  out.set(fields::kPrompts, prompt_ids);
  out.set(fields::kResponses, response_ids);
  out.set(fields::kResponseMask, response_mask);
  out.set(fields::kInputIds, at::cat({prompt_ids, response_ids}, 1));
  out.set(fields::kAttentionMask, at::cat({prompt_mask, response_mask.to(prompt_mask.scalar_type())}, 1));
  out.set(fields::kPositionIds, at::cat({prompt_pos, last.add(delta)}, 1));
  return out;
}

Batch append_samples(const Batch& prompts, const std::vector<TokenIds>& responses,
                     const std::vector<std::vector<float>>& log_probs, int64_t response_length, TokenId pad_token_id) {
  Batch out = append_responses(prompts, responses, response_length, pad_token_id);
  const int64_t b = out.size(), r = response_length;
  if (log_probs.size() != responses.size())
    throw Error("append_samples", fmt::format("{} log-prob rows for {} responses", log_probs.size(), responses.size()));
  std::vector<float> values(size_t(b * r), 0.0f);
  for (int64_t row = 0; row < b; ++row) {
    const auto& lp = log_probs[size_t(row)];
    if (lp.size() != responses[size_t(row)].size())
      throw Error("append_samples", fmt::format("row {}: {} log-probs for a response of {} tokens", row, lp.size(),
                                                responses[size_t(row)].size()));
    std::copy(lp.begin(), lp.end(), values.begin() + row * r);
  }
  out.set(fields::kRolloutLogProbs, float_tensor(values, b, r));
  return out;
}

Batch append_trajectories(const Batch& prompts, const std::vector<TokenIds>& responses,
                          const std::vector<std::vector<float>>& masks,
                          const std::vector<std::vector<float>>& log_probs, int64_t response_length,
                          TokenId pad_token_id) {
  Batch out = append_samples(prompts, responses, log_probs, response_length, pad_token_id);
  const int64_t b = out.size(), r = response_length;
  if (masks.size() != responses.size())
    throw Error("append_trajectories", fmt::format("{} mask rows for {} responses", masks.size(), responses.size()));
  std::vector<float> values(size_t(b * r), 0.0f);
  for (int64_t row = 0; row < b; ++row) {
    const auto& mask = masks[size_t(row)];
    if (mask.size() != responses[size_t(row)].size())
      throw Error("append_trajectories", fmt::format("row {}: {} mask values for a response of {} tokens", row,
                                                     mask.size(), responses[size_t(row)].size()));
    for (size_t k = 0; k < mask.size(); ++k)
      if (mask[k] != 0.0f && mask[k] != 1.0f)
        throw Error("append_trajectories",
                    fmt::format("row {}: mask value {} at token {} is not 0 or 1", row, mask[k], k));
    std::copy(mask.begin(), mask.end(), values.begin() + row * r);
  }
  out.set(fields::kResponseMask, float_tensor(values, b, r));
  // verl's agent loop: position_ids = clamp(cumsum(attention_mask) - 1, 0); the same positions as
  // append_responses' at every token, different only at the padding.
  const at::Tensor attention = out.tensor(fields::kAttentionMask).to(at::kLong);
  out.set(fields::kPositionIds, attention.cumsum(1).sub(1).clamp_min(0));
  return out;
}

at::Tensor response_attention(const Batch& batch) {
  const int64_t r = batch.tensor(fields::kResponses).size(1);
  const at::Tensor& attention = batch.tensor(fields::kAttentionMask);
  return attention.narrow(1, attention.size(1) - r, r).to(at::kFloat);
}

at::Tensor response_lengths(const Batch& batch) {
  return response_attention(batch).sum(1).to(at::kLong).cpu().contiguous();
}

at::Tensor outcome_token_scores(const at::Tensor& valid, const std::vector<double>& scores) {
  if (valid.dim() != 2)
    throw Error("outcome_token_scores", fmt::format("the response mask has {} dimensions, not 2", valid.dim()));
  const int64_t b = valid.size(0), r = valid.size(1);
  if (int64_t(scores.size()) != b)
    throw Error("outcome_token_scores", fmt::format("{} scores for {} rows", scores.size(), b));
  // The last valid token, found from the end (the mask may hold 0s inside a multi-turn response).
  const at::Tensor host = valid.to(at::kFloat).cpu().contiguous();
  const float* m = host.data_ptr<float>();
  std::vector<float> values(size_t(b * r), 0.0f);
  for (int64_t row = 0; row < b; ++row)
    for (int64_t k = r - 1; k >= 0; --k)
      if (m[row * r + k] != 0.0f) {
        values[size_t(row * r + k)] = float(scores[size_t(row)]);  // verl: the last valid token
        break;
      }
  return float_tensor(values, b, r).to(valid.device());
}

}  // namespace verlpp::data
