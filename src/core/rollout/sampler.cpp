// The sampler's reference path (LibTorch ops, batched, any device) and the dispatch to a
// plugin's `sample` kernel. Random draws are counter-based (splitmix64 of seed and step), so a
// row's token depends only on its logits, its settings, its seed and its step.
#include <verlpp/rollout/sampling.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/hw/kernels.hpp>

#include "../hw/dlpack_view.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/where.h>

#include <cmath>

namespace verlpp::rollout {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

void validate(const SamplingParams& p) {
  if (p.n < 1) VERLPP_FAIL_AT("sampling.n", "n = {} must be at least 1", p.n);
  if (p.max_new_tokens < 1) VERLPP_FAIL_AT("sampling.max_new_tokens", "max_new_tokens = {} must be at least 1", p.max_new_tokens);
  if (!(p.temperature >= 0) || !std::isfinite(p.temperature))
    VERLPP_FAIL_AT("sampling.temperature", "temperature = {} must be finite and >= 0 (0 = greedy)", p.temperature);
  if (p.top_k < -1) VERLPP_FAIL_AT("sampling.top_k", "top_k = {} must be >= 1, or 0 / -1 for all tokens", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) VERLPP_FAIL_AT("sampling.top_p", "top_p = {} must be in (0, 1]", p.top_p);
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAborted: return "aborted";
  }
  return "?";
}

uint64_t sample_seed(uint64_t seed, int64_t index) { return splitmix64(splitmix64(seed) ^ uint64_t(index) * 0xD1B54A32D192ED03ull); }

double uniform_draw(uint64_t seed, int64_t step) {
  const uint64_t bits = splitmix64(splitmix64(seed) + uint64_t(step) * 0x9E3779B97F4A7C15ull);
  return double(bits >> 11) * (1.0 / 9007199254740992.0);  // 53 bits in [0, 1)
}

SampleResult sample_reference(const at::Tensor& logits, const std::vector<RowSampling>& rows) {
  VERLPP_CHECK(logits.dim() == 2 && logits.size(0) == int64_t(rows.size()),
               "sample: logits must be [B = {}, V], got {} dims", rows.size(), logits.dim());
  const int64_t B = logits.size(0), V = logits.size(1);
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  std::vector<float> temps, top_ps, draws;
  std::vector<int64_t> top_ks;
  bool any_greedy = false, any_random = false;
  for (const RowSampling& r : rows) {
    const bool greedy = r.temperature == 0;
    any_greedy |= greedy;
    any_random |= !greedy;
    temps.push_back(greedy ? 1.0f : float(r.temperature));
    top_ks.push_back(r.top_k > 0 && r.top_k < V ? r.top_k : V);
    top_ps.push_back(float(r.top_p));
    draws.push_back(float(uniform_draw(r.seed, r.step)));
  }
  const auto dev = logits.device();
  at::Tensor x = logits.to(at::kFloat);
  at::Tensor logp = at::log_softmax(x / at::tensor(temps, f32).to(dev).unsqueeze(1), -1);  // [B, V]
  at::Tensor tokens;
  if (any_random) {
    auto sorted = at::sort(logp, -1, /*descending=*/true);
    at::Tensor probs = at::exp(std::get<0>(sorted));                                  // [B, V] descending
    at::Tensor pos = at::arange(V, at::TensorOptions().dtype(at::kLong).device(dev)).unsqueeze(0);
    at::Tensor keep = pos < at::tensor(top_ks, at::TensorOptions().dtype(at::kLong)).to(dev).unsqueeze(1);
    at::Tensor pk = probs * keep;
    at::Tensor before = at::cumsum(pk, -1) - pk;                                      // mass ahead of each
    at::Tensor p = at::tensor(top_ps, f32).to(dev).unsqueeze(1);
    keep = keep & (before < p * pk.sum(-1, /*keepdim=*/true));
    at::Tensor kept = probs * keep;
    at::Tensor cum = at::cumsum(kept, -1);
    at::Tensor target = at::tensor(draws, f32).to(dev).unsqueeze(1) * cum.narrow(1, V - 1, 1);
    at::Tensor choice = (cum <= target).sum(-1, /*keepdim=*/true);
    at::Tensor last = keep.sum(-1, /*keepdim=*/true) - 1;
    choice = at::where(choice > last, last, choice);
    tokens = std::get<1>(sorted).gather(1, choice).squeeze(1);
  }
  if (any_greedy) {
    std::vector<uint8_t> greedy_rows;
    for (const RowSampling& r : rows) greedy_rows.push_back(r.temperature == 0);
    at::Tensor argmax = at::argmax(x, -1);
    tokens = !any_random ? argmax
                         : at::where(at::tensor(greedy_rows, at::TensorOptions().dtype(at::kByte)).to(dev).to(at::kBool),
                                     argmax, tokens);
  }
  SampleResult out;
  out.token_ids = tokens.to(at::kLong).to(at::kCPU).contiguous();
  out.logprobs = logp.gather(1, tokens.to(at::kLong).unsqueeze(1)).squeeze(1).to(at::kCPU).contiguous();
  (void)B;
  return out;
}

