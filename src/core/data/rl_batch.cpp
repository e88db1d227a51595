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

at::Tensor outcome_token_scores(const at::Tensor& response_mask, const std::vector<double>& scores) {
  if (response_mask.dim() != 2)
    throw Error("outcome_token_scores", fmt::format("response_mask has {} dimensions, not 2", response_mask.dim()));
  const int64_t b = response_mask.size(0), r = response_mask.size(1);
  if (int64_t(scores.size()) != b)
    throw Error("outcome_token_scores", fmt::format("{} scores for {} rows", scores.size(), b));
  const at::Tensor lengths = response_mask.sum(1).to(at::kLong).cpu().contiguous();
  const int64_t* len = lengths.data_ptr<int64_t>();
  std::vector<float> values(size_t(b * r), 0.0f);
  for (int64_t row = 0; row < b; ++row)
    if (len[row] > 0) values[size_t(row * r + len[row] - 1)] = float(scores[size_t(row)]);  // verl: the last token
  return float_tensor(values, b, r).to(response_mask.device());
}

}  // namespace verlpp::data
