// Suite "kernels": each entry of a plugin's kernel table on tensors on that plugin's torch
// device, fp32. Decision: every kernel is first checked against LibTorch math in fp64 on the
// CPU (independent of any plugin, so cpu_ref is checked too); one element outside the
// tolerance makes the workload "wrong", reported with its worst error and never timed.
#include "bench.hpp"
#include "hw/dlpack_view.hpp"  // src/core: borrowed DLPack views of at::Tensors

#include <verlpp/hw/kernels.hpp>

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/randperm.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/topk.h>
#include <ATen/ops/zeros.h>
#include <fmt/format.h>

namespace verlpp::bench {
namespace {

using hw::detail::dl_view;
const auto kF32 = at::TensorOptions().dtype(at::kFloat);

// The worst |got - want| and whether every element lies within atol + rtol * |want|.
struct Check {
  double worst = 0;
  std::string failure;  // empty: within tolerance
};
Check compare(const at::Tensor& got, const at::Tensor& want, double atol, double rtol, const std::string& what) {
  const at::Tensor g = got.to(at::kCPU).to(at::kDouble).reshape(-1), w = want.to(at::kDouble).reshape(-1);
  const at::Tensor diff = (g - w).abs();
  const at::Tensor bad = (diff <= atol + rtol * w.abs()).logical_not();  // NaN counts as bad
  Check c;
  c.worst = diff.numel() ? diff.nan_to_num(1e300).max().item<double>() : 0.0;
  if (bad.any().item<bool>()) {
    const int64_t first = bad.nonzero()[0][0].item<int64_t>();
    c.failure =
        fmt::format("{}: worst |diff| {:.3e}; first element over atol {:g} + rtol {:g}: index {} (got {}, want {})",
                    what, c.worst, atol, rtol, first, g[first].item<double>(), w[first].item<double>());
  }
  return c;
}

// Runs one workload: not offered -> skipped; `check` fails -> wrong (not timed); else timed.
Measurement kernel_workload(const Options& o, const Target& t, const std::string& name, const std::string& shape,
                            bool offered, const std::function<Check()>& check, const std::function<void()>& call) {
  if (!offered)
    return skipped("kernels", name, shape, t, "the plugin has no " + name + " (the host's LibTorch path runs instead)");
  Measurement m = make_measurement("kernels", name, shape, t);
  const Check c = check();
  m.worst_error = c.worst;
  if (!c.failure.empty()) {
    m.status = Status::wrong;
    m.reason = c.failure;
    return m;
  }
  m.seconds = time_reps(o, t, call);
  return m;
}

Measurement logprob_entropy(const Options& o, const Target& t, const hw::Kernels& k) {
  const int64_t N = o.quick ? 64 : 512, V = o.quick ? 384 : 32768;
  const float temperature = 0.7f;
  at::manual_seed(11);
  const at::Tensor logits = at::randn({N, V}, kF32).mul(3);  // [N, V] f32, cpu
  const at::Tensor labels = at::randint(V, {N}, at::TensorOptions().dtype(at::kLong));
  const at::Tensor d_logits = logits.to(t.device), d_labels = labels.to(t.device);
  at::Tensor lp = at::empty({N}, kF32.device(t.device)), ent = at::empty({N}, kF32.device(t.device));
  auto call = [&] {
    DLTensor a = dl_view(d_logits), b = dl_view(d_labels), c = dl_view(lp), d = dl_view(ent);
    k.call<hw::KernelId::logprob_entropy>(&a, &b, temperature, &c, &d, nullptr);
  };
  auto check = [&] {
    call();
    const at::Tensor logp = at::log_softmax(logits.to(at::kDouble) / temperature, -1);
    const at::Tensor want_lp = logp.gather(1, labels.unsqueeze(1)).squeeze(1);
    const at::Tensor want_ent = -(logp.exp() * logp).sum(-1);
    Check a = compare(lp, want_lp, 1e-4, 1e-5, "log-prob"), b = compare(ent, want_ent, 1e-4, 1e-5, "entropy");
    a.worst = std::max(a.worst, b.worst);
    if (a.failure.empty()) a.failure = b.failure;
    return a;
  };
  return kernel_workload(o, t, "logprob_entropy", fmt::format("N={} V={} T={} f32, with entropy", N, V, temperature),
                         k.offers(hw::KernelId::logprob_entropy), check, call);
}

Measurement rms_norm(const Options& o, const Target& t, const hw::Kernels& k) {
  const int64_t N = o.quick ? 64 : 4096, D = o.quick ? 128 : 896;
  const float eps = 1e-6f;
  at::manual_seed(12);
  const at::Tensor x = at::randn({N, D}, kF32), w = at::randn({D}, kF32).mul(0.1).add(1);
  const at::Tensor d_x = x.to(t.device), d_w = w.to(t.device);
  at::Tensor out = at::empty({N, D}, kF32.device(t.device));
  auto call = [&] {
    DLTensor a = dl_view(d_x), b = dl_view(d_w), c = dl_view(out);
    k.call<hw::KernelId::rms_norm>(&a, &b, eps, &c, nullptr);
  };
  auto check = [&] {
    call();
    const at::Tensor xd = x.to(at::kDouble);
    const at::Tensor want = xd * (xd.pow(2).mean(-1, true) + eps).rsqrt() * w.to(at::kDouble);
    return compare(out, want, 1e-5, 1e-5, "rms_norm");
  };
  return kernel_workload(o, t, "rms_norm", fmt::format("N={} D={} f32", N, D), k.offers(hw::KernelId::rms_norm), check,
                         call);
}

// HF "rotate_half" rotary embedding of x [N, heads, S] in fp64 (the reference).
at::Tensor rotary_reference(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& inv_freq) {
  const at::Tensor freqs = positions.to(at::kDouble).unsqueeze(1) * inv_freq.to(at::kDouble).unsqueeze(0);  // [N, S/2]
  const at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1);                                          // [N, 1, S]
  const at::Tensor xd = x.to(at::kDouble);
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-xd.narrow(-1, half, half), xd.narrow(-1, 0, half)}, -1);
  return xd * emb.cos() + rotated * emb.sin();
}