DeviceSamples sample_on_device(const at::Tensor& logits, const DeviceSampling& rows, const hw::Kernels& kernels) {
  VERLPP_CHECK(kernels.table().sample != nullptr, "sample_on_device: plugin {} has no sample kernel",
               kernels.plugin().display_name());
  // ABI 1.3 plugins read bf16 / f16 logits themselves (as their exact fp32 values, with the
  // same result), which saves the fp32 copy: at decode batch 256 x 151,936 a 156 MB write per
  // step. Older plugins take fp32 only.
  const bool native = kernels.plugin().abi_minor() >= 3 &&
                      (logits.scalar_type() == at::kBFloat16 || logits.scalar_type() == at::kHalf);
  at::Tensor x = (native ? logits : logits.to(at::kFloat)).contiguous();
  auto on = [&](at::ScalarType t) { return at::TensorOptions().dtype(t).device(x.device()); };
  const int64_t b = x.size(0);
  const at::Tensor packed = at::empty({b + (b + 1) / 2}, on(at::kLong));
  const at::Tensor tokens = packed.narrow(0, 0, b), logprobs = packed.narrow(0, b, (b + 1) / 2).view(at::kFloat).narrow(0, 0, b);
  DLTensor d_x = hw::detail::dl_view(x), d_temp = hw::detail::dl_view(rows.temperature),
           d_topk = hw::detail::dl_view(rows.top_k), d_topp = hw::detail::dl_view(rows.top_p),
           d_seed = hw::detail::dl_view(rows.seed, /*as_unsigned=*/true), d_tok = hw::detail::dl_view(tokens),
           d_lp = hw::detail::dl_view(logprobs);
  // The ABI takes one step for the batch; each row's own step is folded into its seed instead.
  kernels.plugin().check(kernels.table().sample(&d_x, &d_temp, &d_topk, &d_topp, &d_seed, 0, &d_tok, &d_lp,
                                                kernels.current_stream(x.device())),
                         "kernels.sample");
  return {tokens, logprobs, packed};
}

SampleResult read_samples(const DeviceSamples& samples, int64_t rows) {
  const at::Tensor host = samples.packed.to(at::kCPU);  // one copy, one wait
  const int64_t b = samples.tokens.size(0);            // the log-probs start after b int64s
  return SampleResult{host.narrow(0, 0, rows), host.narrow(0, b, (b + 1) / 2).view(at::kFloat).narrow(0, 0, rows)};
}

SampleResult sample(const at::Tensor& logits, const std::vector<RowSampling>& rows, const hw::Kernels* kernels) {
  if (kernels == nullptr || kernels->table().sample == nullptr) return sample_reference(logits, rows);
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
