// cuda: the RMSNorm and RoPE kernels and their launchers (the log-prob kernels are in
// logprob_kernels.cu). One thread block per row (per token for RoPE), fp32 math; RMSNorm makes
// two passes over the row (sum of squares, then the scaled values) in cpu_ref's order, so
// results agree to fp32 rounding. RoPE rounds each product with __fmul_rn (never contracted into an
// FMA) because the host model rounds every op. Rows are independent (grid.x up to 2^31 - 1).
#include "block_reduce.cuh"
#include "kernels.hpp"

#include "gpu_device.cuh"

#include <cmath>

namespace verlpp::cuda {
namespace {

// grid.x = n rows, block = kThreads.
template <class T>
__global__ void __launch_bounds__(kThreads)
rms_norm_kernel(const T* __restrict__ x,       // [n, d]
                const T* __restrict__ weight,  // [d]
                int64_t d, float eps,
                T* __restrict__ out) {  // [n, d]
  __shared__ float scratch[kWarps];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * d;
  T* outr = out + row * d;
  float local = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += kThreads) {
    float value = to_float(xr[j]);
    local += value * value;
  }
  const float sum_squares = block_reduce(local, SumOp{}, 0.0f, scratch);
  const float inv = 1.0f / sqrtf(sum_squares / float(d) + eps);
  for (int64_t j = threadIdx.x; j < d; j += kThreads) {
    // Round the normalised value to T before the weight, as HF's RMSNorm does.
    float normed = to_float(from_float<T>(to_float(xr[j]) * inv));
    outr[j] = from_float<T>(to_float(weight[j]) * normed);
  }
}

// `x` rounded to T and read back as fp32 (identity for float).
template <class T>
__device__ __forceinline__ float round_to(float x) { return to_float(from_float<T>(x)); }

// grid.x = n tokens, block = kThreads, dynamic shared memory 2 * half floats.
template <class T>
__global__ void __launch_bounds__(kThreads)
rotary_kernel(T* __restrict__ q, int64_t hq,  // [n, hq, 2 half] or NULL
              T* __restrict__ k, int64_t hk,  // [n, hk, 2 half] or NULL
              int64_t half,
              const int64_t* __restrict__ positions,  // [n]
              const float* __restrict__ inv_freq) {   // [half]
#if defined(__clang__)
#pragma clang fp contract(off)  // HIP's __fmul_rn is a plain multiply, which clang would fuse
#endif
  extern __shared__ float cos_sin[];  // cos [half], then sin [half], rounded to T
  const int64_t token = blockIdx.x;
  const float position = float(positions[token]);
  for (int64_t j = threadIdx.x; j < half; j += kThreads) {
    double s, c;
    sincos(double(__fmul_rn(position, inv_freq[j])), &s, &c);
    cos_sin[j] = round_to<T>(float(c));
    cos_sin[half + j] = round_to<T>(float(s));
  }
  __syncthreads();
  const int64_t heads_q = q != nullptr ? hq : 0, heads_k = k != nullptr ? hk : 0;
  for (int64_t i = threadIdx.x; i < (heads_q + heads_k) * half; i += kThreads) {
    const int64_t head = i / half, j = i % half;
    T* x = head < heads_q ? q + (token * hq + head) * 2 * half : k + (token * hk + head - heads_q) * 2 * half;
    const float a = to_float(x[j]), b = to_float(x[j + half]), c = cos_sin[j], s = cos_sin[half + j];
    x[j] = from_float<T>(__fsub_rn(round_to<T>(__fmul_rn(a, c)), round_to<T>(__fmul_rn(b, s))));
    x[j + half] = from_float<T>(__fadd_rn(round_to<T>(__fmul_rn(b, c)), round_to<T>(__fmul_rn(a, s))));
  }
}

template <class T>
gpuError_t rotary_as(void* q, int64_t hq, void* k, int64_t hk, int64_t n, int64_t half, const int64_t* positions,
                      const float* inv_freq, gpuStream_t stream) {
  const size_t shared = size_t(2 * half) * sizeof(float);
  rotary_kernel<T><<<dim3(unsigned(n)), kThreads, shared, stream>>>(static_cast<T*>(q), hq, static_cast<T*>(k), hk, half,
                                                                    positions, inv_freq);
  return gpuGetLastError();
}

template <class T>
gpuError_t rms_norm_as(const void* x, const void* weight, int64_t n, int64_t d, float eps, void* out, gpuStream_t stream) {
  rms_norm_kernel<T><<<dim3(unsigned(n)), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(weight), d,
                                                                 eps, static_cast<T*>(out));
  return gpuGetLastError();
}

}  // namespace

gpuError_t launch_rms_norm(const void* x, const void* weight, FloatType type, int64_t n, int64_t d, float eps, void* out,
                            gpuStream_t stream) {
  if (n == 0 || d == 0) return gpuSuccess;
  if (n > 0x7fffffff) return gpuErrorInvalidConfiguration;
  switch (type) {
    case FloatType::f32: return rms_norm_as<float>(x, weight, n, d, eps, out, stream);
    case FloatType::f16: return rms_norm_as<__half>(x, weight, n, d, eps, out, stream);
    case FloatType::bf16: return rms_norm_as<gpu_bfloat16>(x, weight, n, d, eps, out, stream);
  }
  return gpuErrorInvalidValue;
}

gpuError_t launch_rotary_embedding(void* q, int64_t hq, void* k, int64_t hk, FloatType type, int64_t n, int64_t half,
                                    const int64_t* positions, const float* inv_freq, gpuStream_t stream) {
  if (n == 0 || half == 0 || (q == nullptr && k == nullptr)) return gpuSuccess;
  if (n > 0x7fffffff || half > 4096) return gpuErrorInvalidConfiguration;
  switch (type) {
    case FloatType::f32: return rotary_as<float>(q, hq, k, hk, n, half, positions, inv_freq, stream);
    case FloatType::f16: return rotary_as<__half>(q, hq, k, hk, n, half, positions, inv_freq, stream);
    case FloatType::bf16: return rotary_as<gpu_bfloat16>(q, hq, k, hk, n, half, positions, inv_freq, stream);
  }
  return gpuErrorInvalidValue;
}

}  // namespace verlpp::cuda