Measurement rotary_embedding(const Options& o, const Target& t, const hw::Kernels& k) {
  const int64_t N = o.quick ? 64 : 2048, H = o.quick ? 4 : 14, K = 2, S = o.quick ? 32 : 64;
  at::manual_seed(13);
  const at::Tensor q = at::randn({N, H, S}, kF32), kk = at::randn({N, K, S}, kF32);
  const at::Tensor positions =
      at::randint(512, {N}, at::TensorOptions().dtype(at::kLong));  // fp32 angles stay accurate
  const at::Tensor inv_freq =
      at::pow(10000.0, at::arange(0, S, 2, at::TensorOptions().dtype(at::kDouble)) / -double(S)).to(at::kFloat);
  at::Tensor d_q = q.to(kF32.device(t.device), false, true),
             d_k = kk.to(kF32.device(t.device), false, true);  // copies: rotated in place
  const at::Tensor d_pos = positions.to(t.device), d_inv = inv_freq.to(t.device);
  auto call = [&] {
    DLTensor a = dl_view(d_q), b = dl_view(d_k), c = dl_view(d_pos), d = dl_view(d_inv);
    k.call<hw::KernelId::rotary_embedding>(&a, &b, &c, &d, nullptr);
  };
  auto check = [&] {
    call();  // once on fresh copies; later calls keep rotating them, which costs the same
    Check a = compare(d_q, rotary_reference(q, positions, inv_freq), 1e-4, 1e-4, "q");
    Check b = compare(d_k, rotary_reference(kk, positions, inv_freq), 1e-4, 1e-4, "k");
    a.worst = std::max(a.worst, b.worst);
    if (a.failure.empty()) a.failure = b.failure;
    return a;
  };
  return kernel_workload(o, t, "rotary_embedding", fmt::format("q N={} H={} S={}, k K={} f32", N, H, S, K),
                         k.offers(hw::KernelId::rotary_embedding), check, call);
}

Measurement paged_attention(const Options& o, const Target& t, const hw::Kernels& k) {
  const int64_t B = o.quick ? 4 : 32, H = o.quick ? 4 : 14, K = 2, S = o.quick ? 32 : 64, bs = 16;
  const int64_t ctx = o.quick ? 48 : 512, max_blocks = (ctx + bs - 1) / bs, num_blocks = B * max_blocks + 3;
  at::manual_seed(14);
  const at::Tensor q = at::randn({B, H, S}, kF32);                // [B, H, S]
  const at::Tensor kc = at::randn({num_blocks, bs, K, S}, kF32);  // [blocks, bs, K, S]
  const at::Tensor vc = at::randn({num_blocks, bs, K, S}, kF32);
  // Scrambled physical blocks; lengths from ctx/2 (and one of 1) to ctx.
  const at::Tensor tables = at::randperm(num_blocks, at::TensorOptions().dtype(at::kLong))
                                .narrow(0, 0, B * max_blocks)
                                .view({B, max_blocks})
                                .to(at::kInt);
  at::Tensor lens = at::randint(ctx / 2, ctx + 1, {B}, at::TensorOptions().dtype(at::kLong));
  lens[0] = 1;
  lens[B - 1] = ctx;
  lens = lens.to(at::kInt);
  const float scale = 1.0f / std::sqrt(float(S));
  const at::Tensor d_q = q.to(t.device), d_kc = kc.to(t.device), d_vc = vc.to(t.device);
  const at::Tensor d_tables = tables.to(t.device), d_lens = lens.to(t.device);
  at::Tensor out = at::empty({B, H, S}, kF32.device(t.device));
  auto call = [&] {
    DLTensor a = dl_view(d_q), b = dl_view(d_kc), c = dl_view(d_vc), d = dl_view(d_tables), e = dl_view(d_lens),
             f = dl_view(out);
    k.call<hw::KernelId::paged_attention_decode>(&a, &b, &c, &d, &e, scale, &f, nullptr);
  };
  auto check = [&] {
    call();
    at::Tensor want = at::zeros({B, H, S}, at::TensorOptions().dtype(at::kDouble));
    const at::Tensor kf = kc.to(at::kDouble).view({-1, K, S}), vf = vc.to(at::kDouble).view({-1, K, S});
    for (int64_t b = 0; b < B; ++b) {
      const int64_t len = lens[b].item<int64_t>();
      const at::Tensor pos = at::arange(len, at::TensorOptions().dtype(at::kLong));
      const at::Tensor slots = tables[b].to(at::kLong).index_select(0, pos.div(bs, "floor")) * bs + pos.remainder(bs);
      const at::Tensor kb = kf.index_select(0, slots).repeat_interleave(H / K, 1);  // [len, H, S]
      const at::Tensor vb = vf.index_select(0, slots).repeat_interleave(H / K, 1);
      const at::Tensor p =
          at::softmax((kb * q[b].to(at::kDouble).unsqueeze(0)).sum(-1) * double(scale), 0);  // [len, H]
      want[b] = (p.unsqueeze(-1) * vb).sum(0);
    }
    return compare(out, want, 1e-5, 1e-4, "attention output");
  };
  return kernel_workload(o, t, "paged_attention_decode",
                         fmt::format("B={} H={} K={} S={} block={} context<={} f32", B, H, K, S, bs, ctx),
                         k.offers(hw::KernelId::paged_attention_decode), check, call);
}

