// cuda: RMSNorm (the rms_norm entry) and the residual add fused with it (ABI 1.3's
// add_rms_norm), and their launchers. Both entries run the same kernel (ADD on or off), so
// add_rms_norm's output is rms_norm's of the rounded sum bit for bit, as ABI 1.3 promises.
//  - Rows of a model's hidden size (d a multiple of 8, up to 2048) take one warp per row: a lane
//    owns chunks of 8 columns (chunk lane, lane + 32, ...), keeps them in registers between the
//    two passes, and the warp sums its squares with xor shuffles (every lane ends with the same
//    bits: each step adds the same two values on both sides). No barrier, no second read of the
//    row. At a decode step ([256, 896] bf16) the block-per-row kernel took 5.1 us a call, a
//    latency chain of scalar loads and block-wide barriers; this is what the add + norm pair of
//    each layer (twice a layer) costs now.
//  - Other rows (d not a multiple of 8, or longer) take one block of kThreads per row, columns
//    strided over the threads (layer_ops.cuh's pieces).
// The sum of squares is fp32; the normalised value is rounded to T before the weight multiply, as
// HF's RMSNorm. The path depends only on d, never on alignment (vector loads are an option
// inside the warp path, which sums in the same order either way), so the two entries always agree.
#include "dependent_launch.cuh"
#include "block_reduce.cuh"
#include "kernels.hpp"
#include "layer_ops.cuh"

#include "gpu_device.cuh"

#include <cstdint>

namespace verlpp::cuda {
namespace {

constexpr int kChunk = 8;        // columns a lane owns together
constexpr int kMaxChunks = 8;    // chunks per lane in registers: d up to 32 * 8 * 8 = 2048
constexpr int kRowThreads = 64;  // two rows per block: at decode sizes more blocks beat fuller ones

template <class T>
using Chunk = Pack<T, kChunk>;

template <class T>
__device__ __forceinline__ void load_chunk(const T* p, bool vec, float (&out)[kChunk]) {
  if (vec) {
    const Chunk<T> c = *reinterpret_cast<const Chunk<T>*>(p);
#pragma unroll
    for (int e = 0; e < kChunk; ++e) out[e] = to_float(c.v[e]);
  } else {
#pragma unroll
    for (int e = 0; e < kChunk; ++e) out[e] = to_float(p[e]);
  }
}

template <class T>
__device__ __forceinline__ void store_chunk(T* p, bool vec, const T (&values)[kChunk]) {
  if (vec) {
    Chunk<T> c;
#pragma unroll
    for (int e = 0; e < kChunk; ++e) c.v[e] = values[e];
    *reinterpret_cast<Chunk<T>*>(p) = c;
  } else {
#pragma unroll
    for (int e = 0; e < kChunk; ++e) p[e] = values[e];
  }
}

// grid.x = ceil(n / rows per block), block = kRowThreads; one warp per row. CHUNKS: chunks per
// lane, at least ceil(d / 8 / 32). ADD: residual = T(residual + x) first and the norm is of
// that (x may be residual itself: each element is read, then written, by one lane).
template <class T, int CHUNKS, bool ADD>
__global__ void __launch_bounds__(kRowThreads)
    rms_norm_warp_kernel(const T* x, T* residual, const T* __restrict__ weight, int64_t n, int d, float eps,
                         T* __restrict__ out, bool vec) {
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * (kRowThreads / 32) + (threadIdx.x >> 5);
  if (row >= n) return;  // a whole warp: row is the same for its lanes
  const T* xr = x + row * d;
  T* rr = ADD ? residual + row * d : nullptr;
  float values[CHUNKS][kChunk];
  float local = 0.0f;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const int col = (lane + 32 * c) * kChunk;
    if (col >= d) break;
    load_chunk(xr + col, vec, values[c]);
    if (ADD) {
      float r[kChunk];
      load_chunk(rr + col, vec, r);
      T sum[kChunk];
#pragma unroll
      for (int e = 0; e < kChunk; ++e) {
        sum[e] = from_float<T>(r[e] + values[c][e]);  // one fp32 add, one rounding
        values[c][e] = to_float(sum[e]);
      }
      store_chunk(rr + col, vec, sum);
    }
#pragma unroll
    for (int e = 0; e < kChunk; ++e) local = __fmaf_rn(values[c][e], values[c][e], local);
  }
  for (int offset = 16; offset > 0; offset >>= 1) local += gpu_shfl_xor(local, offset);
  const float inv = 1.0f / sqrtf(local / float(d) + eps);
  T* outr = out + row * d;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const int col = (lane + 32 * c) * kChunk;
    if (col >= d) break;
    float w[kChunk];
    load_chunk(weight + col, vec, w);
    T o[kChunk];
#pragma unroll
    for (int e = 0; e < kChunk; ++e) o[e] = from_float<T>(w[e] * round_to<T>(values[c][e] * inv));
    store_chunk(outr + col, vec, o);
  }
}

