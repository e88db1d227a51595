// The sampler: request validation, seeds, and the dispatch of a row batch to the ops layer's
// `sample` (the plugin's kernel, or the reference in LibTorch ops). Random draws are
// counter-based (splitmix64 of seed and step), so a row's token depends only on its logits, its
// settings, its seed and its step.
#include <verlpp/rollout/sampling.hpp>

#include "../ops/sample.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/hw/kernels.hpp>

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>

#include <cmath>

namespace verlpp::rollout {

void validate(const SamplingParams& p) {
  if (p.n < 1) VERLPP_FAIL_AT("sampling.n", "n = {} must be at least 1", p.n);
  if (p.max_new_tokens < 1)
    VERLPP_FAIL_AT("sampling.max_new_tokens", "max_new_tokens = {} must be at least 1", p.max_new_tokens);
  if (!(p.temperature >= 0) || !std::isfinite(p.temperature))
    VERLPP_FAIL_AT("sampling.temperature", "temperature = {} must be finite and >= 0 (0 = greedy)", p.temperature);
  if (p.top_k < -1) VERLPP_FAIL_AT("sampling.top_k", "top_k = {} must be >= 1, or 0 / -1 for all tokens", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) VERLPP_FAIL_AT("sampling.top_p", "top_p = {} must be in (0, 1]", p.top_p);
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAborted:
      return "aborted";
  }
  return "?";
}

uint64_t sample_seed(uint64_t seed, int64_t index) {
  return ops::splitmix64(ops::splitmix64(seed) ^ uint64_t(index) * 0xD1B54A32D192ED03ull);
}

double uniform_draw(uint64_t seed, int64_t step) { return ops::uniform_draw(seed, uint64_t(step)); }

SampleResult sample_reference(const at::Tensor& logits, const std::vector<RowSampling>& rows) {
  ops::RowDraws draws;
  for (const RowSampling& r : rows) {
    draws.temperature.push_back(float(r.temperature));
    draws.top_k.push_back(r.top_k);
    draws.top_p.push_back(float(r.top_p));
    draws.draws.push_back(float(uniform_draw(r.seed, r.step)));
  }
  const auto [tokens, logprobs] = ops::sample_reference(logits, draws);
  return {tokens.to(at::kCPU).contiguous(), logprobs.to(at::kCPU).contiguous()};
}

DeviceSamples sample_on_device(const at::Tensor& logits, const DeviceSampling& rows, const hw::Kernels& kernels) {
  VERLPP_CHECK(kernels.offers(hw::KernelId::sample), "sample_on_device: plugin {} has no sample kernel",
               kernels.plugin().display_name());
  // ABI 1.3 plugins read bf16 / f16 logits themselves (as their exact fp32 values, with the
  // same result), which saves the fp32 copy: at decode batch 256 x 151,936 a 156 MB write per
  // step. Older plugins take fp32 only.
  const bool native =
      kernels.plugin().abi_minor() >= 3 && (logits.scalar_type() == at::kBFloat16 || logits.scalar_type() == at::kHalf);
  at::Tensor x = (native ? logits : logits.to(at::kFloat)).contiguous();
  auto on = [&](at::ScalarType t) { return at::TensorOptions().dtype(t).device(x.device()); };
  const int64_t b = x.size(0);
  const at::Tensor packed = at::empty({b + (b + 1) / 2}, on(at::kLong));
  const at::Tensor tokens = packed.narrow(0, 0, b),
                   logprobs = packed.narrow(0, b, (b + 1) / 2).view(at::kFloat).narrow(0, 0, b);
  // The ABI takes one step for the batch; each row's own step is folded into its seed instead.
  ops::sample(&kernels, x, rows.temperature, rows.top_k, rows.top_p, rows.seed, 0, tokens, logprobs);
  return {tokens, logprobs, packed};
}

SampleResult read_samples(const DeviceSamples& samples, int64_t rows) {
  const at::Tensor host = samples.packed.to(at::kCPU);  // one copy, one wait
  const int64_t b = samples.tokens.size(0);             // the log-probs start after b int64s
  return SampleResult{host.narrow(0, 0, rows), host.narrow(0, b, (b + 1) / 2).view(at::kFloat).narrow(0, 0, rows)};
}

SampleResult sample(const at::Tensor& logits, const std::vector<RowSampling>& rows, const hw::Kernels* kernels) {
  if (kernels == nullptr || !kernels->offers(hw::KernelId::sample)) return sample_reference(logits, rows);
  const auto dev = logits.device();
  std::vector<float> temps, top_ps;
  std::vector<int32_t> top_ks;
  std::vector<int64_t> seeds;
  for (const RowSampling& r : rows) {
    temps.push_back(float(r.temperature));
    top_ks.push_back(int32_t(r.top_k > 0 ? r.top_k : 0));
    top_ps.push_back(float(r.top_p));
    seeds.push_back(int64_t(sample_seed(r.seed, r.step)));
  }
  DeviceSampling on_device{at::tensor(temps, at::TensorOptions().dtype(at::kFloat)).to(dev),
                           at::tensor(top_ks, at::TensorOptions().dtype(at::kInt)).to(dev),
                           at::tensor(top_ps, at::TensorOptions().dtype(at::kFloat)).to(dev),
                           at::tensor(seeds, at::TensorOptions().dtype(at::kLong)).to(dev)};
  // The copies to the host are queued after the kernel on LibTorch's current stream and are
  // what waits for it.
  const DeviceSamples out = sample_on_device(logits, on_device, *kernels);
  return read_samples(out, out.tokens.size(0));
}

}  // namespace verlpp::rollout
