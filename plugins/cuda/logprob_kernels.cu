// cuda: the log-prob kernels of training's LM head, forward (logprob_entropy) and backward
// (logprob_backward, ABI 1.2), and their launchers. Both stream [rows x vocabulary] logits
// (151,936 columns for Qwen), so they are bound by memory bandwidth and written for it:
//  - one thread block per row, rows read as 16-byte vectors (8 bf16/f16 or 4 f32 values), four
//    vectors in flight per thread; a row that does not start on a 16-byte boundary takes scalar
//    loads up to the first boundary (and for the tail);
//  - the forward reads each row once: every thread keeps an online (max, sum of exp, sum of
//    exp * shifted value) and the block merges them (flash attention's rescaling);
//  - the backward reads each logit once and writes its gradient once, in the logits' dtype,
//    in place when asked (the trainer recomputes a chunk's logits and overwrites them).
// fp32 math throughout. The order of the sums differs from cpu_ref's loops: results agree to
// fp32 rounding, which the conformance suite's tolerance admits.
#include "dependent_launch.cuh"
#include "block_reduce.cuh"
#include "kernels.hpp"

#include "gpu_device.cuh"

#include <cmath>
#include <cstdint>

namespace verlpp::cuda {
namespace {

constexpr int kInFlight = 4;  // 16-byte vectors each thread loads before using any

template <class T>
constexpr int kVec = 16 / int(sizeof(T));

// The raw 16 bytes of a vector, and its element e as fp32.
template <class T>
__device__ __forceinline__ float vec_element(const uint4& raw, int e) {
  if constexpr (sizeof(T) == 4) {
    const uint32_t w = e == 0 ? raw.x : e == 1 ? raw.y : e == 2 ? raw.z : raw.w;
    return __uint_as_float(w);
  } else {
    const uint32_t w = (e / 2) == 0 ? raw.x : (e / 2) == 1 ? raw.y : (e / 2) == 2 ? raw.z : raw.w;
    const uint16_t bits = static_cast<uint16_t>(e % 2 == 0 ? w & 0xffffu : w >> 16);
    T value;
    memcpy(&value, &bits, 2);
    return to_float(value);
  }
}

// Elements before the first 16-byte boundary of a row starting at `p` (at most v).
template <class T>
__device__ __forceinline__ int64_t scalar_head(const T* p, int64_t v) {
  const int64_t misaligned = int64_t(reinterpret_cast<uintptr_t>(p) % 16) / int64_t(sizeof(T));
  const int64_t head = misaligned == 0 ? 0 : kVec<T> - misaligned;
  return head < v ? head : v;
}

// Calls f(i, raw) for every 16-byte vector i < nvec of xv, spread over the block, with the
// kInFlight loads of a thread issued before the first use. Shared by the forward (which reads
// the vectors) and the backward (which also writes a vector per vector read).
template <class F>
__device__ __forceinline__ void for_each_vector(const uint4* xv, int64_t nvec, F&& f) {
  for (int64_t i0 = threadIdx.x; i0 < nvec; i0 += int64_t(kThreads) * kInFlight) {
    uint4 raw[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int64_t i = i0 + int64_t(u) * kThreads;
      if (i < nvec) raw[u] = xv[i];
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int64_t i = i0 + int64_t(u) * kThreads;
      if (i >= nvec) break;
      f(i, raw[u]);
    }
  }
}

// Calls f(j, x[j] as fp32) once for every j < v, spread over the block: scalar head, vectors,
// scalar tail.
template <class T, class F>
__device__ __forceinline__ void for_each_in_row(const T* x, int64_t v, F&& f) {
  const int64_t head = scalar_head(x, v);
  for (int64_t j = threadIdx.x; j < head; j += kThreads) f(j, to_float(x[j]));
  const int64_t nvec = (v - head) / kVec<T>;
  for_each_vector(reinterpret_cast<const uint4*>(x + head), nvec, [&](int64_t i, const uint4& raw) {
#pragma unroll
    for (int e = 0; e < kVec<T>; ++e) f(head + i * kVec<T> + e, vec_element<T>(raw, e));
  });
  for (int64_t j = head + nvec * kVec<T> + threadIdx.x; j < v; j += kThreads) f(j, to_float(x[j]));
}

// An online softmax state: max m, s = sum exp(z - m), w = sum exp(z - m) (z - m).
struct Online {
  float m = -INFINITY, s = 0.0f, w = 0.0f;

