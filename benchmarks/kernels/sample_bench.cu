// The cuda plugin's sampler in isolation: launch_sample (sample_kernel.cu) called directly (no
// host, no plugin ABI); the CMake target verlpp-bench-sample, run by benchmarks/run_gpu_perf.sh's
// stage `sample`:
//   check    against plain fp64 CPU loops (exit 1 on failure): greedy argmax,
//            log-probs, token frequencies of untruncated rows (chi-square), masked
//            and non-finite rows, bf16 / f16 vs their fp32 conversion bit for bit,
//            determinism, a CUDA graph (its very first call captured) vs eager
//   [time]   per call at V = 151,936, B in {32, 64, 128, 256}, bf16 and f32,
//            untruncated (T = 1) and greedy rows, eager and in a CUDA graph
// Env: BATCHES="32,256" overrides the timing batches. The bench uses only launch_sample's
// interface, so built against another sample_kernel.cu (an older commit's: CMake option
// VERLPP_SAMPLE_BENCH_BASELINE, target verlpp-bench-sample-baseline) times that one.
#include "bench_timing.cuh"
#include "kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using verlpp::cuda::FloatType;

static const char* type_name(FloatType t) {
  return t == FloatType::f32 ? "f32" : t == FloatType::bf16 ? "bf16" : "f16";
}
static size_t type_size(FloatType t) { return t == FloatType::f32 ? 4 : 2; }

