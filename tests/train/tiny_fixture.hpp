// The train tests' shared fixture: the embedded tiny model (examples/tiny) with seeded weights.
#pragma once

#include <verlpp/data/batch.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/model/model_config.hpp>

#include <verlpp/train/logprob.hpp>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>

#include <functional>
#include <string>
#include <vector>

namespace verlpp::test {

inline model::DecoderLM tiny_model(uint64_t seed) {
  model::DecoderLM m(model::load_model_config(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/config.json"));
  m.init_weights(seed);
  return m;
}

// Copies of every parameter's values, in named_parameters() order.
inline std::vector<at::Tensor> parameter_values(const model::DecoderLM& m) {
  std::vector<at::Tensor> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(p.detach().clone());
  return out;
}

// An RL-layout batch of random tokens ([left-padded prompt | right-padded response], as
// append_responses makes): row r drops left_pad(r) prompt tokens and right_pad(r) response
// tokens. Fields input_ids, attention_mask, position_ids, responses, response_mask; the
// caller adds what its test needs. Seeds LibTorch's generator with `seed` first.
inline data::Batch ragged_batch(int64_t vocab, int64_t rows, int64_t prompt, int64_t response, uint64_t seed,
                                const std::function<int64_t(int64_t)>& left_pad,
                                const std::function<int64_t(int64_t)>& right_pad) {
  at::manual_seed(seed);
  const int64_t t = prompt + response;
  at::Tensor ids = at::randint(vocab, {rows, t}, at::TensorOptions().dtype(at::kLong));
  at::Tensor mask = at::ones({rows, t}, at::TensorOptions().dtype(at::kLong));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < left_pad(r); ++k) mask[r][k] = 0;
    for (int64_t k = 0; k < right_pad(r); ++k) mask[r][t - 1 - k] = 0;
  }
  data::Batch b;
  b.set("input_ids", ids);
  b.set("attention_mask", mask);
  b.set("position_ids", mask.cumsum(1).sub(1).clamp_min(0));
  b.set("responses", ids.narrow(1, prompt, response).contiguous());
  b.set("response_mask", mask.narrow(1, prompt, response).to(at::kFloat).contiguous());
  return b;
}

// ragged_batch plus what a policy update needs: old_log_probs (the model's own, perturbed by
// N(0, 0.3) so ratios differ from 1 and clipping can act) and advantages ~ N(0, 1).
inline data::Batch policy_batch(const model::DecoderLM& m, int64_t rows, int64_t prompt, int64_t response,
                                uint64_t seed, const std::function<int64_t(int64_t)>& left_pad,
                                const std::function<int64_t(int64_t)>& right_pad) {
  data::Batch b = ragged_batch(m.config().vocab_size, rows, prompt, response, seed, left_pad, right_pad);
  at::NoGradGuard no_grad;
  auto old = train::response_log_probs(m, b.tensor("input_ids"), b.tensor("attention_mask"), b.tensor("position_ids"),
                                       response, 1.0, false);
  b.set("old_log_probs", old.log_probs.add(at::randn({rows, response}).mul(0.3)));
  b.set("advantages", at::randn({rows, response}));
  return b;
}

}  // namespace verlpp::test