  // Re-expresses the sums relative to a larger max `to`.
  __device__ __forceinline__ void shift_to(float to) {
    if (m == -INFINITY) {  // nothing seen yet: s = w = 0 (and 0 * -inf would be NaN)
      m = to;
      return;
    }
    const float f = expf(m - to);
    w = f * (w + s * (m - to));
    s *= f;
    m = to;
  }
  __device__ __forceinline__ void add(float z) {
    if (z > m) shift_to(z);
    const float d = z - m, e = expf(d);
    s += e;
    w += e * d;
  }
  __device__ __forceinline__ void merge(Online o) {
    if (o.m == -INFINITY) return;
    if (o.m > m) shift_to(o.m);
    o.shift_to(m);
    s += o.s;
    w += o.w;
  }
};

// The block's merged state, to every thread (fixed merge order: deterministic).
__device__ Online block_merge(Online x, float* scratch /* 3 * kWarps */) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    Online o;
    o.m = gpu_shfl_xor(x.m, offset);
    o.s = gpu_shfl_xor(x.s, offset);
    o.w = gpu_shfl_xor(x.w, offset);
    x.merge(o);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    scratch[warp] = x.m;
    scratch[kWarps + warp] = x.s;
    scratch[2 * kWarps + warp] = x.w;
  }
  __syncthreads();
  Online all;
  for (int w = 0; w < kWarps; ++w) {
    Online o;
    o.m = scratch[w];
    o.s = scratch[kWarps + w];
    o.w = scratch[2 * kWarps + w];
    all.merge(o);
  }
  return all;
}

// grid.x = n rows, block = kThreads.
template <class T>
__global__ void __launch_bounds__(kThreads)
    logprob_entropy_kernel(const T* __restrict__ logits, int64_t v, int64_t row_stride,  // [n, v]
                           const int64_t* __restrict__ labels,                           // [n]
                           float temperature,
                           float* __restrict__ out_logprob,    // [n]
                           float* __restrict__ out_entropy) {  // [n] or NULL
  wait_for_prior_grids();                                      // before any memory access (dependent_launch.cuh)
  allow_dependents();
  __shared__ float scratch[3 * kWarps];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * row_stride;
  Online local;
  for_each_in_row(x, v, [&](int64_t, float value) { local.add(value / temperature); });
  const Online all = block_merge(local, scratch);
  if (threadIdx.x == 0) {
    const float log_sum = logf(all.s);
    const int64_t label = labels[row];
    // log p = z_label - (m + log s); entropy = log s - E_p[z - m].
    out_logprob[row] = (label >= 0 && label < v) ? to_float(x[label]) / temperature - all.m - log_sum : NAN;
    if (out_entropy != nullptr) out_entropy[row] = log_sum - all.w / all.s;
  }
}

// What one row's backward needs.
struct RowGrad {
  float lse, g_lp, mean_z, g_ent, temperature;
  int64_t label;
  // Divisions, not products with 1 / T: z is then the host's logits / T to the bit.
  __device__ __forceinline__ float operator()(int64_t j, float logit) const {
    const float z = logit / temperature, p = expf(z - lse);
    const float g = g_lp * ((j == label ? 1.0f : 0.0f) - p) - g_ent * p * (z - mean_z);
    return g / temperature;
  }
};

// grid.x = n rows, block = kThreads. `out` may be `logits` (same row stride): every element is
// read by the thread that writes it, before it writes it.
template <class T>
__global__ void __launch_bounds__(kThreads)
    logprob_backward_kernel(const T* logits, int64_t v, int64_t row_stride, const int64_t* __restrict__ labels,
                            const float* __restrict__ lse, const float* __restrict__ grad_logprob,
                            const float* __restrict__ mean_z, const float* __restrict__ grad_entropy, float temperature,
                            T* out, int64_t out_row_stride) {
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
  const int64_t row = blockIdx.x;
  const T* x = logits + row * row_stride;
  T* y = out + row * out_row_stride;
  RowGrad grad{lse[row],
               grad_logprob != nullptr ? grad_logprob[row] : 0.0f,
               mean_z != nullptr ? mean_z[row] : 0.0f,
               grad_entropy != nullptr ? grad_entropy[row] : 0.0f,
               temperature,
               labels[row]};
  if (grad.label < 0 || grad.label >= v) grad.lse = NAN;  // a bad label poisons its row (no host check here)
  const int64_t head = scalar_head(x, v);
  if (head != scalar_head(y, v)) {  // in and out misaligned differently: scalar throughout
    for (int64_t j = threadIdx.x; j < v; j += kThreads) y[j] = from_float<T>(grad(j, to_float(x[j])));
    return;
  }
  for (int64_t j = threadIdx.x; j < head; j += kThreads) y[j] = from_float<T>(grad(j, to_float(x[j])));
  const int64_t nvec = (v - head) / kVec<T>;
  uint4* yv = reinterpret_cast<uint4*>(y + head);
  for_each_vector(reinterpret_cast<const uint4*>(x + head), nvec, [&](int64_t i, const uint4& raw) {
    alignas(16) T packed[kVec<T>];
#pragma unroll
    for (int e = 0; e < kVec<T>; ++e) packed[e] = from_float<T>(grad(head + i * kVec<T> + e, vec_element<T>(raw, e)));
    yv[i] = *reinterpret_cast<const uint4*>(packed);
  });
  for (int64_t j = head + nvec * kVec<T> + threadIdx.x; j < v; j += kThreads)
    y[j] = from_float<T>(grad(j, to_float(x[j])));
}

