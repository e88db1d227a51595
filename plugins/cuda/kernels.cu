// cuda: the RoPE kernel and its launcher (RMSNorm is in rms_norm_kernels.cu, the log-prob
// kernels in logprob_kernels.cu). One thread block per token, fp32 math. RoPE rounds each product with __fmul_rn (never
// contracted into an FMA) because the host model rounds every op. Rows are independent (grid.x up to 2^31 - 1). The
// per-element math lives in layer_ops.cuh, shared with the 1.3 fusions (decode_fusion_kernels.cu).
#include "dependent_launch.cuh"
#include "block_reduce.cuh"
#include "kernels.hpp"
#include "layer_ops.cuh"

#include "gpu_device.cuh"

#include <cmath>

namespace verlpp::cuda {
namespace {

// grid.x = n tokens, block = kThreads, dynamic shared memory 2 * half floats. The cos/sin and
// the rotation are layer_ops.cuh's, which rotary_kv_store_kernel shares.
template <class T>
__global__ void __launch_bounds__(kThreads) rotary_kernel(T* __restrict__ q, int64_t hq,  // [n, hq, 2 half] or NULL
                                                          T* __restrict__ k, int64_t hk,  // [n, hk, 2 half] or NULL
                                                          int64_t half,
                                                          const int64_t* __restrict__ positions,  // [n]
                                                          const float* __restrict__ inv_freq) {   // [half]
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
  extern __shared__ float cos_sin[];  // cos [half], then sin [half], rounded to T
  const int64_t token = blockIdx.x;
  const float position = float(positions[token]);
  for (int64_t j = threadIdx.x; j < half; j += kThreads)
    rope_cos_sin<T>(position, inv_freq[j], cos_sin[j], cos_sin[half + j]);
  __syncthreads();
  const int64_t heads_q = q != nullptr ? hq : 0, heads_k = k != nullptr ? hk : 0;
  for (int64_t i = threadIdx.x; i < (heads_q + heads_k) * half; i += kThreads) {
    const int64_t head = i / half, j = i % half;
    T* x = head < heads_q ? q + (token * hq + head) * 2 * half : k + (token * hk + head - heads_q) * 2 * half;
    rotate_pair<T>(to_float(x[j]), to_float(x[j + half]), cos_sin[j], cos_sin[half + j], x[j], x[j + half]);
  }
}

template <class T>
gpuError_t rotary_as(void* q, int64_t hq, void* k, int64_t hk, int64_t n, int64_t half, const int64_t* positions,
                     const float* inv_freq, gpuStream_t stream) {
  const size_t shared = size_t(2 * half) * sizeof(float);
  return launch_kernel(rotary_kernel<T>, dim3(unsigned(n)), kThreads, shared, stream, static_cast<T*>(q), hq,
                       static_cast<T*>(k), hk, half, positions, inv_freq);
}

}  // namespace

gpuError_t launch_rotary_embedding(void* q, int64_t hq, void* k, int64_t hk, FloatType type, int64_t n, int64_t half,
                                   const int64_t* positions, const float* inv_freq, gpuStream_t stream) {
  if (n == 0 || half == 0 || (q == nullptr && k == nullptr)) return gpuSuccess;
  if (n > 0x7fffffff || half > 4096) return gpuErrorInvalidConfiguration;
  switch (type) {
    case FloatType::f32:
      return rotary_as<float>(q, hq, k, hk, n, half, positions, inv_freq, stream);
    case FloatType::f16:
      return rotary_as<__half>(q, hq, k, hk, n, half, positions, inv_freq, stream);
    case FloatType::bf16:
      return rotary_as<gpu_bfloat16>(q, hq, k, hk, n, half, positions, inv_freq, stream);
  }
  return gpuErrorInvalidValue;
}

}  // namespace verlpp::cuda