// grid.x = n rows, block = kThreads: rows the warp kernel does not take.
template <class T, bool ADD>
__global__ void __launch_bounds__(kThreads) rms_norm_block_kernel(const T* x, T* residual, const T* __restrict__ weight,
                                                                  int64_t d, float eps, T* __restrict__ out) {
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
  __shared__ float scratch[kWarps];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * d;
  T* rr = ADD ? residual + row * d : nullptr;
  float local = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += kThreads) {
    float value = to_float(xr[j]);
    if (ADD) {
      const T sum = from_float<T>(to_float(rr[j]) + value);
      rr[j] = sum;
      value = to_float(sum);
    }
    sum_squares_step(local, value);
  }
  // Each thread reads back only the columns it wrote: no barrier needed before the second pass.
  rms_scale_row(ADD ? static_cast<const T*>(rr) : xr, weight, d, rms_inverse(local, d, eps, scratch), out + row * d);
}

bool aligned(const void* p, int64_t bytes) { return reinterpret_cast<uintptr_t>(p) % uintptr_t(bytes) == 0; }

template <class T, bool ADD>
gpuError_t rms_norm_as(const void* x, void* residual, const void* weight, int64_t n, int64_t d, float eps, void* out,
                       gpuStream_t stream) {
  const T* xt = static_cast<const T*>(x);
  T* rt = static_cast<T*>(residual);
  const T* wt = static_cast<const T*>(weight);
  T* ot = static_cast<T*>(out);
  const int64_t chunks = (d / kChunk + 31) / 32;
  if (d % kChunk != 0 || chunks > kMaxChunks) {
    return launch_kernel(rms_norm_block_kernel<T, ADD>, dim3(unsigned(n)), kThreads, 0, stream, xt, rt, wt, d, eps, ot);
  }
  // Rows are d values long with d a multiple of 8, so every chunk is aligned once the bases are.
  constexpr int64_t kBytes = int64_t(sizeof(T)) * kChunk;
  const bool vec =
      aligned(x, kBytes) && aligned(weight, kBytes) && aligned(out, kBytes) && (!ADD || aligned(residual, kBytes));
  const dim3 grid(unsigned((n + kRowThreads / 32 - 1) / (kRowThreads / 32)));
  const int di = int(d);
  auto* kernel = chunks <= 1   ? &rms_norm_warp_kernel<T, 1, ADD>
                 : chunks <= 2 ? &rms_norm_warp_kernel<T, 2, ADD>
                 : chunks <= 4 ? &rms_norm_warp_kernel<T, 4, ADD>
                               : &rms_norm_warp_kernel<T, kMaxChunks, ADD>;
  return launch_kernel(kernel, grid, kRowThreads, 0, stream, xt, rt, wt, n, di, eps, ot, vec);
}

template <bool ADD>
gpuError_t launch(const void* x, void* residual, const void* weight, FloatType type, int64_t n, int64_t d, float eps,
                  void* out, gpuStream_t stream) {
  if (n == 0 || d == 0) return gpuSuccess;
  if (n > 0x7fffffff) return gpuErrorInvalidConfiguration;
  switch (type) {
    case FloatType::f32:
      return rms_norm_as<float, ADD>(x, residual, weight, n, d, eps, out, stream);
    case FloatType::f16:
      return rms_norm_as<__half, ADD>(x, residual, weight, n, d, eps, out, stream);
    case FloatType::bf16:
      return rms_norm_as<gpu_bfloat16, ADD>(x, residual, weight, n, d, eps, out, stream);
  }
  return gpuErrorInvalidValue;
}

}  // namespace

gpuError_t launch_rms_norm(const void* x, const void* weight, FloatType type, int64_t n, int64_t d, float eps,
                           void* out, gpuStream_t stream) {
  return launch<false>(x, nullptr, weight, type, n, d, eps, out, stream);
}

gpuError_t launch_add_rms_norm(const void* x, void* residual, const void* weight, FloatType type, int64_t n, int64_t d,
                               float eps, void* out, gpuStream_t stream) {
  return launch<true>(x, residual, weight, type, n, d, eps, out, stream);
}

}  // namespace verlpp::cuda