template <class T>
gpuError_t logprob_entropy_as(const void* logits, int64_t n, int64_t v, int64_t row_stride, const int64_t* labels,
                              float temperature, float* out_logprob, float* out_entropy, gpuStream_t stream) {
  return launch_kernel(logprob_entropy_kernel<T>, dim3(unsigned(n)), kThreads, 0, stream, static_cast<const T*>(logits),
                       v, row_stride, labels, temperature, out_logprob, out_entropy);
}

template <class T>
gpuError_t logprob_backward_as(const void* logits, int64_t n, int64_t v, int64_t row_stride, const int64_t* labels,
                               const float* lse, const float* grad_logprob, const float* mean_z,
                               const float* grad_entropy, float temperature, void* out, int64_t out_row_stride,
                               gpuStream_t stream) {
  return launch_kernel(logprob_backward_kernel<T>, dim3(unsigned(n)), kThreads, 0, stream,
                       static_cast<const T*>(logits), v, row_stride, labels, lse, grad_logprob, mean_z, grad_entropy,
                       temperature, static_cast<T*>(out), out_row_stride);
}

}  // namespace

gpuError_t launch_logprob_entropy(const void* logits, FloatType type, int64_t n, int64_t v, int64_t row_stride,
                                  const int64_t* labels, float temperature, float* out_logprob, float* out_entropy,
                                  gpuStream_t stream) {
  if (n == 0) return gpuSuccess;
  if (n > 0x7fffffff) return gpuErrorInvalidConfiguration;
  switch (type) {
    case FloatType::f32:
      return logprob_entropy_as<float>(logits, n, v, row_stride, labels, temperature, out_logprob, out_entropy, stream);
    case FloatType::f16:
      return logprob_entropy_as<__half>(logits, n, v, row_stride, labels, temperature, out_logprob, out_entropy,
                                        stream);
    case FloatType::bf16:
      return logprob_entropy_as<gpu_bfloat16>(logits, n, v, row_stride, labels, temperature, out_logprob, out_entropy,
                                              stream);
  }
  return gpuErrorInvalidValue;
}

gpuError_t launch_logprob_backward(const void* logits, FloatType type, int64_t n, int64_t v, int64_t row_stride,
                                   const int64_t* labels, const float* lse, const float* grad_logprob,
                                   const float* mean_z, const float* grad_entropy, float temperature, void* out,
                                   int64_t out_row_stride, gpuStream_t stream) {
  if (n == 0 || v == 0) return gpuSuccess;
  if (n > 0x7fffffff) return gpuErrorInvalidConfiguration;
  switch (type) {
    case FloatType::f32:
      return logprob_backward_as<float>(logits, n, v, row_stride, labels, lse, grad_logprob, mean_z, grad_entropy,
                                        temperature, out, out_row_stride, stream);
    case FloatType::f16:
      return logprob_backward_as<__half>(logits, n, v, row_stride, labels, lse, grad_logprob, mean_z, grad_entropy,
                                         temperature, out, out_row_stride, stream);
    case FloatType::bf16:
      return logprob_backward_as<gpu_bfloat16>(logits, n, v, row_stride, labels, lse, grad_logprob, mean_z,
                                               grad_entropy, temperature, out, out_row_stride, stream);
  }
  return gpuErrorInvalidValue;
}

}  // namespace verlpp::cuda
