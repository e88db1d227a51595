// sample (sample.hpp): the kernel call, or the reference: sorted probabilities, top-k and top-p
// masks, and a cumulative sum searched at each row's draw, all batched over the rows.
#include "sample.hpp"

#include "kernel_call.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/sdk/sample_args.hpp>

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/where.h>

namespace verlpp::ops {
using detail::KernelId;
using detail::Operand;

uint64_t splitmix64(uint64_t x) { return sdk::splitmix64(x); }

double uniform_draw(uint64_t seed, uint64_t step) { return sdk::uniform_draw(seed, step); }

std::pair<at::Tensor, at::Tensor> sample_reference(const at::Tensor& logits, const RowDraws& rows) {
  const int64_t B = logits.size(0), V = logits.size(1);
  VERLPP_CHECK(logits.dim() == 2 && int64_t(rows.temperature.size()) == B && int64_t(rows.top_k.size()) == B &&
                   int64_t(rows.top_p.size()) == B && int64_t(rows.draws.size()) == B,
               "sample: logits must be [B, V] with B = {} rows of settings, got {} dims", rows.temperature.size(),
               logits.dim());
  const auto dev = logits.device();
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const auto i64 = at::TensorOptions().dtype(at::kLong);
  std::vector<float> temps;
  std::vector<int64_t> top_ks;
  std::vector<uint8_t> greedy_rows;
  bool any_greedy = false, any_random = false;
  for (int64_t r = 0; r < B; ++r) {
    const bool greedy = rows.temperature[size_t(r)] == 0;
    any_greedy |= greedy;
    any_random |= !greedy;
    greedy_rows.push_back(greedy);
    temps.push_back(greedy ? 1.0f : rows.temperature[size_t(r)]);
    const int64_t k = rows.top_k[size_t(r)];
    top_ks.push_back(k > 0 && k < V ? k : V);
  }
  const at::Tensor x = logits.to(at::kFloat);
  const at::Tensor logp = at::log_softmax(x / at::tensor(temps, f32).to(dev).unsqueeze(1), -1);  // [B, V]
  at::Tensor tokens;
  if (any_random) {
    auto sorted = at::sort(logp, -1, /*descending=*/true);
    at::Tensor probs = at::exp(std::get<0>(sorted));  // [B, V] descending
    at::Tensor pos = at::arange(V, i64.device(dev)).unsqueeze(0);
    at::Tensor keep = pos < at::tensor(top_ks, i64).to(dev).unsqueeze(1);
    at::Tensor pk = probs * keep;
    at::Tensor before = at::cumsum(pk, -1) - pk;  // mass ahead of each
    at::Tensor p = at::tensor(rows.top_p, f32).to(dev).unsqueeze(1);
    keep = keep & (before < p * pk.sum(-1, /*keepdim=*/true));
    at::Tensor kept = probs * keep;
    at::Tensor cum = at::cumsum(kept, -1);
    at::Tensor target = at::tensor(rows.draws, f32).to(dev).unsqueeze(1) * cum.narrow(1, V - 1, 1);
    at::Tensor choice = (cum <= target).sum(-1, /*keepdim=*/true);
    at::Tensor last = keep.sum(-1, /*keepdim=*/true) - 1;
    choice = at::where(choice > last, last, choice);
    tokens = std::get<1>(sorted).gather(1, choice).squeeze(1);
  }
  if (any_greedy) {
    at::Tensor argmax = at::argmax(x, -1);
    tokens = !any_random
                 ? argmax
                 : at::where(at::tensor(greedy_rows, at::TensorOptions().dtype(at::kByte)).to(dev).to(at::kBool),
                             argmax, tokens);
  }
  tokens = tokens.to(at::kLong);
  return {tokens, logp.gather(1, tokens.unsqueeze(1)).squeeze(1)};
}

void sample(const hw::Kernels* kernels, const at::Tensor& logits, const at::Tensor& temperature,
            const at::Tensor& top_k, const at::Tensor& top_p, const at::Tensor& seeds, uint64_t step,
            const at::Tensor& tokens, const at::Tensor& logprobs) {
  if (detail::offered(kernels, KernelId::sample)) {
    kernels->call<KernelId::sample>(Operand(logits), Operand(temperature), Operand(top_k), Operand(top_p),
                                    Operand(seeds, /*as_unsigned=*/true), step, Operand(tokens), Operand(logprobs),
                                    detail::kernel_stream(*kernels, logits));
    return;
  }
  const int64_t b = logits.size(0);
  const at::Tensor t = temperature.to(at::kCPU).to(at::kFloat).contiguous(),
                   p = top_p.to(at::kCPU).to(at::kFloat).contiguous();
  const at::Tensor k = top_k.to(at::kCPU).to(at::kLong).contiguous(), s = seeds.to(at::kCPU).to(at::kLong).contiguous();
  RowDraws rows;
  for (int64_t r = 0; r < b; ++r) {
    rows.temperature.push_back(t.data_ptr<float>()[r]);
    rows.top_p.push_back(p.data_ptr<float>()[r]);
    rows.top_k.push_back(k.data_ptr<int64_t>()[r]);
    rows.draws.push_back(float(uniform_draw(uint64_t(s.data_ptr<int64_t>()[r]), step)));
  }
  const auto [sampled, sampled_logprobs] = sample_reference(logits, rows);
  tokens.copy_(sampled);
  logprobs.copy_(sampled_logprobs);
}

}  // namespace verlpp::ops
