// verlpp-plugin-check, group "kernels": every kernel the plugin offers against reference math
// written here in fp64 loops, on awkward shapes (1, odd, prime, wider than a cache line) and
// strided rows; and the sampler against what any correct sampler must do (its random generator
// is the plugin's own). Reports the worst error and the first index over tolerance.
#include "check_context.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace verlpp::conformance {
namespace {

// Host data of `dtype` from fp32 values (rounded), and the values as the kernel sees them.
std::vector<uint16_t> round_half(const std::vector<float>& v, DLDataType dtype, std::vector<float>& seen) {
  std::vector<uint16_t> out(v.size());
  seen.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    out[i] = dtype.code == kDLBfloat ? to_bf16(v[i]) : to_f16(v[i]);
    seen[i] = dtype.code == kDLBfloat ? from_bf16(out[i]) : from_f16(out[i]);
  }
  return out;
}

void logprob_entropy_cases(CheckContext& ctx) {
  hw::Device d = ctx.device();
  const auto* table = ctx.api().kernels;
  struct Shape { int64_t n, v, row_stride; float temperature; DLDataType dtype; bool entropy; };
  const Shape shapes[] = {{1, 1, 1, 1.0f, dl_f32(), true},     {7, 5, 5, 1.0f, dl_f32(), true},
                          {33, 1000, 1000, 0.7f, dl_f32(), true}, {3, 4099, 4111, 1.0f, dl_f32(), false},
                          {17, 513, 513, 1.3f, dl_bf16(), true},  {9, 257, 260, 1.0f, dl_f16(), true}};
  for (const Shape& s : shapes) {
    std::string name = fmt::format("logprob_entropy N={} V={} stride={} T={} {}{}", s.n, s.v, s.row_stride, s.temperature,
                                   sdk::dtype_name(s.dtype), s.entropy ? "" : " (no entropy)");
    ctx.run("kernels", name, [&] {
      CheckContext::need(table ? reinterpret_cast<const void*>(table->logprob_entropy) : nullptr, "kernel logprob_entropy");
      std::mt19937 rng(uint32_t(s.n * 131 + s.v));
      std::normal_distribution<float> normal(0.0f, 3.0f);
      std::vector<float> logits(size_t(s.n * s.row_stride));
      for (auto& x : logits) x = normal(rng);
      std::vector<int64_t> labels(size_t(s.n));
      for (auto& y : labels) y = int64_t(rng() % uint32_t(s.v));
      std::vector<float> seen = logits;
      DeviceTensor lt(d, {s.n * s.row_stride}, s.dtype);
      if (s.dtype.bits == 32) lt.upload(logits.data());
      else lt.upload(round_half(logits, s.dtype, seen).data());
      // A [N, V] view with row stride `row_stride` over the flat buffer.
      std::vector<int64_t> shape = {s.n, s.v}, strides = {s.row_stride, 1};
      DLTensor view = lt.dl();
      view.ndim = 2;
      view.shape = shape.data();
      view.strides = strides.data();
      DeviceTensor yt(d, {s.n}, dl_i64()), lp(d, {s.n}, dl_f32()), ent(d, {s.n}, dl_f32());
      yt.upload(labels.data());
      ctx.expect_ok(table->logprob_entropy(&view, &yt.dl(), s.temperature, &lp.dl(), s.entropy ? &ent.dl() : nullptr, nullptr),
                    "logprob_entropy");
      auto got_lp = lp.to_host<float>();
      auto got_ent = ent.to_host<float>();
      Worst wl, we;
      for (int64_t r = 0; r < s.n; ++r) {
        const float* row = seen.data() + r * s.row_stride;
        double mx = -INFINITY;
        for (int64_t j = 0; j < s.v; ++j) mx = std::max(mx, double(row[j]) / s.temperature);
        double sum = 0, weighted = 0;
        for (int64_t j = 0; j < s.v; ++j) {
          double z = double(row[j]) / s.temperature, e = std::exp(z - mx);
          sum += e;
          weighted += e * z;
        }
        double lse = mx + std::log(sum);
        double want_lp = double(row[labels[size_t(r)]]) / s.temperature - lse;
        double want_ent = lse - weighted / sum;
        wl.add(size_t(r), got_lp[size_t(r)], want_lp, 1e-4 + 1e-5 * std::fabs(want_lp));
        if (s.entropy) we.add(size_t(r), got_ent[size_t(r)], want_ent, 1e-4 + 1e-5 * std::fabs(want_ent));
      }
      wl.require("log-prob");
      we.require("entropy");
    });
  }
  ctx.run("kernels", "logprob_entropy rejects bad input", [&] {
    CheckContext::need(table ? reinterpret_cast<const void*>(table->logprob_entropy) : nullptr, "kernel logprob_entropy");
    DeviceTensor lt(d, {4, 8}, dl_f32()), yt(d, {5}, dl_i64()), lp(d, {4}, dl_f32());
    ctx.expect_error(table->logprob_entropy(&lt.dl(), &yt.dl(), 1.0f, &lp.dl(), nullptr, nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "logprob_entropy(labels [5] for 4 rows)");
    ctx.expect_error(table->logprob_entropy(nullptr, &yt.dl(), 1.0f, &lp.dl(), nullptr, nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "logprob_entropy(NULL logits)");
  });
}

void rms_norm_cases(CheckContext& ctx) {
  hw::Device d = ctx.device();
  const auto* table = ctx.api().kernels;
  struct Shape { int64_t n, dim; DLDataType dtype; };
  const Shape shapes[] = {{1, 1, dl_f32()}, {5, 64, dl_f32()}, {17, 899, dl_f32()}, {13, 896, dl_bf16()}, {3, 131, dl_f16()}};
  for (const Shape& s : shapes) {
    ctx.run("kernels", fmt::format("rms_norm N={} D={} {}", s.n, s.dim, sdk::dtype_name(s.dtype)), [&] {
      CheckContext::need(table ? reinterpret_cast<const void*>(table->rms_norm) : nullptr, "kernel rms_norm");
      std::mt19937 rng(uint32_t(s.n * 7 + s.dim));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> x(size_t(s.n * s.dim)), w(size_t(s.dim));
      for (auto& v : x) v = normal(rng);
      for (auto& v : w) v = 1.0f + 0.1f * normal(rng);
      const float eps = 1e-6f;
      bool half = s.dtype.bits == 16;
      std::vector<float> xs = x, ws = w;
      DeviceTensor xt(d, {s.n, s.dim}, s.dtype), wt(d, {s.dim}, s.dtype), ot(d, {s.n, s.dim}, s.dtype);
      if (half) {
        xt.upload(round_half(x, s.dtype, xs).data());
        wt.upload(round_half(w, s.dtype, ws).data());
      } else {
        xt.upload(x.data());
        wt.upload(w.data());
      }
      ctx.expect_ok(table->rms_norm(&xt.dl(), &wt.dl(), eps, &ot.dl(), nullptr), "rms_norm");
      std::vector<float> got(x.size());
      if (half) {
        auto raw = ot.to_host<uint16_t>();
        for (size_t i = 0; i < raw.size(); ++i) got[i] = s.dtype.code == kDLBfloat ? from_bf16(raw[i]) : from_f16(raw[i]);
      } else {
        got = ot.to_host<float>();
      }
      // Half precision: allow two units in the last place of the output dtype (HF rounds twice).
      double ulp = s.dtype.code == kDLBfloat ? 1.0 / 128 : s.dtype.bits == 16 ? 1.0 / 1024 : 0.0;
      Worst worst;
      for (int64_t r = 0; r < s.n; ++r) {
        double ss = 0;
        for (int64_t j = 0; j < s.dim; ++j) ss += double(xs[size_t(r * s.dim + j)]) * xs[size_t(r * s.dim + j)];
        double inv = 1.0 / std::sqrt(ss / double(s.dim) + eps);
        for (int64_t j = 0; j < s.dim; ++j) {
          size_t i = size_t(r * s.dim + j);
          double want = double(xs[i]) * inv * ws[size_t(j)];
          worst.add(i, got[i], want, 1e-5 + std::fabs(want) * (half ? 2 * ulp : 1e-5));
        }
      }
      worst.require("rms_norm");
    });
  }
}

// ---- paged_attention_decode: one query token per sequence over a paged KV cache with GQA,
// against softmax(q . k * scale) v in fp64 over the positions the block table maps. Beyond the
// small awkward shapes, Qwen2.5-0.5B's decode shape (14 query heads over 2 KV heads, head 64)
// in f32 and bf16 with: ragged lengths around the block size (and 0); contexts of 1000+ positions
// for a few sequences (a fast kernel splits them over several partitions and combines them);
// a batch of 320 sequences (640 (sequence, KV head) pairs: enough to fill a GPU unsplit); a
// head size of 20 in bf16 (not a whole 16-byte vector); head 128 without GQA; head 256.
void paged_attention_cases(CheckContext& ctx) {
  const auto* table = ctx.api().kernels;
  struct Shape { int64_t b, h, kv, s, block_size, num_blocks, max_blocks; std::vector<int32_t> lens; DLDataType dtype; };
  std::vector<int32_t> many(320);  // lengths 1..640, ragged
  for (size_t i = 0; i < many.size(); ++i) many[i] = int32_t(1 + (i * 97) % 640);
  const std::vector<int32_t> ragged = {1, 16, 17, 0, 15, 33, 2, 48};
  const Shape shapes[] = {{3, 4, 2, 20, 4, 12, 4, {1, 7, 13}, dl_f32()},
                          {2, 14, 2, 64, 16, 9, 4, {50, 33}, dl_f32()},
                          {2, 6, 3, 32, 8, 10, 5, {17, 40}, dl_bf16()},
                          {1, 2, 1, 16, 4, 80, 80, {300}, dl_f16()},  // longer than one 256-position chunk
                          {8, 14, 2, 64, 16, 30, 4, ragged, dl_bf16()},
                          {8, 14, 2, 64, 16, 30, 4, ragged, dl_f32()},
                          {2, 14, 2, 64, 16, 300, 100, {1537, 1000}, dl_bf16()},
                          {3, 14, 2, 64, 16, 300, 130, {2053, 7, 1200}, dl_f32()},
                          {320, 14, 2, 64, 16, 2000, 40, many, dl_bf16()},
                          {2, 6, 2, 20, 8, 200, 100, {700, 5}, dl_bf16()},
                          {2, 4, 4, 128, 16, 60, 30, {300, 45}, dl_f16()},
                          {1, 8, 1, 256, 16, 40, 40, {600}, dl_f32()}};
  for (const Shape& sh : shapes) {
    std::string lens;
    if (sh.lens.size() <= 8) {
      for (int32_t len : sh.lens) lens += (lens.empty() ? "" : ",") + std::to_string(len);
    } else {
      lens = fmt::format("{}..{}", *std::min_element(sh.lens.begin(), sh.lens.end()), *std::max_element(sh.lens.begin(), sh.lens.end()));
    }
    std::string name = fmt::format("paged_attention_decode B={} H={} K={} S={} block={} lens={} {}", sh.b, sh.h, sh.kv, sh.s,
                                   sh.block_size, lens, sdk::dtype_name(sh.dtype));
    ctx.run("kernels", name, [&] {
      CheckContext::need(table ? reinterpret_cast<const void*>(table->paged_attention_decode) : nullptr,
                         "kernel paged_attention_decode");
      hw::Device d = ctx.device();
      std::mt19937 rng(uint32_t(sh.b * 31 + sh.s));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      const bool half = sh.dtype.bits == 16;
      auto values = [&](int64_t n, std::vector<float>& seen) {
        std::vector<float> v(static_cast<size_t>(n));
        for (auto& x : v) x = normal(rng);
        seen = v;
        return v;
      };
      std::vector<float> q_seen, k_seen, v_seen;
      std::vector<float> q = values(sh.b * sh.h * sh.s, q_seen);
      std::vector<float> kc = values(sh.num_blocks * sh.block_size * sh.kv * sh.s, k_seen);
      std::vector<float> vc = values(sh.num_blocks * sh.block_size * sh.kv * sh.s, v_seen);
      // Block tables: each sequence gets distinct physical blocks in a scrambled order.
      std::vector<int32_t> physical(size_t(sh.num_blocks));
      std::iota(physical.begin(), physical.end(), 0);
      std::shuffle(physical.begin(), physical.end(), rng);
      std::vector<int32_t> tables(size_t(sh.b * sh.max_blocks), -1);
      size_t next = 0;
      for (int64_t b = 0; b < sh.b; ++b) {
        int64_t needed = (sh.lens[size_t(b)] + sh.block_size - 1) / sh.block_size;
        for (int64_t i = 0; i < needed; ++i) tables[size_t(b * sh.max_blocks + i)] = physical[next++ % physical.size()];
      }
      DeviceTensor qt(d, {sh.b, sh.h, sh.s}, sh.dtype), kt(d, {sh.num_blocks, sh.block_size, sh.kv, sh.s}, sh.dtype),
          vt(d, {sh.num_blocks, sh.block_size, sh.kv, sh.s}, sh.dtype), bt(d, {sh.b, sh.max_blocks}, dl_i32()),
          lt(d, {sh.b}, dl_i32()), ot(d, {sh.b, sh.h, sh.s}, sh.dtype);
      if (half) {
        qt.upload(round_half(q, sh.dtype, q_seen).data());
        kt.upload(round_half(kc, sh.dtype, k_seen).data());
        vt.upload(round_half(vc, sh.dtype, v_seen).data());
      } else {
        qt.upload(q.data());
        kt.upload(kc.data());
        vt.upload(vc.data());
      }
      bt.upload(tables.data());
      lt.upload(sh.lens.data());
      const float scale = 1.0f / std::sqrt(float(sh.s));
      ctx.expect_ok(table->paged_attention_decode(&qt.dl(), &kt.dl(), &vt.dl(), &bt.dl(), &lt.dl(), scale, &ot.dl(), nullptr),
                    "paged_attention_decode");
      std::vector<float> got(q.size());
      if (half) {
        auto raw = ot.to_host<uint16_t>();
        for (size_t i = 0; i < raw.size(); ++i) got[i] = sh.dtype.code == kDLBfloat ? from_bf16(raw[i]) : from_f16(raw[i]);
      } else {
        got = ot.to_host<float>();
      }
      const double ulp = sh.dtype.code == kDLBfloat ? 1.0 / 128 : half ? 1.0 / 1024 : 0.0;
      Worst worst;
      for (int64_t b = 0; b < sh.b; ++b)
        for (int64_t h = 0; h < sh.h; ++h) {
          const int64_t kv = h / (sh.h / sh.kv), len = sh.lens[size_t(b)];
          auto at = [&](const std::vector<float>& cache, int64_t pos, int64_t dim) {
            int64_t block = tables[size_t(b * sh.max_blocks + pos / sh.block_size)];
            return double(cache[size_t(((block * sh.block_size + pos % sh.block_size) * sh.kv + kv) * sh.s + dim)]);
          };
          std::vector<double> score(static_cast<size_t>(len));
          double mx = -INFINITY;
          for (int64_t t = 0; t < len; ++t) {
            double dot = 0;
            for (int64_t j = 0; j < sh.s; ++j) dot += double(q_seen[size_t((b * sh.h + h) * sh.s + j)]) * at(k_seen, t, j);
            score[size_t(t)] = dot * scale;
            mx = std::max(mx, score[size_t(t)]);
          }
          double sum = 0;
          for (double& x : score) sum += (x = std::exp(x - mx));
          for (int64_t j = 0; j < sh.s; ++j) {
            double want = 0;
            for (int64_t t = 0; t < len; ++t) want += score[size_t(t)] / sum * at(v_seen, t, j);
            size_t i = size_t((b * sh.h + h) * sh.s + j);
            worst.add(i, got[i], want, half ? 2e-3 + std::fabs(want) * 2 * ulp : 1e-5 + 1e-5 * std::fabs(want));
          }
        }
      worst.require("attention output");
    });
  }
  ctx.run("kernels", "paged_attention_decode rejects bad input", [&] {
    CheckContext::need(table ? reinterpret_cast<const void*>(table->paged_attention_decode) : nullptr, "kernel paged_attention_decode");
    hw::Device d = ctx.device();
    // H = 3 query heads over K = 2 KV heads: not a multiple.
    DeviceTensor qt(d, {1, 3, 8}, dl_f32()), kt(d, {2, 4, 2, 8}, dl_f32()), vt(d, {2, 4, 2, 8}, dl_f32()), bt(d, {1, 2}, dl_i32()),
        lt(d, {1}, dl_i32()), ot(d, {1, 3, 8}, dl_f32());
    ctx.expect_error(table->paged_attention_decode(&qt.dl(), &kt.dl(), &vt.dl(), &bt.dl(), &lt.dl(), 1.0f, &ot.dl(), nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "paged_attention_decode(H=3, K=2)");
    ctx.expect_error(table->paged_attention_decode(nullptr, &kt.dl(), &vt.dl(), &bt.dl(), &lt.dl(), 1.0f, &ot.dl(), nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "paged_attention_decode(NULL q)");
  });
}

// ---- sample. The ABI leaves the random generator to the plugin, so these cases check what
// any correct sampler must do: greedy and top_k = 1 rows give the argmax; every token lies in
// the top-k set and in the top-p nucleus; log-probs are log_softmax(logits / T) of the token
// (T = 1 for greedy rows); the same seeds and step give the same tokens; and over many seeds the
// token frequencies match the (filtered, renormalised) softmax within 5 standard deviations.

struct SampleRows {
  int64_t b = 0, v = 0;
  std::vector<float> logits;  // [b, v]
  std::vector<float> temperature, top_p;
  std::vector<int32_t> top_k;
  std::vector<uint64_t> seeds;
};

struct SampleOut {
  std::vector<int64_t> tokens;
  std::vector<float> logprobs;
};

SampleOut run_sample(CheckContext& ctx, const SampleRows& r, uint64_t step) {
  hw::Device d = ctx.device();
  DeviceTensor lt(d, {r.b, r.v}, dl_f32()), tt(d, {r.b}, dl_f32()), kt(d, {r.b}, dl_i32()), pt(d, {r.b}, dl_f32()),
      st(d, {r.b}, DLDataType{kDLUInt, 64, 1}), tok(d, {r.b}, dl_i64()), lp(d, {r.b}, dl_f32());
  lt.upload(r.logits.data());
  tt.upload(r.temperature.data());
  kt.upload(r.top_k.data());
  pt.upload(r.top_p.data());
  st.upload(r.seeds.data());
  ctx.expect_ok(ctx.api().kernels->sample(&lt.dl(), &tt.dl(), &kt.dl(), &pt.dl(), &st.dl(), step, &tok.dl(), &lp.dl(), nullptr),
                "sample");
  return SampleOut{tok.to_host<int64_t>(), lp.to_host<float>()};
}

// log_softmax(row / t)[j] in fp64.
double log_softmax_at(const float* row, int64_t v, double t, int64_t j) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < v; ++i) mx = std::max(mx, double(row[i]) / t);
  double sum = 0;
  for (int64_t i = 0; i < v; ++i) sum += std::exp(double(row[i]) / t - mx);
  return double(row[j]) / t - mx - std::log(sum);
}

// Probabilities of softmax(row / t) restricted as the ABI says (top_k 0 = all, top_p 1 = all):
// the k largest, then the shortest prefix of them (largest first) whose mass reaches top_p of
// theirs; renormalised. Ties: a token whose value equals a kept one is allowed too (`allowed`).
std::vector<double> filtered_probs(const float* row, int64_t v, double t, int32_t k, double p, std::vector<bool>& allowed) {
  std::vector<double> q(static_cast<size_t>(v));
  double mx = -INFINITY;
  for (int64_t i = 0; i < v; ++i) mx = std::max(mx, double(row[i]) / t);
  for (int64_t i = 0; i < v; ++i) q[size_t(i)] = std::exp(double(row[i]) / t - mx);
  std::vector<int64_t> order(static_cast<size_t>(v));
  for (int64_t i = 0; i < v; ++i) order[size_t(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return q[size_t(a)] > q[size_t(b)]; });
  int64_t kk = k > 0 && k < v ? k : v;
  double mass_k = 0;
  for (int64_t i = 0; i < kk; ++i) mass_k += q[size_t(order[size_t(i)])];
  std::vector<double> out(static_cast<size_t>(v), 0.0);
  allowed.assign(static_cast<size_t>(v), false);
  double before = 0, kept = 0, smallest_kept = INFINITY;
  for (int64_t i = 0; i < kk; ++i) {
    size_t j = size_t(order[size_t(i)]);
    if (!(before < p * mass_k)) break;
    out[j] = q[j];
    kept += q[j];
    before += q[j];
    smallest_kept = q[j];
  }
  for (int64_t i = 0; i < v; ++i) {
    out[size_t(i)] /= kept;
    allowed[size_t(i)] = q[size_t(i)] >= smallest_kept;
  }
  return out;
}

void sample_cases(CheckContext& ctx) {
  const auto* table = ctx.api().kernels;
  auto need = [&] { CheckContext::need(table ? reinterpret_cast<const void*>(table->sample) : nullptr, "kernel sample"); };

  ctx.run("kernels", "sample: greedy and top_k=1 rows give the argmax and its log-prob", [&] {
    need();
    SampleRows r;
    r.b = 5;
    r.v = 37;
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (int64_t i = 0; i < r.b * r.v; ++i) r.logits.push_back(normal(rng) + 1e-3f * float(i % r.v));  // no ties
    r.temperature = {0.0f, 0.7f, 1.0f, 0.0f, 1.3f};
    r.top_k = {0, 1, 1, 5, 1};
    r.top_p = {1.0f, 1.0f, 0.5f, 0.3f, 1.0f};
    r.seeds = {1, 2, 3, 4, 5};
    SampleOut out = run_sample(ctx, r, 0);
    Worst worst;
    for (int64_t b = 0; b < r.b; ++b) {
      const float* row = r.logits.data() + b * r.v;
      int64_t best = int64_t(std::max_element(row, row + r.v) - row);
      CHECK_THAT(out.tokens[size_t(b)] == best, "row {}: token {}, want the argmax {}", b, out.tokens[size_t(b)], best);
      double t = r.temperature[size_t(b)] == 0.0f ? 1.0 : double(r.temperature[size_t(b)]);
      double want = log_softmax_at(row, r.v, t, best);
      worst.add(size_t(b), out.logprobs[size_t(b)], want, 1e-4 + 1e-5 * std::fabs(want));
    }
    worst.require("log-prob");
  });

  ctx.run("kernels", "sample: tokens lie in top_k and top_p, log-probs match, seeds repeat", [&] {
    need();
    SampleRows r;
    r.b = 64;
    r.v = 1000;
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (int64_t i = 0; i < r.b * r.v; ++i) r.logits.push_back(normal(rng));
    const float temps[] = {1.0f, 0.8f, 1.2f, 1.0f};
    const int32_t ks[] = {0, 10, 0, 50};
    const float ps[] = {1.0f, 1.0f, 0.9f, 0.5f};
    for (int64_t b = 0; b < r.b; ++b) {
      r.temperature.push_back(temps[b % 4]);
      r.top_k.push_back(ks[b % 4]);
      r.top_p.push_back(ps[b % 4]);
      r.seeds.push_back(uint64_t(b) * 7919u + 1u);
    }
    SampleOut a = run_sample(ctx, r, 3), again = run_sample(ctx, r, 3), other = run_sample(ctx, r, 4);
    CHECK_THAT(a.tokens == again.tokens, "the same seeds and step gave different tokens");
    Worst worst;
    size_t changed = 0;
    for (int64_t b = 0; b < r.b; ++b) {
      const float* row = r.logits.data() + b * r.v;
      int64_t tok = a.tokens[size_t(b)];
      CHECK_THAT(tok >= 0 && tok < r.v, "row {}: token {} outside [0, {})", b, tok, r.v);
      std::vector<bool> allowed;
      filtered_probs(row, r.v, r.temperature[size_t(b)], r.top_k[size_t(b)], r.top_p[size_t(b)], allowed);
      CHECK_THAT(allowed[size_t(tok)], "row {} (T={}, top_k={}, top_p={}): token {} is outside the top-k / top-p set", b,
                 r.temperature[size_t(b)], r.top_k[size_t(b)], r.top_p[size_t(b)], tok);
      double want = log_softmax_at(row, r.v, r.temperature[size_t(b)], tok);
      worst.add(size_t(b), a.logprobs[size_t(b)], want, 1e-4 + 1e-5 * std::fabs(want));
      changed += other.tokens[size_t(b)] != tok;
    }
    worst.require("log-prob");
    CHECK_THAT(changed > 0, "step 3 and step 4 gave the same token in all {} rows", r.b);
  });

  ctx.run("kernels", "sample: frequencies over 4000 seeds match the filtered softmax", [&] {
    need();
    // Probabilities at T = 1: .420 .255 .154 .094 .057 .021. Chosen so that every filter
    // boundary is far from a tie: top_k=2 keeps {0, 1}; top_p=0.6 keeps {0, 1} (mass before
    // token 2 is .674); T=0.7 top_k=3 top_p=0.9 keeps {0, 1, 2}.
    const std::vector<float> row = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -1.0f};
    const int64_t n = 4000;
    struct Setting { float t; int32_t k; float p; };
    for (Setting set : {Setting{1.0f, 0, 1.0f}, Setting{1.0f, 2, 1.0f}, Setting{1.0f, 0, 0.6f}, Setting{0.7f, 3, 0.9f}}) {
      SampleRows r;
      r.b = n;
      r.v = int64_t(row.size());
      for (int64_t b = 0; b < n; ++b) {
        r.logits.insert(r.logits.end(), row.begin(), row.end());
        r.temperature.push_back(set.t);
        r.top_k.push_back(set.k);
        r.top_p.push_back(set.p);
        r.seeds.push_back(uint64_t(b) * 2654435761u + 17u);
      }
      SampleOut out = run_sample(ctx, r, 0);
      std::vector<bool> allowed;
      std::vector<double> want = filtered_probs(row.data(), r.v, set.t, set.k, set.p, allowed);
      std::vector<double> count(row.size(), 0.0);
      for (int64_t tok : out.tokens) {
        CHECK_THAT(tok >= 0 && tok < r.v, "token {} outside [0, {})", tok, r.v);
        count[size_t(tok)] += 1;
      }
      for (size_t j = 0; j < row.size(); ++j) {
        double freq = count[j] / double(n), p = want[j];
        double limit = 5.0 * std::sqrt(p * (1 - p) / double(n)) + 1e-3;
        if (p == 0.0) limit = 0.0;
        CHECK_THAT(std::fabs(freq - p) <= limit, "T={} top_k={} top_p={}: token {} drawn {:.4f} of the time, want {:.4f} (+-{:.4f})",
                   set.t, set.k, set.p, j, freq, p, limit);
      }
    }
  });

  // A real vocabulary: the cuda plugin splits such rows over several blocks and merges their
  // partials (argmax, softmax sum, best Gumbel candidate), a path short rows never take.
  ctx.run("kernels", "sample at a vocabulary of 151,936: argmax, log-probs, kept sets, and a peaked row's frequencies", [&] {
    need();
    const int64_t v = 151936;
    SampleRows r;
    r.b = 6;
    r.v = v;
    std::mt19937 rng(23);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (int64_t i = 0; i < r.b * v; ++i) r.logits.push_back(normal(rng));
    r.temperature = {0.0f, 0.0f, 1.0f, 1.0f, 0.7f, 1.0f};
    r.top_k = {0, 0, 0, 0, 50, 0};
    r.top_p = {1.0f, 1.0f, 1.0f, 1.0f, 0.9f, 0.5f};
    r.seeds = {3, 4, 5, 6, 7, 8};
    SampleOut out = run_sample(ctx, r, 2);
    Worst worst;
    for (int64_t b = 0; b < r.b; ++b) {
      const float* row = r.logits.data() + b * v;
      const int64_t tok = out.tokens[size_t(b)];
      CHECK_THAT(tok >= 0 && tok < v, "row {}: token {} outside [0, {})", b, tok, v);
      if (r.temperature[size_t(b)] == 0.0f) {
        const int64_t best = int64_t(std::max_element(row, row + v) - row);
        CHECK_THAT(tok == best, "greedy row {}: token {}, want the argmax {}", b, tok, best);
      } else {
        std::vector<bool> allowed;
        filtered_probs(row, v, r.temperature[size_t(b)], r.top_k[size_t(b)], r.top_p[size_t(b)], allowed);
        CHECK_THAT(allowed[size_t(tok)], "row {}: token {} is outside the top-k / top-p set", b, tok);
      }
      const double t = r.temperature[size_t(b)] == 0.0f ? 1.0 : double(r.temperature[size_t(b)]);
      const double want = log_softmax_at(row, v, t, tok);
      worst.add(size_t(b), out.logprobs[size_t(b)], want, 1e-4 + 1e-5 * std::fabs(want));
    }
    worst.require("log-prob");

    // Four hot tokens far apart (probabilities .4 .3 .2 .1 up to the cold mass, 151,932 x e^-30
    // of the hot ones': 1.4e-8), 100 seeds x 5 steps.
    const int64_t hot[] = {7, 40001, 90003, v - 1};
    const double p_hot[] = {0.4, 0.3, 0.2, 0.1};
    SampleRows peaked;
    peaked.b = 100;
    peaked.v = v;
    std::vector<float> row(size_t(v), -30.0f);
    for (int i = 0; i < 4; ++i) row[size_t(hot[i])] = float(std::log(p_hot[i]));
    for (int64_t b = 0; b < peaked.b; ++b) {
      peaked.logits.insert(peaked.logits.end(), row.begin(), row.end());
      peaked.temperature.push_back(1.0f);
      peaked.top_k.push_back(0);
      peaked.top_p.push_back(1.0f);
      peaked.seeds.push_back(uint64_t(b) * 2654435761u + 99u);
    }
    double count[4] = {0, 0, 0, 0}, draws = 0;
    for (uint64_t step = 0; step < 5; ++step) {
      for (int64_t tok : run_sample(ctx, peaked, step).tokens) {
        for (int i = 0; i < 4; ++i) count[i] += tok == hot[i];
        draws += 1;
      }
    }
    for (int i = 0; i < 4; ++i) {
      const double freq = count[i] / draws, limit = 5.0 * std::sqrt(p_hot[i] * (1 - p_hot[i]) / draws);
      CHECK_THAT(std::fabs(freq - p_hot[i]) <= limit, "hot token {} drawn {:.4f} of the time, want {:.4f} (+-{:.4f})", hot[i],
                 freq, p_hot[i], limit);
    }
  });

  ctx.run("kernels", "sample rejects bad input", [&] {
    need();
    hw::Device d = ctx.device();
    DeviceTensor lt(d, {4, 8}, dl_f32()), half(d, {4, 8}, dl_f16()), tt(d, {4}, dl_f32()), short_t(d, {3}, dl_f32()),
        kt(d, {4}, dl_i32()), pt(d, {4}, dl_f32()), st(d, {4}, DLDataType{kDLUInt, 64, 1}), tok(d, {4}, dl_i64()), lp(d, {4}, dl_f32());
    ctx.expect_error(table->sample(&half.dl(), &tt.dl(), &kt.dl(), &pt.dl(), &st.dl(), 0, &tok.dl(), &lp.dl(), nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "sample(f16 logits)");
    ctx.expect_error(table->sample(&lt.dl(), &short_t.dl(), &kt.dl(), &pt.dl(), &st.dl(), 0, &tok.dl(), &lp.dl(), nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "sample(temperature [3] for 4 rows)");
    ctx.expect_error(table->sample(nullptr, &tt.dl(), &kt.dl(), &pt.dl(), &st.dl(), 0, &tok.dl(), &lp.dl(), nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "sample(NULL logits)");
  });
}

}  // namespace

void run_kernel_cases(CheckContext& ctx) {
  logprob_entropy_cases(ctx);
  rms_norm_cases(ctx);
  paged_attention_cases(ctx);
  sample_cases(ctx);
  ctx.run("kernels", "table struct_size", [&] {
    CheckContext::need(reinterpret_cast<const void*>(ctx.api().kernels), "kernel table");
    CHECK_THAT(ctx.api().kernels->struct_size >= sizeof(size_t), "kernel table struct_size {}", ctx.api().kernels->struct_size);
  });
}

}  // namespace verlpp::conformance
