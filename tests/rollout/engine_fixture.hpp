// The engine tests' shared fixture (test_engine.cpp, test_engine_gpu.cpp): the embedded tiny
// model, deterministic prompts, and the independent references: one full forward per position,
// a naive full-recompute greedy generator, and an fp64 forward to measure log-prob error by.
#pragma once

#include <verlpp/model/decoder.hpp>
#include <verlpp/model/model_config.hpp>
#include <verlpp/rollout/engine.hpp>

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/tensor.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

namespace verlpp::test {

// examples/tiny, by default with 10x its init scale (0.2), so logits are far from uniform (no
// argmax near-ties); 0.02 is the file's own.
inline model::ModelConfig tiny_config(double initializer_range = 0.2) {
  std::ifstream in(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["initializer_range"] = initializer_range;
  return model::parse_model_config(j, "tiny");
}

// tiny_config()'s model with seeded weights (drawn in fp32 on the CPU), then in `dtype` on `device`.
inline model::DecoderLM tiny_model(uint64_t seed, at::ScalarType dtype = at::kFloat,
                                   c10::Device device = c10::Device(c10::kCPU)) {
  model::DecoderLM m(tiny_config());
  m.init_weights(seed);
  if (dtype != at::kFloat || !device.is_cpu()) m.to(dtype, device);
  return m;
}

// `len` token ids below 340, different for each `salt`.
inline std::vector<int64_t> prompt_of(int64_t len, int64_t salt) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < len; ++i) ids.push_back((i * 37 + salt * 101 + 5) % 340);
  return ids;
}

// log_softmax(logits / T) of every position of `ids` by one full forward: [T, V].
inline at::Tensor full_logprobs(const model::DecoderLM& m, const std::vector<int64_t>& ids, double T) {
  at::NoGradGuard no_grad;
  at::Tensor x = at::tensor(ids, at::TensorOptions().dtype(at::kLong)).unsqueeze(0);
  return at::log_softmax(m.logits(m.forward_padded(x))[0] / T, -1);
}

// The naive greedy generator: full recompute, argmax each step.
inline std::vector<int64_t> naive_greedy(const model::DecoderLM& m, std::vector<int64_t> ids, int64_t max_new) {
  const size_t prompt = ids.size();
  for (int64_t t = 0; t < max_new; ++t)
    ids.push_back(at::argmax(full_logprobs(m, ids, 1.0)[int64_t(ids.size()) - 1]).item<int64_t>());
  return std::vector<int64_t>(ids.begin() + int64_t(prompt), ids.end());
}

// `m` as an fp64 copy on the CPU: a reference exact to ~1e-12.
inline model::DecoderLM fp64_copy(const model::DecoderLM& m) {
  model::DecoderLM exact = m;
  exact.to(at::kDouble, c10::Device(c10::kCPU));
  return exact;
}

// The worst |engine log-prob - fp64 full forward of m's weights| over `out`'s tokens, relative
// to the log-prob's size (/ max(1, |log-prob|)).
inline double worst_logprob_error(const model::DecoderLM& m, const std::vector<int64_t>& prompt,
                                  const rollout::GenerateOutput& out, double T) {
  std::vector<int64_t> ids = prompt;
  ids.insert(ids.end(), out.token_ids.begin(), out.token_ids.end());
  const at::Tensor lp = full_logprobs(fp64_copy(m), ids, T);
  double worst = 0;
  for (size_t i = 0; i < out.token_ids.size(); ++i) {
    const double ref = lp[int64_t(prompt.size() + i) - 1][out.token_ids[i]].item<double>();
    worst = std::max(worst, std::abs(ref - double(out.logprobs[i])) / std::max(1.0, std::abs(ref)));
  }
  return worst;
}

}  // namespace verlpp::test