// fp32 values rounded to `type` and back (exact widening), and their raw bytes.
static float round_to(FloatType t, float x) {
  if (t == FloatType::bf16) return __bfloat162float(__float2bfloat16(x));
  if (t == FloatType::f16) return __half2float(__float2half(x));
  return x;
}
static std::vector<uint8_t> encode(FloatType t, const std::vector<float>& x) {
  std::vector<uint8_t> out(x.size() * type_size(t));
  for (size_t i = 0; i < x.size(); ++i) {
    if (t == FloatType::f32) {
      std::memcpy(&out[4 * i], &x[i], 4);
    } else if (t == FloatType::bf16) {
      const __nv_bfloat16 h = __float2bfloat16(x[i]);
      std::memcpy(&out[2 * i], &h, 2);
    } else {
      const __half h = __float2half(x[i]);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}

// Per-row parameters.
struct Rows {
  std::vector<float> temperature, top_p;
  std::vector<int32_t> top_k;
  std::vector<uint64_t> seeds;
  void add(float t, int32_t k, float p, uint64_t seed) {
    temperature.push_back(t), top_k.push_back(k), top_p.push_back(p), seeds.push_back(seed);
  }
  int64_t size() const { return int64_t(temperature.size()); }
};

struct Result {
  std::vector<int64_t> tokens;
  std::vector<float> logprobs;
  cudaError_t error = cudaSuccess;
};

// Device buffers for one call: the logits start `offset` elements into a 256-byte aligned
// allocation (offset 1 or 3: rows off 16-byte alignment).
struct Call {
  int64_t b = 0, v = 0, offset = 0;
  FloatType type = FloatType::f32;
  void* buffer = nullptr;
  float *temp = nullptr, *topp = nullptr, *lp = nullptr;
  int32_t* topk = nullptr;
  uint64_t* seeds = nullptr;
  int64_t* tok = nullptr;

  Call(const Rows& rows, int64_t v_, FloatType type_, const std::vector<float>& logits, int64_t offset_ = 0)
      : b(rows.size()), v(v_), offset(offset_), type(type_) {
    std::vector<float> padded(size_t(offset), 0.0f);
    padded.insert(padded.end(), logits.begin(), logits.end());
    const std::vector<uint8_t> raw = encode(type, padded);
    CK(cudaMalloc(&buffer, raw.size()));
    CK(cudaMemcpy(buffer, raw.data(), raw.size(), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&temp, b * 4));
    CK(cudaMalloc(&topp, b * 4));
    CK(cudaMalloc(&lp, b * 4));
    CK(cudaMalloc(&topk, b * 4));
    CK(cudaMalloc(&seeds, b * 8));
    CK(cudaMalloc(&tok, b * 8));
    CK(cudaMemcpy(temp, rows.temperature.data(), b * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(topp, rows.top_p.data(), b * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(topk, rows.top_k.data(), b * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(seeds, rows.seeds.data(), b * 8, cudaMemcpyHostToDevice));
  }
  ~Call() {
    cudaFree(buffer), cudaFree(temp), cudaFree(topp), cudaFree(lp), cudaFree(topk), cudaFree(seeds), cudaFree(tok);
  }
  const void* logits() const { return static_cast<const uint8_t*>(buffer) + offset * type_size(type); }
  cudaError_t launch(uint64_t step, cudaStream_t stream) const {
    return verlpp::cuda::launch_sample(logits(), type, b, v, temp, topk, topp, seeds, step, tok, lp, stream);
  }
  Result fetch() const {
    Result r;
    r.tokens.resize(size_t(b));
    r.logprobs.resize(size_t(b));
    CK(cudaMemcpy(r.tokens.data(), tok, b * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(r.logprobs.data(), lp, b * 4, cudaMemcpyDeviceToHost));
    return r;
  }
  Result run(uint64_t step, cudaStream_t stream) const {
    CK(cudaMemsetAsync(tok, 0xff, b * 8, stream));  // every output must be written
    CK(cudaMemsetAsync(lp, 0xff, b * 4, stream));
    const cudaError_t e = launch(step, stream);
    CK(cudaStreamSynchronize(stream));
    Result r = fetch();
    r.error = e;
    return r;
  }
};

static bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// ============================== CPU references (fp64) =====================================
static double temp_of(float t) { return t > 0.0f ? double(t) : 1.0; }

// softmax(row / t) in fp64 (0 for -inf).
static std::vector<double> probs(const float* row, int64_t v, double t) {
  double mx = -INFINITY;
  for (int64_t j = 0; j < v; ++j) mx = std::max(mx, double(row[j]) / t);
  std::vector<double> p(static_cast<size_t>(v));
  double sum = 0;
  for (int64_t j = 0; j < v; ++j) sum += p[size_t(j)] = std::exp(double(row[j]) / t - mx);
  for (double& x : p) x /= sum;
  return p;
}
static double log_softmax_at(const float* row, int64_t v, double t, int64_t j) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < v; ++i) mx = std::max(mx, double(row[i]) / t);
  double sum = 0;
  for (int64_t i = 0; i < v; ++i) sum += std::exp(double(row[i]) / t - mx);
  return double(row[j]) / t - mx - std::log(sum);
}
static int64_t first_argmax(const float* row, int64_t v) {  // NaN never counts
  int64_t best = -1;
  for (int64_t j = 0; j < v; ++j)
    if (!std::isnan(row[j]) && (best < 0 || row[j] > row[best])) best = j;
  return best < 0 ? 0 : best;
}

// Chi-square of observed counts against probabilities p over n draws, bins with expected
// count below 5 merged (in index order) so the statistic is near its chi-square law. Returns
// the statistic, the degrees of freedom and the total variation distance between the binned
// frequencies and probabilities (sampling noise alone gives about 0.4 sqrt(bins / n)).
struct ChiSquare {
  double stat = 0, tv = 0;
  int df = 0;
  bool ok() const { return stat <= df + 6.0 * std::sqrt(2.0 * df) + 10; }  // p ~ 1e-6 at these df
};
static ChiSquare chi_square(const std::vector<double>& counts, const std::vector<double>& p, double n) {
  ChiSquare r;
  double obs = 0, exp = 0;
  int bins = 0;
  for (size_t j = 0; j < p.size(); ++j) {
    obs += counts[j], exp += p[j] * n;
    if (exp >= 5 || j + 1 == p.size()) {
      r.tv += 0.5 * std::fabs(obs - exp) / n;
      if (exp > 0)
        r.stat += (obs - exp) * (obs - exp) / exp, ++bins;
      else if (obs > 0)
        r.stat += 1e9;  // a draw of a probability-0 token
      obs = exp = 0;
    }
  }
  r.df = std::max(1, bins - 1);
  return r;
}

// ============================== checks ====================================================
static int failures = 0;
static void verdict(bool ok, const char* what, const std::string& detail) {
  if (!ok) ++failures;
  printf("  %-58s %s  %s\n", what, ok ? "PASS" : "FAIL", detail.c_str());
  fflush(stdout);
}
static std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
static std::string fmt(const char* f, ...) {
  char buffer[512];
  va_list args;
  va_start(args, f);
  vsnprintf(buffer, sizeof buffer, f, args);
  va_end(args);
  return buffer;
}

// Logits ~ N(0, sd^2), b rows of v.
static std::vector<float> normal_rows(int64_t b, int64_t v, float sd, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> x(size_t(b * v));
  for (float& e : x) e = nd(rng);
  return x;
}

// The first launch_sample of the process that splits rows, inside a capture (its one-time
// occupancy query must not break the capture), then the graph vs an eager call. A short row is
// sampled eagerly first: it makes the workspace pool, which is not what this checks.
static void check_first_call_captured(cudaStream_t st) {
  {
    Rows one;
    one.add(1.0f, 0, 1.0f, 1);
    const Call warm(one, 1000, FloatType::f32, normal_rows(1, 1000, 1.0f, 2));
    CK(warm.run(0, st).error);
  }
  const int64_t b = 64, v = 151936;
  Rows rows;
  for (int64_t r = 0; r < b; ++r) rows.add(r % 4 == 1 ? 0.0f : 1.0f, r % 4 == 3 ? 40 : 0, 1.0f, 1000 + r);
  const Call call(rows, v, FloatType::bf16, normal_rows(b, v, 2.0f, 1));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  const cudaError_t launched = call.launch(5, st);
  const cudaError_t ended = cudaStreamEndCapture(st, &graph);
  if (launched != cudaSuccess || ended != cudaSuccess) {
    verdict(false, "first call captured in a graph",
            fmt("launch %s, end capture %s", cudaGetErrorString(launched), cudaGetErrorString(ended)));
    (void)cudaGetLastError();
    return;
  }
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphLaunch(exec, st));
  CK(cudaStreamSynchronize(st));
  const Result from_graph = call.fetch();
  const Result eager = call.run(5, st);
  bool same = eager.error == cudaSuccess;
  for (int64_t r = 0; r < b; ++r)
    same = same && from_graph.tokens[r] == eager.tokens[r] && same_bits(from_graph.logprobs[r], eager.logprobs[r]);
  verdict(same, "first split call captured in a graph; replay == eager", "B=64 V=151936 bf16, bitwise");
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
}

// Greedy argmax and every row's log-prob against fp64 loops, over row kinds, sizes and offsets.
static void check_tokens_and_logprobs(cudaStream_t st) {
  struct Shape {
    int64_t b, v, offset;
  };
  const Shape shapes[] = {{5, 1, 0},     {7, 3, 1},     {9, 5, 3},       {33, 37, 1},     {64, 1000, 0},
                          {64, 1001, 1}, {33, 8191, 3}, {16, 151936, 0}, {16, 151939, 1}, {256, 151936, 0}};
  for (const Shape& s : shapes) {
    for (FloatType type : {FloatType::f32, FloatType::bf16}) {
      Rows rows;
      for (int64_t r = 0; r < s.b; ++r) {
        const int kind = int(r % 6);  // greedy, T 1, T 0.7, top-k 20, top-p 0.9, T 1.5
        rows.add(kind == 0   ? 0.0f
                 : kind == 2 ? 0.7f
                 : kind == 5 ? 1.5f
                             : 1.0f,
                 kind == 3 ? 20 : 0, kind == 4 ? 0.9f : 1.0f, uint64_t(r) * 7919 + uint64_t(s.v));
      }
      std::vector<float> x = normal_rows(s.b, s.v, 2.0f, uint32_t(s.b * 31 + s.v + s.offset));
      for (float& e : x) e = round_to(type, e);
      const Call call(rows, s.v, type, x, s.offset);
      const Result got = call.run(3, st);
      int bad_argmax = 0, bad_range = 0;
      double worst = 0;
      for (int64_t r = 0; r < s.b; ++r) {
        const float* row = x.data() + r * s.v;
        const int64_t tok = got.tokens[r];
        if (tok < 0 || tok >= s.v) {
          ++bad_range;
          continue;
        }
        if (rows.temperature[r] == 0.0f && tok != first_argmax(row, s.v)) ++bad_argmax;
        const double want = log_softmax_at(row, s.v, temp_of(rows.temperature[r]), tok);
        worst = std::max(worst, std::fabs(double(got.logprobs[r]) - want) / (1e-4 + 1e-5 * std::fabs(want)));
      }
      const bool ok = got.error == cudaSuccess && bad_argmax == 0 && bad_range == 0 && worst <= 1.0;
      verdict(ok,
              fmt("tokens, log-probs B=%lld V=%lld offset %lld %s", (long long)s.b, (long long)s.v, (long long)s.offset,
                  type_name(type))
                  .c_str(),
              fmt("greedy != argmax %d, out of range %d, worst |dlp| / tol %.3f", bad_argmax, bad_range, worst));
    }
  }
}

// Frequencies of untruncated rows: one row repeated over b rows with distinct seeds, `steps`
// calls; chi-square against softmax(row / t) over all tokens.
static void frequency_case(cudaStream_t st, const char* what, const std::vector<float>& row, float t, FloatType type,
                           int64_t b, int steps, int64_t offset) {
  const int64_t v = int64_t(row.size());
  std::vector<float> rounded(row);
  for (float& e : rounded) e = round_to(type, e);
  Rows rows;
  for (int64_t r = 0; r < b; ++r) rows.add(t, 0, 1.0f, uint64_t(r) * 2654435761u + 17);
  std::vector<float> x;
  for (int64_t r = 0; r < b; ++r) x.insert(x.end(), rounded.begin(), rounded.end());
  const Call call(rows, v, type, x, offset);
  const std::vector<double> p = probs(rounded.data(), v, double(t));
  std::vector<double> counts(size_t(v), 0.0);
  int64_t zero_prob = 0;
  bool launched = true;
  for (int s = 0; s < steps; ++s) {
    const Result got = call.run(uint64_t(s), st);
    launched = launched && got.error == cudaSuccess;
    for (int64_t tok : got.tokens) {
      if (tok < 0 || tok >= v) {
        zero_prob += 1;
        continue;
      }
      counts[size_t(tok)] += 1;
      zero_prob += p[size_t(tok)] == 0.0;
    }
  }
  const double n = double(b) * steps;
  const ChiSquare chi = chi_square(counts, p, n);
  verdict(launched && zero_prob == 0 && chi.ok(), what,
          fmt("%.0f draws: chi2 %.1f on %d df (limit %.1f), TV %.4f, masked/out-of-range draws %lld", n, chi.stat,
              chi.df, chi.df + 6.0 * std::sqrt(2.0 * chi.df) + 10, chi.tv, (long long)zero_prob));
}

static void check_frequencies(cudaStream_t st) {
  // V = 1000: one block per row (no workspace), 8 groups of 128 elements.
  const std::vector<float> small = normal_rows(1, 1000, 1.5f, 7);
  frequency_case(st, "frequencies V=1000 T=1 f32", small, 1.0f, FloatType::f32, 4000, 3, 0);
  frequency_case(st, "frequencies V=1000 T=0.7 bf16, offset 1", small, 0.7f, FloatType::bf16, 4000, 3, 1);
  // Masked: 90% of tokens -inf.
  std::vector<float> masked = normal_rows(1, 1001, 1.0f, 8);
  std::mt19937 rng(9);
  for (float& e : masked)
    if (rng() % 10 != 0) e = -INFINITY;
  frequency_case(st, "frequencies V=1001, 90% of tokens -inf, f16", masked, 1.0f, FloatType::f16, 4000, 3, 0);
  // A real vocabulary (rows split over blocks): 53 hot tokens at 0, 1, 2, 3, v - 1 and on both
  // sides of multiples of 128 elements, where groups and splits begin (plus the head's shift),
  // 400 masked tokens, and a cold background of 0.44 of the mass (the chi-square merges cold
  // tokens into bins in index order, so it also sees mass moved between distant regions).
  const int64_t v = 151936;
  std::vector<float> big(size_t(v), -8.0f);
  std::vector<int64_t> hot = {0, 1, 2, 3, v - 1};
  for (int64_t k = 37; k * 128 + 3 < v; k += 97)
    for (int64_t d : {-1, 0, 2, 3}) hot.push_back(k * 128 + d);
  for (size_t i = 0; i < hot.size(); ++i) big[size_t(hot[i])] = float(std::log(0.5 + double(i % 7) / 4));
  for (int64_t j = 5000; j < 5400; ++j) big[size_t(j)] = -INFINITY;
  frequency_case(st, "frequencies V=151936, hot tokens at boundaries, bf16", big, 1.0f, FloatType::bf16, 256, 40, 0);
  frequency_case(st, "frequencies V=151936, hot tokens at boundaries, f32, offset 3", big, 1.0f, FloatType::f32, 256,
                 40, 3);
  frequency_case(st, "frequencies V=151936 (B=32: more splits), f32", big, 1.0f, FloatType::f32, 32, 200, 0);
}

// Rows whose denominator is not a positive finite number, and other edge rows.
static void check_edge_rows(cudaStream_t st) {
  for (int64_t v : {int64_t(1000), int64_t(151936)}) {
    const int kinds = 6;
    std::vector<float> x(size_t(kinds * v));
    auto row = [&](int r) { return x.data() + size_t(r) * v; };
    std::mt19937 rng{uint32_t(v)};
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& e : x) e = nd(rng);
    std::fill(row(0), row(0) + v, -INFINITY);        // 0: every logit -inf -> token 0
    row(1)[10] = NAN, row(1)[v / 2] = NAN;           // 1: NaN logits -> the argmax of the others
    row(2)[5] = INFINITY, row(2)[v - 3] = INFINITY;  // 2: +inf logits -> the first +inf
    std::fill(row(3), row(3) + v, -INFINITY);        // 3: one finite logit -> that token, log-prob 0
    row(3)[v - 2] = 3.0f;                            //    (up to ex2.approx's error at 0: 15 ulps of 1,
                                                     //    1.8e-6, on the H200; |lp| < 4e-6)
    row(4)[v / 3] = 60.0f;                           // 4: T = 1e-3 -> the argmax
    for (int64_t j = 0; j < v; ++j) row(5)[j] = -1e4f + 0.01f * float(j % 100);  // 5: far below 0, as any
    const int64_t want[kinds] = {0, first_argmax(row(1), v), 5, v - 2, v / 3, -1};
    Rows rows;
    for (int r = 0; r < kinds; ++r) rows.add(r == 4 ? 1e-3f : 1.0f, 0, 1.0f, uint64_t(r) + 11);
    bool ok = true;
    std::string detail;
    for (FloatType type : {FloatType::f32, FloatType::bf16}) {
      std::vector<float> xt(x);
      for (float& e : xt) e = round_to(type, e);
      const Call call(rows, v, type, xt);
      for (uint64_t step = 0; step < 20; ++step) {
        const Result got = call.run(step, st);
        ok = ok && got.error == cudaSuccess;
        for (int r = 0; r < kinds; ++r) {
          const int64_t tok = got.tokens[size_t(r)];
          const bool good = want[r] >= 0 ? tok == want[r] : (tok >= 0 && tok < v);
          if (!good && detail.size() < 200)
            detail += fmt("row %d (%s) step %llu: token %lld, want %lld; ", r, type_name(type),
                          (unsigned long long)step, (long long)tok, (long long)want[r]);
          ok = ok && good;
        }
        if (!(std::fabs(got.logprobs[3]) <= 4e-6f) && detail.size() < 200)
          detail += fmt("one-token row log-prob %g; ", got.logprobs[3]);
        ok = ok && std::fabs(got.logprobs[3]) <= 4e-6f;
        const double lp5 = log_softmax_at(xt.data() + 5 * v, v, 1.0, got.tokens[5]);
        const bool lp5_ok = std::fabs(got.logprobs[5] - lp5) <= 1e-4 + 1e-5 * std::fabs(lp5);
        if (!lp5_ok && detail.size() < 200)
          detail += fmt("row 5 (logits ~ -1e4) log-prob %.7g, want %.7g; ", got.logprobs[5], lp5);
        ok = ok && lp5_ok;
      }
    }
    verdict(ok, fmt("edge rows (-inf, NaN, +inf, one token, T=1e-3, -1e4) V=%lld", (long long)v).c_str(), detail);
  }
}

// bf16 / f16 logits against their fp32 conversion at the same offset: tokens and log-prob bits.
static void check_16bit_identity(cudaStream_t st) {
  struct Layout {
    int64_t b, v, offset;
  };
  const Layout layouts[] = {{1, 1000, 0},   {64, 1000, 0},   {64, 1001, 0},    {64, 1001, 1},   {1, 151936, 0},
                            {1, 151936, 3}, {64, 151936, 0}, {256, 151936, 0}, {33, 151939, 1}, {7, 5, 3}};
  for (FloatType type : {FloatType::bf16, FloatType::f16}) {
    int64_t rows_checked = 0, differ = 0;
    for (const Layout& l : layouts) {
      Rows rows;
      for (int64_t r = 0; r < l.b; ++r) {
        const int kind = int(r % 6);  // greedy, T 0.8, top-k 50, top-p 0.9, both, T 1
        rows.add(kind == 0   ? 0.0f
                 : kind == 1 ? 0.8f
                 : kind == 4 ? 0.7f
                             : 1.0f,
                 kind == 2   ? 50
                 : kind == 4 ? 200
                             : 0,
                 kind == 3   ? 0.9f
                 : kind == 4 ? 0.8f
                             : 1.0f,
                 uint64_t(r) * 104729 + uint64_t(l.v));
      }
      std::vector<float> x = normal_rows(l.b, l.v, 2.0f, uint32_t(l.b * 131 + l.v + l.offset));
      for (float& e : x) e = round_to(type, e);
      const Call narrow(rows, l.v, type, x, l.offset), wide(rows, l.v, FloatType::f32, x, l.offset);
      for (uint64_t step = 1; step <= 4; ++step) {
        const Result a = narrow.run(step, st), b = wide.run(step, st);
        for (int64_t r = 0; r < l.b; ++r, ++rows_checked)
          differ += a.tokens[r] != b.tokens[r] || !same_bits(a.logprobs[r], b.logprobs[r]) || a.error != cudaSuccess;
      }
    }
    verdict(differ == 0, fmt("%s == its fp32 conversion, tokens and log-prob bits", type_name(type)).c_str(),
            fmt("%lld rows x steps, %lld differ", (long long)rows_checked, (long long)differ));
  }
}

// The same call twice gives the same bits; another step changes untruncated tokens.
static void check_determinism(cudaStream_t st) {
  const int64_t b = 256, v = 151936;
  Rows rows;
  for (int64_t r = 0; r < b; ++r) rows.add(1.0f, 0, 1.0f, uint64_t(r) + 1);
  const Call call(rows, v, FloatType::bf16, normal_rows(b, v, 3.0f, 4));
  const Result a = call.run(9, st), again = call.run(9, st), other = call.run(10, st);
  bool same = true;
  int64_t changed = 0;
  for (int64_t r = 0; r < b; ++r) {
    same = same && a.tokens[r] == again.tokens[r] && same_bits(a.logprobs[r], again.logprobs[r]);
    changed += other.tokens[r] != a.tokens[r];
  }
  verdict(same && changed > b / 2, "deterministic; step 10 changes tokens of step 9",
          fmt("%lld of %lld rows changed", (long long)changed, (long long)b));
}

static int check() {
  printf("== check vs fp64 CPU loops (log-prob tolerance 1e-4 + 1e-5 |lp|, as the conformance suite's)\n");
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  check_first_call_captured(st);  // must stay the process's first launch_sample
  check_tokens_and_logprobs(st);
  check_frequencies(st);
  check_edge_rows(st);
  check_16bit_identity(st);
  check_determinism(st);
  CK(cudaStreamDestroy(st));
  printf(failures == 0 ? "CHECK: ALL PASS\n" : "CHECK: %d FAILED\n", failures);
  return failures == 0 ? 0 : 1;
}

// ============================== timing ====================================================
// Roughly N(0, 2^2) logits from a hash of the index, in the buffer's type.
template <class T>
__global__ void fill_kernel(T* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float x = 2.0f * normalish(i, seed);
    if constexpr (sizeof(T) == 4)
      p[i] = x;
    else
      p[i] = __float2bfloat16(x);
  }
}

struct Timing {
  int64_t b, v;
  FloatType type;
  int copies;  // logits buffers rotated so every call reads data cold in L2
  size_t row_bytes;
  void* logits = nullptr;
  float *temp = nullptr, *topp = nullptr, *lp = nullptr;
  int32_t* topk = nullptr;
  uint64_t* seeds = nullptr;
  int64_t* tok = nullptr;
  cudaStream_t st;
  cudaEvent_t e0, e1;

  Timing(int64_t b_, int64_t v_, FloatType type_, int l2_bytes) : b(b_), v(v_), type(type_) {
    row_bytes = size_t(v) * type_size(type);
    const double call_bytes = double(b) * row_bytes;
    copies = std::clamp(int(std::ceil(3.0 * l2_bytes / call_bytes)), 2, 64);
    const size_t n = size_t(b) * v * copies;
    CK(cudaMalloc(&logits, n * type_size(type)));
    if (type == FloatType::f32)
      fill_kernel<<<4096, 256>>>(static_cast<float*>(logits), n, 1);
    else
      fill_kernel<<<4096, 256>>>(static_cast<__nv_bfloat16*>(logits), n, 1);
    CK(cudaGetLastError());
    CK(cudaMalloc(&temp, b * 4));
    CK(cudaMalloc(&topp, b * 4));
    CK(cudaMalloc(&topk, b * 4));
    CK(cudaMalloc(&seeds, b * 8));
    CK(cudaMalloc(&tok, b * 8));
    CK(cudaMalloc(&lp, b * 4));
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaDeviceSynchronize());
  }
  ~Timing() {
    cudaFree(logits), cudaFree(temp), cudaFree(topp), cudaFree(topk), cudaFree(seeds), cudaFree(tok), cudaFree(lp);
    cudaStreamDestroy(st), cudaEventDestroy(e0), cudaEventDestroy(e1);
  }
  void set_rows(float t) {
    std::vector<float> tt(size_t(b), t), pp(size_t(b), 1.0f);
    std::vector<int32_t> kk(size_t(b), 0);
    std::vector<uint64_t> ss(static_cast<size_t>(b));
    for (int64_t r = 0; r < b; ++r) ss[size_t(r)] = uint64_t(r) * 7919 + 3;
    CK(cudaMemcpy(temp, tt.data(), b * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(topp, pp.data(), b * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(topk, kk.data(), b * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(seeds, ss.data(), b * 8, cudaMemcpyHostToDevice));
  }
  cudaError_t call(int i) {
    const void* x = static_cast<const uint8_t*>(logits) + size_t(i % copies) * b * row_bytes;
    return verlpp::cuda::launch_sample(x, type, b, v, temp, topk, topp, seeds, uint64_t(i), tok, lp, st);
  }
  // Per-call microseconds of 50 back-to-back calls after 5 warm-up calls.
  float eager() {
    for (int i = 0; i < 5; ++i) CK(call(i));
    const int iters = 50;
    const float ms = elapsed_ms(st, e0, e1, [&] {
      for (int i = 0; i < iters; ++i) CK(call(i));
    });
    return ms * 1000 / iters;
  }
  // Per-call microseconds of a graph of 20 captured calls replayed 10 times; -1 if capture fails.
  float graph() {
    return graph_us_per_call(
        st, e0, e1, 20, [&](int i) { return call(i); }, [] {});
  }
  double gbs(float us) const { return us > 0 ? double(b) * row_bytes / (us * 1e3) : 0; }
};

static int timing() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int64_t v = 151936;
  printf(
      "== timing: %s, %d SMs, L2 %d MB; V=%lld, logits ~N(0, 2^2); per call of launch_sample (both kernels and\n"
      "   the workspace's stream-ordered alloc/free); eager = 50 back-to-back calls, graph = 20 captured calls\n"
      "   replayed; calls rotate over >= 3x L2 of logits (cold in L2); GB/s = logits bytes / time.\n",
      prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, (long long)v);
  std::vector<int64_t> batches = {32, 64, 128, 256};
  if (const char* env = getenv("BATCHES")) {
    batches.clear();
    for (const char* p = env; *p;) {
      batches.push_back(strtoll(p, nullptr, 10));
      p = strchr(p, ',');
      if (!p) break;
      ++p;
    }
  }
  printf("type    B    MB | T=1 eager  graph  GB/s | greedy eager  graph  GB/s\n");
  for (FloatType type : {FloatType::bf16, FloatType::f32}) {
    for (int64_t b : batches) {
      Timing t(b, v, type, prop.l2CacheSize);
      t.set_rows(1.0f);
      const float draw_e = t.eager(), draw_g = t.graph();
      t.set_rows(0.0f);
      const float greedy_e = t.eager(), greedy_g = t.graph();
      printf("%-4s %4lld %5.1f | %9.1f %6.1f %5.0f | %12.1f %6.1f %5.0f\n", type_name(type), (long long)b,
             double(b) * t.row_bytes / 1e6, draw_e, draw_g, t.gbs(draw_g), greedy_e, greedy_g, t.gbs(greedy_g));
      fflush(stdout);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "time";
  if (mode == "check") return check();
  return timing();
}
