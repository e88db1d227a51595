// verlpp-plugin-check, group "kernels": the sampler against what any correct sampler must do
// (its random generator is the plugin's own), on short rows and at a real vocabulary (151,936,
// where the cuda plugin splits rows over blocks); and, from ABI 1.3, bf16 / f16 logits against
// the plugin's own fp32 result for their exact conversion. Its own file: kernel_cases.cpp had
// grown past 500 lines.
#include "check_context.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

namespace verlpp::conformance {
namespace {

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
  ctx.expect_ok(
      ctx.api().kernels->sample(&lt.dl(), &tt.dl(), &kt.dl(), &pt.dl(), &st.dl(), step, &tok.dl(), &lp.dl(), nullptr),
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
std::vector<double> filtered_probs(const float* row, int64_t v, double t, int32_t k, double p,
                                   std::vector<bool>& allowed) {
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

// ---- 16-bit logits (ABI 1.3). The contract is exact: bf16 / f16 logits must give the tokens and
// log-probs, bit for bit, that the same plugin gives for their fp32 conversion (converting is
// exact, so a kernel that widens on load and changes nothing else passes). The rows below mix
// greedy, temperature-only, top-k, top-p and both; rounded to 16 bits the values repeat, so ties
// at every boundary are common.

// Logits [b, v] starting `offset` elements into their buffer (byte_offset: with an offset, and
// with an odd v, rows start off 16-byte alignment, which a vectorised kernel handles apart).
struct SampleLayout {
  int64_t b, v, offset;
};

SampleOut run_sample_raw(CheckContext& ctx, const SampleRows& r, const SampleLayout& layout, DLDataType dtype,
                         const std::vector<uint8_t>& raw, uint64_t step) {
  hw::Device d = ctx.device();
  DeviceTensor buffer(d, {layout.offset + r.b * r.v}, dtype), tt(d, {r.b}, dl_f32()), kt(d, {r.b}, dl_i32()),
      pt(d, {r.b}, dl_f32()), st(d, {r.b}, DLDataType{kDLUInt, 64, 1}), tok(d, {r.b}, dl_i64()), lp(d, {r.b}, dl_f32());
  buffer.upload(raw.data());
  tt.upload(r.temperature.data());
  kt.upload(r.top_k.data());
  pt.upload(r.top_p.data());
  st.upload(r.seeds.data());
  int64_t shape[2] = {r.b, r.v};
  DLTensor logits = buffer.dl();
  logits.ndim = 2;
  logits.shape = shape;
  logits.strides = nullptr;
  logits.byte_offset += uint64_t(layout.offset) * uint64_t(dtype.bits / 8);
  ctx.expect_ok(
      ctx.api().kernels->sample(&logits, &tt.dl(), &kt.dl(), &pt.dl(), &st.dl(), step, &tok.dl(), &lp.dl(), nullptr),
      "sample");
  return SampleOut{tok.to_host<int64_t>(), lp.to_host<float>()};
}

// For each layout: logits drawn in fp32 and rounded to `dtype`, passed as `dtype` and as their
// fp32 conversion (same offset), each layout at its own step; tokens and log-prob bits must agree.
void check_16bit_logits(CheckContext& ctx, DLDataType dtype) {
  if (ctx.api().abi_minor < 3)
    throw NotOffered(fmt::format("bf16 / f16 logits are ABI 1.3 (plugin minor {})", ctx.api().abi_minor));
  const SampleLayout layouts[] = {{1, 1000, 0},   {64, 1000, 0},  {64, 1001, 0},  {64, 1001, 1},
                                  {1, 151936, 0}, {1, 151936, 3}, {64, 151936, 0}};
  struct Kind {
    float t;
    int32_t k;
    float p;
  };
  const Kind kinds[] = {{0.0f, 0, 1.0f}, {0.8f, 0, 1.0f}, {1.0f, 50, 1.0f}, {1.1f, 0, 0.9f}, {0.7f, 200, 0.8f}};
  uint64_t step = 0;
  for (const SampleLayout& layout : layouts) {
    ++step;
    SampleRows r;
    r.b = layout.b;
    r.v = layout.v;
    std::mt19937 rng(uint32_t(layout.b * 131 + layout.v + layout.offset));
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> drawn(size_t(layout.offset + layout.b * layout.v), 0.0f);  // the first `offset` are padding
    for (size_t i = size_t(layout.offset); i < drawn.size(); ++i) drawn[i] = normal(rng);
    for (int64_t b = 0; b < r.b; ++b) {
      const Kind& kind = kinds[size_t(b % 5)];
      r.temperature.push_back(kind.t);
      r.top_k.push_back(kind.k);
      r.top_p.push_back(kind.p);
      r.seeds.push_back(uint64_t(b) * 104729u + uint64_t(layout.v));
    }
    std::vector<double> seen, seen_f32;
    const std::vector<uint8_t> narrow = encode_as(drawn, dtype, seen);
    const std::vector<uint8_t> wide = encode_as(std::vector<float>(seen.begin(), seen.end()), dl_f32(), seen_f32);
    const SampleOut got = run_sample_raw(ctx, r, layout, dtype, narrow, step);
    const SampleOut want = run_sample_raw(ctx, r, layout, dl_f32(), wide, step);
    for (int64_t b = 0; b < r.b; ++b) {
      const size_t i = size_t(b);
      uint32_t got_bits, want_bits;
      std::memcpy(&got_bits, &got.logprobs[i], 4);
      std::memcpy(&want_bits, &want.logprobs[i], 4);
      CHECK_THAT(
          got.tokens[i] == want.tokens[i] && got_bits == want_bits,
          "B={} V={} offset {} step {}, row {} (T={}, top_k={}, top_p={}): {} gave token {} log-prob {} ({:#010x}), "
          "its fp32 conversion token {} log-prob {} ({:#010x})",
          layout.b, layout.v, layout.offset, step, b, r.temperature[i], r.top_k[i], r.top_p[i], sdk::dtype_name(dtype),
          got.tokens[i], got.logprobs[i], got_bits, want.tokens[i], want.logprobs[i], want_bits);
    }
  }
}

}  // namespace

void run_sample_cases(CheckContext& ctx) {
  const auto* table = ctx.api().kernels;
  auto need = [&] {
    CheckContext::need(table ? reinterpret_cast<const void*>(table->sample) : nullptr, "kernel sample");
  };

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
      CHECK_THAT(allowed[size_t(tok)], "row {} (T={}, top_k={}, top_p={}): token {} is outside the top-k / top-p set",
                 b, r.temperature[size_t(b)], r.top_k[size_t(b)], r.top_p[size_t(b)], tok);
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
    struct Setting {
      float t;
      int32_t k;
      float p;
    };
    for (Setting set :
         {Setting{1.0f, 0, 1.0f}, Setting{1.0f, 2, 1.0f}, Setting{1.0f, 0, 0.6f}, Setting{0.7f, 3, 0.9f}}) {
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
        CHECK_THAT(std::fabs(freq - p) <= limit,
                   "T={} top_k={} top_p={}: token {} drawn {:.4f} of the time, want {:.4f} (+-{:.4f})", set.t, set.k,
                   set.p, j, freq, p, limit);
      }
    }
  });

