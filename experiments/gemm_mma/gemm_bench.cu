// The decode-GEMM experiment (gemm_mma_experiment.cu: not part of the plugin) beside cuBLAS, its
// configurations called directly; the CMake target verlpp-gemm-mma-experiment (README.md), run by
// benchmarks/run_gpu_perf.sh's stage `gemm`:
//   check         every configuration on the four projections of a Qwen2.5-0.5B layer at several
//                 row counts against an fp64 GPU loop (exit 1 on failure)
//   [time]        per layer call at M = 256 (env ROWS="32,256"), in a CUDA graph of 24 layers on
//                 24 distinct weights (cold in L2, as in a decode step), each GEMM behind an
//                 RMSNorm kernel of the plugin as in a layer: cuBLAS (cublasGemmEx, what
//                 LibTorch's at::linear calls; for gate/up + the plugin's silu_mul) against each
//                 configuration; the RMSNorm alone is timed too; then each configuration alone,
//                 24 eager launches back to back
//   one C S [M]   three calls of configuration C on shape S (for ncu)
// Env: VERLPP_GEMM_PREFETCH=0 leaves out the weights' L2 hint, VERLPP_CUDA_PDL=0 the PDL launch.
#include "bench_timing.cuh"
#include "gemm_mma_experiment.hpp"
#include "kernels.hpp"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using verlpp::cuda::FloatType;

namespace {

struct Shape {
  const char* name;
  int64_t n, k;  // output columns, inner size
  bool silu, bias;
};
const Shape kShapes[] = {{"qkv", 1152, 896, false, true},
                         {"o", 896, 896, false, false},
                         {"gate_up+silu", 4864, 896, true, false},
                         {"down", 896, 4864, false, false}};

int64_t weight_rows(const Shape& s) { return s.silu ? 2 * s.n : s.n; }

__global__ void fill_kernel(__nv_bfloat16* x, int64_t count, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16(normalish(uint64_t(i), seed) * scale);
}
void fill(__nv_bfloat16* x, int64_t count, uint64_t seed, float scale) {
  fill_kernel<<<1024, 256>>>(x, count, seed, scale);
  CK(cudaGetLastError());
}

// Reference: y[r, c] = sum_k a[r, k] w[c, k] (+ bias[c]) in fp64, one thread per output; for
// SwiGLU the product silu(g) * u of the exact g and u; abs_sum = sum |a w| (the error scale).
__global__ void reference_kernel(const __nv_bfloat16* a, const __nv_bfloat16* w, const __nv_bfloat16* bias, int64_t m,
                                 int64_t n, int64_t k, bool silu, double* y, double* abs_sum) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= m * n) return;
  const int64_t r = i / n, c = i % n;
  double dot[2] = {0, 0}, mag[2] = {0, 0};
  for (int h = 0; h < (silu ? 2 : 1); ++h) {
    const int64_t row = c + h * n;
    for (int64_t j = 0; j < k; ++j) {
      const double p = double(__bfloat162float(a[r * k + j])) * double(__bfloat162float(w[row * k + j]));
      dot[h] += p, mag[h] += fabs(p);
    }
    if (bias != nullptr) dot[h] += double(__bfloat162float(bias[row]));
  }
  if (silu) {
    const double g = dot[0], u = dot[1];
    y[i] = g / (1.0 + exp(-g)) * u;
    abs_sum[i] = (mag[0] + fabs(g)) * fabs(u) + fabs(g) * mag[1];
  } else {
    y[i] = dot[0], abs_sum[i] = mag[0];
  }
}