Measurement sample(const Options& o, const Target& t, const hw::Kernels& k) {
  const int64_t B = o.quick ? 8 : 64, V = o.quick ? 384 : 32768, top_k = 50;
  const double temperature = 1.0, top_p = 0.9;
  at::manual_seed(15);
  const at::Tensor logits = at::randn({B, V}, kF32).mul(2);
  const at::Tensor d_logits = logits.to(t.device);
  const auto on = [&](at::ScalarType s) { return at::TensorOptions().dtype(s).device(t.device); };
  const at::Tensor seeds = at::arange(B, on(at::kLong)).mul(7919).add(1);
  at::Tensor tokens = at::empty({B}, on(at::kLong)), logprobs = at::empty({B}, on(at::kFloat));
  const at::Tensor greedy = at::full({B}, 0.0, on(at::kFloat)), sampled = at::full({B}, temperature, on(at::kFloat));
  const at::Tensor tk = at::full({B}, top_k, on(at::kInt)), tp = at::full({B}, top_p, on(at::kFloat));
  auto run = [&](const at::Tensor& tt) {
    DLTensor a = dl_view(d_logits), b = dl_view(tt), c = dl_view(tk), d = dl_view(tp), e = dl_view(seeds, true),
             f = dl_view(tokens), g = dl_view(logprobs);
    k.call<hw::KernelId::sample>(&a, &b, &c, &d, &e, 3, &f, &g, nullptr);
  };
  auto check = [&] {
    // Greedy rows: the argmax and log_softmax(logits) of it.
    run(greedy);
    const at::Tensor ld = logits.to(at::kDouble);
    Check c = compare(tokens, at::argmax(logits, -1), 0, 0, "greedy token");
    if (!c.failure.empty()) return c;
    c = compare(logprobs, at::log_softmax(ld, -1).gather(1, at::argmax(logits, -1).unsqueeze(1)).squeeze(1), 1e-4, 1e-5,
                "greedy log-prob");
    if (!c.failure.empty()) return c;
    // The timed setting: each token among the top_k and its log-prob that of softmax(logits / T).
    run(sampled);
    const at::Tensor tok = tokens.to(at::kCPU);
    const at::Tensor kth = std::get<0>(at::topk(logits, top_k, -1)).select(1, top_k - 1);
    const at::Tensor inside = (logits.gather(1, tok.clamp(0, V - 1).unsqueeze(1)).squeeze(1) >= kth)
                                  .logical_and(tok >= 0)
                                  .logical_and(tok < V);
    if (!inside.all().item<bool>())
      return Check{
          0, fmt::format("row {}: token {} is outside the top {}", inside.logical_not().nonzero()[0][0].item<int64_t>(),
                         tok[inside.logical_not().nonzero()[0][0]].item<int64_t>(), top_k)};
    return compare(logprobs, at::log_softmax(ld / temperature, -1).gather(1, tok.unsqueeze(1)).squeeze(1), 1e-4, 1e-5,
                   "sampled log-prob");
  };
  return kernel_workload(o, t, "sample",
                         fmt::format("B={} V={} T={} top_k={} top_p={} f32", B, V, temperature, top_k, top_p),
                         k.offers(hw::KernelId::sample), check, [&] { run(sampled); });
}

}  // namespace

std::vector<Measurement> run_kernels(const Options& o, const Target& t) {
  const hw::Kernels k(*t.plugin);
  return {logprob_entropy(o, t, k), rms_norm(o, t, k), rotary_embedding(o, t, k), paged_attention(o, t, k),
          sample(o, t, k)};
}

}  // namespace verlpp::bench