  // A real vocabulary: the cuda plugin splits such rows over several blocks and merges their
  // partials (argmax, softmax sum, per-group masses for the draw), a path short rows never take.
  ctx.run("kernels", "sample at a vocabulary of 151,936: argmax, log-probs, kept sets, and a peaked row's frequencies",
          [&] {
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
              CHECK_THAT(std::fabs(freq - p_hot[i]) <= limit,
                         "hot token {} drawn {:.4f} of the time, want {:.4f} (+-{:.4f})", hot[i], freq, p_hot[i],
                         limit);
            }
          });

  ctx.run("kernels", "sample: bf16 logits give their fp32 conversion's tokens and log-probs bit for bit (1.3)", [&] {
    need();
    check_16bit_logits(ctx, dl_bf16());
  });
  ctx.run("kernels", "sample: f16 logits give their fp32 conversion's tokens and log-probs bit for bit (1.3)", [&] {
    need();
    check_16bit_logits(ctx, dl_f16());
  });

  ctx.run("kernels", "sample rejects bad input", [&] {
    need();
    hw::Device d = ctx.device();
    // f64 logits: no ABI version takes them (f16 and bf16 are valid from 1.3).
    DeviceTensor lt(d, {4, 8}, dl_f32()), wide(d, {4, 8}, dl_f64()), tt(d, {4}, dl_f32()), short_t(d, {3}, dl_f32()),
        kt(d, {4}, dl_i32()), pt(d, {4}, dl_f32()), st(d, {4}, DLDataType{kDLUInt, 64, 1}), tok(d, {4}, dl_i64()),
        lp(d, {4}, dl_f32());
    ctx.expect_error(table->sample(&wide.dl(), &tt.dl(), &kt.dl(), &pt.dl(), &st.dl(), 0, &tok.dl(), &lp.dl(), nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "sample(f64 logits)");
    ctx.expect_error(
        table->sample(&lt.dl(), &short_t.dl(), &kt.dl(), &pt.dl(), &st.dl(), 0, &tok.dl(), &lp.dl(), nullptr),
        VERLPP_STATUS_INVALID_ARGUMENT, "sample(temperature [3] for 4 rows)");
    ctx.expect_error(table->sample(nullptr, &tt.dl(), &kt.dl(), &pt.dl(), &st.dl(), 0, &tok.dl(), &lp.dl(), nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "sample(NULL logits)");
  });
}

}  // namespace verlpp::conformance