std::vector<float> download(const __nv_bfloat16* x, int64_t count) {
  std::vector<__nv_bfloat16> h(static_cast<size_t>(count));
  CK(cudaMemcpy(h.data(), x, count * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out(h.size());
  for (size_t i = 0; i < h.size(); ++i) out[i] = __bfloat162float(h[i]);
  return out;
}

int check() {
  const int64_t rows[] = {1, 7, 32, 100, 256};
  int failures = 0, runs = 0;
  for (const Shape& s : kShapes) {
    const int64_t wr = weight_rows(s);
    __nv_bfloat16 *a, *w, *bias, *out;
    double *ref, *mag;
    CK(cudaMalloc(&a, 256 * s.k * 2));
    CK(cudaMalloc(&w, wr * s.k * 2));
    CK(cudaMalloc(&bias, wr * 2));
    CK(cudaMalloc(&out, 256 * s.n * 2));
    CK(cudaMalloc(&ref, 256 * s.n * 8));
    CK(cudaMalloc(&mag, 256 * s.n * 8));
    fill(a, 256 * s.k, 1, 1.0f);
    fill(w, wr * s.k, 2, 1.0f / std::sqrt(float(s.k)));
    fill(bias, wr, 3, 0.5f);
    for (int64_t m : rows) {
      const __nv_bfloat16* b = s.bias ? bias : nullptr;
      reference_kernel<<<int((m * s.n + 255) / 256), 256>>>(a, w, b, m, s.n, s.k, s.silu, ref, mag);
      CK(cudaGetLastError());
      std::vector<double> r(size_t(m * s.n)), g(r.size());
      CK(cudaMemcpy(r.data(), ref, r.size() * 8, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(g.data(), mag, g.size() * 8, cudaMemcpyDeviceToHost));
      for (int c = 0; c < verlpp::cuda::gemm_config_count(); ++c) {
        if (verlpp::cuda::gemm_config_silu(c) != s.silu) continue;
        CK(cudaMemset(out, 0xff, 256 * s.n * 2));  // NaN: an element never written fails
        CK(verlpp::cuda::launch_gemm_config(c, a, s.k, w, s.k, b, out, s.n, m, s.n, s.k, s.n, nullptr));
        CK(cudaDeviceSynchronize());
        const std::vector<float> y = download(out, m * s.n);
        // Allowed: the output's rounding (2^-8 relative, bf16; SwiGLU rounds g, u and silu(g)
        // too: 4 roundings) and fp32 accumulation over k terms (k 2^-24 of sum |a w|).
        double worst = 0;
        int64_t worst_at = 0;
        for (size_t i = 0; i < y.size(); ++i) {
          const double tol = (s.silu ? 4 : 1) * std::ldexp(1.0, -8) * std::fabs(r[i]) +
                             double(s.k) * std::ldexp(1.0, -24) * g[i] + (s.silu ? std::ldexp(1.0, -8) * g[i] : 0.0) +
                             1e-30;
          const double e = std::isfinite(y[i]) ? std::fabs(double(y[i]) - r[i]) / tol : 1e30;
          if (e > worst) worst = e, worst_at = int64_t(i);
        }
        const bool ok = worst <= 1.0;
        failures += ok ? 0 : 1, ++runs;
        printf("%-14s m=%3lld %-22s worst error / tolerance %.3f%s\n", s.name, (long long)m,
               verlpp::cuda::gemm_config_name(c), worst, ok ? "" : "  FAIL");
        if (!ok)
          printf("  at row %lld col %lld: got %.6g want %.6g\n", (long long)(worst_at / s.n),
                 (long long)(worst_at % s.n), y[size_t(worst_at)], r[size_t(worst_at)]);
      }
    }
    CK(cudaFree(a));
    CK(cudaFree(w));
    CK(cudaFree(bias));
    CK(cudaFree(out));
    CK(cudaFree(ref));
    CK(cudaFree(mag));
  }
  printf("%s: %d of %d runs within tolerance\n", failures ? "FAIL" : "PASS", runs - failures, runs);
  return failures ? 1 : 0;
}

constexpr int64_t kMaxRows = 256;  // the decode batch the experiment is for; its buffers hold this many

// A row count in [1, kMaxRows] from `text` (all of it), or -1.
int64_t parse_rows(const std::string& text) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  return !text.empty() && end != nullptr && *end == '\0' && v >= 1 && v <= kMaxRows ? int64_t(v) : -1;
}

int time_all() {
  std::vector<int64_t> row_counts = {256};
  if (const char* env = std::getenv("ROWS")) {
    row_counts.clear();
    std::string list = env;
    for (size_t start = 0; start <= list.size();) {
      const size_t comma = std::min(list.find(',', start), list.size());
      const std::string item = list.substr(start, comma - start);
      const int64_t rows = parse_rows(item);
      if (rows < 0) {
        printf("ROWS=\"%s\": \"%s\" is not a row count in [1, %lld]\n", env, item.c_str(), (long long)kMaxRows);
        return 2;
      }
      row_counts.push_back(rows);
      start = comma + 1;
    }
  }
  constexpr int kLayers = 24;
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return printf("cublasCreate failed\n"), 2;
  cublasSetStream(handle, st);
  void* cublas_ws;
  CK(cudaMalloc(&cublas_ws, 32 << 20));
  cublasSetWorkspace(handle, cublas_ws, 32 << 20);
  // The RMSNorm in front of each GEMM, on its own [256, 896] rows.
  __nv_bfloat16 *norm_in, *norm_w, *norm_out;
  CK(cudaMalloc(&norm_in, 256 * 896 * 2));
  CK(cudaMalloc(&norm_w, 896 * 2));
  CK(cudaMalloc(&norm_out, 256 * 896 * 2));
  fill(norm_in, 256 * 896, 7, 1.0f), fill(norm_w, 896, 8, 1.0f);
  for (int64_t m : row_counts) {
    auto norm = [&] {
      return verlpp::cuda::launch_rms_norm(norm_in, norm_w, FloatType::bf16, m, 896, 1e-6f, norm_out, st);
    };
    CK(norm());  // its first call sets up the plugin's per-device state, which a capture may not do
    CK(cudaStreamSynchronize(st));
    const float norm_us = graph_us_per_call(
        st, e0, e1, kLayers, [&](int) { return norm(); }, [] {});
    printf("M = %lld: RMSNorm alone %.2f us a layer\n", (long long)m, norm_us);
    for (const Shape& s : kShapes) {
      const int64_t wr = weight_rows(s);
      __nv_bfloat16 *a, *w, *bias, *out, *tmp;
      CK(cudaMalloc(&a, m * s.k * 2));
      CK(cudaMalloc(&w, kLayers * wr * s.k * 2));
      CK(cudaMalloc(&bias, wr * 2));
      CK(cudaMalloc(&out, m * s.n * 2));
      CK(cudaMalloc(&tmp, m * wr * 2));
      fill(a, m * s.k, 1, 1.0f), fill(w, kLayers * wr * s.k, 2, 0.03f), fill(bias, wr, 3, 0.5f);
      const float alpha = 1, beta = 0;
      auto cublas = [&](int layer) -> cudaError_t {
        cudaError_t e = norm();
        if (e != cudaSuccess) return e;
        const __nv_bfloat16* wl = w + int64_t(layer) * wr * s.k;
        void* y = s.silu ? static_cast<void*>(tmp) : static_cast<void*>(out);
        if (cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(wr), int(m), int(s.k), &alpha, wl, CUDA_R_16BF, int(s.k),
                         a, CUDA_R_16BF, int(s.k), &beta, y, CUDA_R_16BF, int(wr), CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
          return cudaErrorUnknown;
        if (!s.silu) return cudaSuccess;
        return verlpp::cuda::launch_silu_mul(tmp, wr, tmp + s.n, wr, out, s.n, FloatType::bf16, m, s.n, st);
      };
      CK(cublas(0));
      CK(cudaStreamSynchronize(st));
      const float base = graph_us_per_call(st, e0, e1, kLayers, cublas, [] {});
      printf("  %-14s cuBLAS%-22s %7.2f us (GEMM %.2f)\n", s.name, s.silu ? " + silu_mul" : "", base, base - norm_us);
      for (int c = 0; c < verlpp::cuda::gemm_config_count(); ++c) {
        if (verlpp::cuda::gemm_config_silu(c) != s.silu) continue;
        auto ours = [&](int layer) -> cudaError_t {
          cudaError_t e = norm();
          if (e != cudaSuccess) return e;
          return verlpp::cuda::launch_gemm_config(c, a, s.k, w + int64_t(layer) * wr * s.k, s.k,
                                                  s.bias ? bias : nullptr, out, s.n, m, s.n, s.k, s.n, st);
        };
        CK(ours(0));
        CK(cudaStreamSynchronize(st));
        const float us = graph_us_per_call(st, e0, e1, kLayers, ours, [] {});
        // Eager: the GEMM alone, launched 24 times back to back (no RMSNorm, no graph).
        const float eager = elapsed_ms(st, e0, e1,
                                       [&] {
                                         for (int layer = 0; layer < kLayers; ++layer)
                                           CK(verlpp::cuda::launch_gemm_config(c, a, s.k, w + int64_t(layer) * wr * s.k,
                                                                               s.k, s.bias ? bias : nullptr, out, s.n,
                                                                               m, s.n, s.k, s.n, st));
                                       }) *
                            1000 / kLayers;
        printf("  %-14s %-28s %7.2f us (GEMM %.2f)  %.2fx   eager GEMM alone %.2f us\n", s.name,
               verlpp::cuda::gemm_config_name(c), us, us - norm_us, base / us, eager);
      }
      CK(cudaFree(a));
      CK(cudaFree(w));
      CK(cudaFree(bias));
      CK(cudaFree(out));
      CK(cudaFree(tmp));
    }
  }
  cublasDestroy(handle);
  return 0;
}

}  // namespace

// One call of configuration `config` on shape `shape` (an index of kShapes) at m rows, for a
// profiler (ncu) to look at.
int one(int config, int shape, int64_t m) {
  const Shape& s = kShapes[shape];
  const int64_t wr = weight_rows(s);
  __nv_bfloat16 *a, *w, *out;
  CK(cudaMalloc(&a, m * s.k * 2));
  CK(cudaMalloc(&w, wr * s.k * 2));
  CK(cudaMalloc(&out, m * s.n * 2));
  fill(a, m * s.k, 1, 1.0f);
  fill(w, wr * s.k, 2, 0.03f);
  for (int r = 0; r < 3; ++r)
    CK(verlpp::cuda::launch_gemm_config(config, a, s.k, w, s.k, nullptr, out, s.n, m, s.n, s.k, s.n, nullptr));
  CK(cudaDeviceSynchronize());
  printf("%s %s m=%lld done\n", s.name, verlpp::cuda::gemm_config_name(config), (long long)m);
  return 0;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "time";
  if (mode == "check") return check();
  if (mode == "time") return time_all();
  if (mode == "one") {
    const int configs = verlpp::cuda::gemm_config_count(), shapes = int(sizeof(kShapes) / sizeof(kShapes[0]));
    const int config = argc > 2 ? std::atoi(argv[2]) : -1, shape = argc > 3 ? std::atoi(argv[3]) : -1;
    const int64_t m = argc > 4 ? parse_rows(argv[4]) : 256;
    if (config < 0 || config >= configs || shape < 0 || shape >= shapes || m < 0) {
      printf(
          "usage: verlpp-gemm-mma-experiment one CONFIG SHAPE [ROWS]: CONFIG in [0, %d), SHAPE in [0, %d) (qkv, o, "
          "gate_up+silu, "
          "down), ROWS in [1, %lld]\n",
          configs, shapes, (long long)kMaxRows);
      return 2;
    }
    if (verlpp::cuda::gemm_config_silu(config) != kShapes[shape].silu) {
      printf("verlpp-gemm-mma-experiment one: configuration %d (%s) does not serve shape %s\n", config,
             verlpp::cuda::gemm_config_name(config), kShapes[shape].name);
      return 2;
    }
    return one(config, shape, m);
  }
  printf("usage: verlpp-gemm-mma-experiment [check | time | one CONFIG SHAPE [ROWS]]; unknown mode \"%s\"\n",
         mode.c_str());
  return 2;
}
