// demo_kernels: one case per kernel of the ABI's list. Inputs are drawn on the host from a fixed
// seed and copied to the device; the kernel and the host's path (the same ops function with no
// kernels) get equal copies, and their outputs are compared on the host. fp32 throughout, so
// one bound serves every float output: 1e-4 + 1e-4 |host| (the suite's tightest fp32 bound is
// 1e-5 relative; the demo only needs to show that a call computes the operation). Cache rows
// copied as they are and the optimizer's skipped step must match exactly; sampled tokens come
// from the plugin's own generator, so they are checked for what any correct sampler gives.
#include "kernel_demo.hpp"

#include "adamw.hpp"
#include "attention.hpp"
#include "logprob.hpp"
#include "norm.hpp"
#include "rotary.hpp"
#include "sample.hpp"
#include "swiglu.hpp"

#include <verlpp/core/error_text.hpp>
#include <verlpp/hw/kernels.hpp>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/logsumexp.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/topk.h>
#include <ATen/ops/zeros.h>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <tuple>
#include <vector>

namespace verlpp::ops {
namespace {

constexpr double kTolerance = 1e-4;  // absolute, and relative to the host's value

// Fixed-seed inputs on the host, copied to the device.
struct Inputs {
  Inputs(const c10::Device& device, uint64_t seed) : device(device), gen(at::detail::createCPUGenerator(seed)) {}
  at::Tensor normal(at::IntArrayRef shape) const { return at::randn(shape, gen, f32()).to(device); }
  at::Tensor uniform(at::IntArrayRef shape) const { return at::rand(shape, gen, f32()).to(device); }
  at::Tensor ints(int64_t high, at::IntArrayRef shape, at::ScalarType type = at::kLong) const {
    return at::randint(high, shape, gen, at::TensorOptions().dtype(type)).to(device);
  }
  at::Tensor zeros(at::IntArrayRef shape, at::ScalarType type = at::kFloat) const {
    return at::zeros(shape, at::TensorOptions().dtype(type).device(device));
  }
  static at::TensorOptions f32() { return at::TensorOptions().dtype(at::kFloat); }
  c10::Device device;
  at::Generator gen;
};

// Folds the comparison of one output into `r`: the worst |got - want| and whether every element
// is within the bound (exact: equal).
void compare(KernelDemoResult& r, const at::Tensor& got, const at::Tensor& want, bool exact = false) {
  const at::Tensor g = got.to(c10::kCPU).to(at::kDouble), w = want.to(c10::kCPU).to(at::kDouble);
  const at::Tensor diff = (g - w).abs();
  if (diff.numel() == 0) return;
  r.worst = std::max(r.worst, diff.max().item<double>());
  const bool within =
      exact ? diff.max().item<double>() == 0.0 : diff.le(w.abs().mul(kTolerance).add(kTolerance)).all().item<bool>();
  r.ok = r.ok && within;
  if (exact) r.tolerance = 0;
}

// inv_freq of RoPE with base 10000 over head size `s`.
at::Tensor inverse_frequencies(int64_t s, const c10::Device& device) {
  const at::Tensor i = at::arange(0, s, 2, at::TensorOptions().dtype(at::kFloat));
  return (1.0 / (at::full({1}, 10000.0, at::TensorOptions().dtype(at::kFloat)).pow(i / double(s)))).to(device);
}

using Case = std::function<void(const hw::Kernels*, const hw::Kernels&, const c10::Device&, KernelDemoResult&)>;

// A paged cache of `blocks` blocks of 4 rows, `b` sequences of the given lengths on shuffled blocks.
struct PagedCache {
  PagedCache(const Inputs& in, int64_t b, int64_t kv_heads, int64_t s) {
    k = in.normal({16, 4, kv_heads, s});
    v = in.normal({16, 4, kv_heads, s});
    // Sequence i uses blocks (3i, 3i+1, 3i+2) in reverse: tables need not be ordered.
    at::Tensor t = at::empty({b, 3}, at::TensorOptions().dtype(at::kInt));
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < 3; ++j) t[i][j] = int32_t(3 * i + 2 - j);
    tables = t.to(in.device);
    lens = at::arange(5, 5 + 2 * b, 2, at::TensorOptions().dtype(at::kInt)).to(in.device);  // 5, 7, 9, ...
  }
  at::Tensor k, v, tables, lens;
};

const std::vector<std::pair<hw::KernelId, Case>>& cases() {
  using K = const hw::Kernels*;
  static const std::vector<std::pair<hw::KernelId, Case>> list = {
      {hw::KernelId::logprob_entropy,
       [](K host, const hw::Kernels& k, const c10::Device& d, KernelDemoResult& r) {
         Inputs in(d, 11);
         const at::Tensor logits = in.normal({37, 1009}), labels = in.ints(1009, {37});
         r.shape = "[37 x 1009], temperature 0.7";
         at::Tensor lp[2] = {in.zeros({37}), in.zeros({37})}, ent[2] = {in.zeros({37}), in.zeros({37})};
         logprob_entropy(&k, logits, labels, 0.7, lp[0], ent[0]);
         logprob_entropy(host, logits, labels, 0.7, lp[1], ent[1]);
         compare(r, lp[0], lp[1]);
         compare(r, ent[0], ent[1]);
       }},
      {hw::KernelId::rms_norm,
       [](K host, const hw::Kernels& k, const c10::Device& d, KernelDemoResult& r) {
         Inputs in(d, 12);
         const at::Tensor x = in.normal({33, 896}), w = in.normal({896});
         r.shape = "[33 x 896]";
         at::Tensor out[2] = {in.zeros({33, 896}), in.zeros({33, 896})};
         rms_norm(&k, x, w, 1e-6, out[0]);
         rms_norm(host, x, w, 1e-6, out[1]);
         compare(r, out[0], out[1]);
       }},
      {hw::KernelId::rotary_embedding,
       [](K host, const hw::Kernels& k, const c10::Device& d, KernelDemoResult& r) {
         Inputs in(d, 13);
         const at::Tensor q = in.normal({9, 4, 64}), kk = in.normal({9, 2, 64}), pos = in.ints(4096, {9});
         const at::Tensor inv = inverse_frequencies(64, d);
         r.shape = "q [9 x 4 x 64], k [9 x 2 x 64]";
         at::Tensor q0 = q.clone(), k0 = kk.clone(), q1 = q.clone(), k1 = kk.clone();
         rotary_embedding(&k, q0, k0, pos, inv);
         rotary_embedding(host, q1, k1, pos, inv);
         compare(r, q0, q1);
         compare(r, k0, k1);
       }},
      {hw::KernelId::paged_attention_decode,
       [](K host, const hw::Kernels& k, const c10::Device& d, KernelDemoResult& r) {
         Inputs in(d, 14);
         const PagedCache cache(in, 3, 2, 64);
         const at::Tensor q = in.normal({3, 4, 64});
         r.shape = "3 sequences (5, 7, 9 tokens), 4 heads over 2 KV heads, head size 64, blocks of 4";
         at::Tensor out[2] = {in.zeros({3, 4, 64}), in.zeros({3, 4, 64})};
         paged_attention_decode(&k, q, cache.k, cache.v, cache.tables, cache.lens, 0.125, out[0]);
         paged_attention_decode(host, q, cache.k, cache.v, cache.tables, cache.lens, 0.125, out[1]);
         compare(r, out[0], out[1]);
       }},
      {hw::KernelId::sample,
       [](K host, const hw::Kernels& k, const c10::Device& d, KernelDemoResult& r) {
         Inputs in(d, 15);
         const at::Tensor logits = in.normal({6, 503});
         // Greedy, plain, top-k, top-p, both, a high temperature.
         const at::Tensor temperature = at::tensor({0.0f, 1.0f, 0.8f, 1.0f, 0.7f, 2.0f}, Inputs::f32()).to(d);
         const at::Tensor top_k = at::tensor({0, 0, 20, 0, 50, 0}, at::TensorOptions().dtype(at::kInt)).to(d);
         const at::Tensor top_p = at::tensor({1.0f, 1.0f, 1.0f, 0.9f, 0.8f, 1.0f}, Inputs::f32()).to(d);
         const at::Tensor seeds =
             at::tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, at::TensorOptions().dtype(at::kLong)).to(d);
         r.shape = "6 rows x 503 (greedy, top-k, top-p, temperatures)";
         at::Tensor tokens[2] = {in.zeros({6}, at::kLong), in.zeros({6}, at::kLong)};
         at::Tensor lps[2] = {in.zeros({6}), in.zeros({6})};
         sample(&k, logits, temperature, top_k, top_p, seeds, 7, tokens[0], lps[0]);
         sample(host, logits, temperature, top_k, top_p, seeds, 7, tokens[1], lps[1]);
         // The ABI leaves the random generator to the plugin, so sampled rows are checked for what
         // any correct sampler gives (as the conformance suite does): the greedy row's argmax,
         // each token inside its row's top-k set and top-p nucleus (top-p over the top-k
         // renormalised), and its log-prob log_softmax(logits / T) (T = 1 when greedy).
         compare(r, tokens[0].narrow(0, 0, 1), tokens[1].narrow(0, 0, 1), /*exact=*/true);
         const at::Tensor x = logits.to(c10::kCPU).to(at::kDouble);
         const at::Tensor t = temperature.to(c10::kCPU).to(at::kDouble), p = top_p.to(c10::kCPU).to(at::kDouble);
         const at::Tensor kk = top_k.to(c10::kCPU).to(at::kLong), got = tokens[0].to(c10::kCPU);
         at::Tensor want_lp = at::zeros({6}, at::TensorOptions().dtype(at::kDouble));
         at::Tensor allowed = at::zeros({6}, at::TensorOptions().dtype(at::kDouble));
         for (int64_t row = 0; row < 6; ++row) {
           const double temp = t[row].item<double>() > 0 ? t[row].item<double>() : 1.0;
           const at::Tensor z = x[row] / temp;
           const int64_t token = got[row].item<int64_t>();
           want_lp[row].fill_((z[token] - at::logsumexp(z, {0})).item<double>());
           const at::Tensor probs = at::softmax(z, 0);
           const at::Tensor above = probs.gt(probs[token]);  // tokens ranked before this one
           const int64_t rank = above.sum().item<int64_t>(), k_row = kk[row].item<int64_t>();
           const bool in_top_k = k_row <= 0 || rank < k_row;
           double kept = 1.0;  // the probability mass top-k keeps
           if (k_row > 0) kept = std::get<0>(probs.topk(std::min<int64_t>(k_row, probs.size(0)))).sum().item<double>();
           const bool in_nucleus = (probs * above).sum().item<double>() / kept < p[row].item<double>();
           allowed[row].fill_((t[row].item<double>() == 0 || (in_top_k && in_nucleus)) ? 1.0 : 0.0);
         }
         compare(r, allowed, at::ones({6}, at::TensorOptions().dtype(at::kDouble)), /*exact=*/true);
         compare(r, lps[0], want_lp);
       }},
      {hw::KernelId::logprob_backward,
       [](K host, const hw::Kernels& k, const c10::Device& d, KernelDemoResult& r) {
         Inputs in(d, 16);
         const double t = 0.9;
         const at::Tensor logits = in.normal({17, 701}), labels = in.ints(701, {17});
         const at::Tensor z = logits / t;
         const at::Tensor lse = at::logsumexp(z, {1}), mean_z = (at::softmax(z, 1) * z).sum(1);
         const at::Tensor g_lp = in.normal({17}), g_ent = in.normal({17});
         r.shape = "[17 x 701], temperature 0.9";
         at::Tensor out[2] = {in.zeros({17, 701}), in.zeros({17, 701})};
         logprob_backward(&k, logits, labels, lse, g_lp, mean_z, g_ent, t, out[0]);
         logprob_backward(host, logits, labels, lse, g_lp, mean_z, g_ent, t, out[1]);
         compare(r, out[0], out[1]);
       }},
      {hw::KernelId::silu_mul,
       [](K host, const hw::Kernels& k, const c10::Device& d, KernelDemoResult& r) {
         Inputs in(d, 17);
         const at::Tensor gate_up = in.normal({21, 2 * 320});
         const at::Tensor gate = gate_up.narrow(1, 0, 320), up = gate_up.narrow(1, 320, 320);
         r.shape = "[21 x 320], halves of one [21 x 640] tensor";
         at::Tensor out[2] = {in.zeros({21, 320}), in.zeros({21, 320})};
         silu_mul(&k, gate, up, out[0]);
         silu_mul(host, gate, up, out[1]);
         compare(r, out[0], out[1]);
       }},
      {hw::KernelId::silu_mul_backward,
       [](K host, const hw::Kernels& k, const c10::Device& d, KernelDemoResult& r) {
         Inputs in(d, 18);
         const at::Tensor gate = in.normal({21, 320}), up = in.normal({21, 320}), grad = in.normal({21, 320});
         r.shape = "[21 x 320]";
         at::Tensor gg[2] = {in.zeros({21, 320}), in.zeros({21, 320})},
                    gu[2] = {in.zeros({21, 320}), in.zeros({21, 320})};
         silu_mul_backward(&k, gate, up, grad, gg[0], gu[0]);
         silu_mul_backward(host, gate, up, grad, gg[1], gu[1]);
         compare(r, gg[0], gg[1]);
         compare(r, gu[0], gu[1]);
       }},
      {hw::KernelId::add_rms_norm,
       [](K host, const hw::Kernels& k, const c10::Device& d, KernelDemoResult& r) {
         Inputs in(d, 19);
         const at::Tensor x = in.normal({13, 512}), residual = in.normal({13, 512}), w = in.normal({512});
         r.shape = "[13 x 512]";
         at::Tensor res[2] = {residual.clone(), residual.clone()}, out[2] = {in.zeros({13, 512}), in.zeros({13, 512})};
         add_rms_norm(&k, x, res[0], w, 1e-6, out[0]);
         add_rms_norm(host, x, res[1], w, 1e-6, out[1]);
         compare(r, res[0], res[1]);
         compare(r, out[0], out[1]);
       }},
      {hw::KernelId::rotary_kv_store,
       [](K host, const hw::Kernels& k, const c10::Device& d, KernelDemoResult& r) {
         Inputs in(d, 20);
         const at::Tensor qkv = in.normal({5, 8, 64});  // 4 q heads, 2 k, 2 v of one projection
         const at::Tensor q = qkv.narrow(1, 0, 4), kk = qkv.narrow(1, 4, 2), v = qkv.narrow(1, 6, 2);
         const at::Tensor pos = in.ints(2048, {5}), inv = inverse_frequencies(64, d);
         const at::Tensor slots =
             at::tensor(std::vector<int64_t>{3, 17, 0, 42, 9}, at::TensorOptions().dtype(at::kLong)).to(d);
         r.shape = "5 tokens, q [5 x 4 x 64], k, v [5 x 2 x 64] of one projection, cache of 12 x 4 rows";
         at::Tensor q_out[2] = {in.zeros({5, 4, 64}), in.zeros({5, 4, 64})};
         at::Tensor kc[2] = {in.zeros({12, 4, 2, 64}), in.zeros({12, 4, 2, 64})};
         at::Tensor vc[2] = {in.zeros({12, 4, 2, 64}), in.zeros({12, 4, 2, 64})};
         rotary_kv_store(&k, q, kk, v, pos, inv, slots, q_out[0], kc[0], vc[0]);
         rotary_kv_store(host, q, kk, v, pos, inv, slots, q_out[1], kc[1], vc[1]);
         compare(r, q_out[0], q_out[1]);
         compare(r, kc[0], kc[1]);
         compare(r, vc[0], vc[1], /*exact=*/true);
       }},
      {hw::KernelId::adamw_update,
       [](K host, const hw::Kernels& k, const c10::Device& d, KernelDemoResult& r) {
         Inputs in(d, 21);
         const std::vector<int64_t> sizes = {1000, 37, 4096};
         AdamwTensors t[2];
         for (int64_t n : sizes) {
           const at::Tensor p = in.normal({n}), g = in.normal({n}), m = in.normal({n}) * 0.1,
                            s = in.uniform({n}) * 0.01;
           for (auto& each : t) {
             each.params.push_back(p.clone());
             each.grads.push_back(g);
             each.exp_avg.push_back(m.clone());
             each.exp_avg_sq.push_back(s.clone());
           }
         }
         verlpp_adamw_options options{sizeof(verlpp_adamw_options), 1e-3, 0.9, 0.999, 1e-8, 0.01, 5};
         r.shape = "3 tensors (1000, 37, 4096 values), step 5";
         const at::Tensor scale = at::full({1}, 0.5, Inputs::f32()).to(d);
         adamw_update(&k, t[0], options, scale);
         adamw_update(host, t[1], options, scale);
         for (size_t i = 0; i < sizes.size(); ++i) {
           compare(r, t[0].params[i], t[1].params[i]);
           compare(r, t[0].exp_avg[i], t[1].exp_avg[i]);
           compare(r, t[0].exp_avg_sq[i], t[1].exp_avg_sq[i]);
         }
       }},
      {hw::KernelId::rotary_paged_attention_decode,
       [](K host, const hw::Kernels& k, const c10::Device& d, KernelDemoResult& r) {
         Inputs in(d, 22);
         const PagedCache cache(in, 3, 2, 64);
         const at::Tensor q = in.normal({3, 4, 64}), kk = in.normal({3, 2, 64}), v = in.normal({3, 2, 64});
         const at::Tensor inv = inverse_frequencies(64, d);
         // The new token is the last of each sequence: position len - 1, its row in the tables.
         const at::Tensor lens = cache.lens.to(c10::kCPU), tables = cache.tables.to(c10::kCPU);
         at::Tensor pos = at::empty({3}, at::TensorOptions().dtype(at::kLong)), slots = pos.clone();
         for (int64_t b = 0; b < 3; ++b) {
           const int64_t p = lens[b].item<int64_t>() - 1;
           pos[b] = p;
           slots[b] = tables[b][p / 4].item<int64_t>() * 4 + p % 4;
         }
         pos = pos.to(d);
         slots = slots.to(d);
         r.shape = "3 sequences (5, 7, 9 tokens), 4 heads over 2 KV heads, head size 64, blocks of 4";
         at::Tensor kc[2] = {cache.k.clone(), cache.k.clone()}, vc[2] = {cache.v.clone(), cache.v.clone()};
         at::Tensor out[2] = {in.zeros({3, 4, 64}), in.zeros({3, 4, 64})};
         rotary_paged_attention_decode(&k, q, kk, v, pos, inv, slots, kc[0], vc[0], cache.tables, cache.lens, 0.125,
                                       out[0]);
         rotary_paged_attention_decode(host, q, kk, v, pos, inv, slots, kc[1], vc[1], cache.tables, cache.lens, 0.125,
                                       out[1]);
         compare(r, out[0], out[1]);
         compare(r, kc[0], kc[1]);
         compare(r, vc[0], vc[1], /*exact=*/true);
       }},
  };
  return list;
}

}  // namespace

std::vector<KernelDemoResult> demo_kernels(const hw::Kernels& kernels, const c10::Device& device) {
  std::vector<KernelDemoResult> results;
  for (const sdk::KernelInfo& info : sdk::kKernels) {
    KernelDemoResult r;
    r.kernel = info.name;
    r.offered = kernels.offers(info.id);
    r.tolerance = kTolerance;
    if (r.offered) {
      const auto found =
          std::find_if(cases().begin(), cases().end(), [&](const auto& c) { return c.first == info.id; });
      try {
        // A kernel appended to the list without a case here is reported, never passed unseen.
        if (found == cases().end()) throw std::runtime_error("the demo has no case for this kernel");
        r.ok = true;
        found->second(nullptr, kernels, device, r);
      } catch (const std::exception& e) {
        r.ok = false;
        r.error = error_text(e);
      }
    }
    results.push_back(r);
  }
  return results;
}

}  // namespace verlpp::ops
