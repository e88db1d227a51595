// cuda: the per-element math of RMSNorm and RoPE, shared by the standalone kernels (kernels.cu)
// and their decode-step fusions (decode_fusion_kernels.cu), so that a fused kernel rounds where,
// and in the order, the standalone one does: ABI 1.3 promises add_rms_norm = rms_norm of the
// rounded sum and rotary_kv_store = rotary_embedding's rotation, bit for bit. Included only by
// .cu files.
#pragma once

#include "block_reduce.cuh"

namespace verlpp::cuda {

// `x` rounded to T and read back as fp32 (identity for float).
template <class T>
__device__ __forceinline__ float round_to(float x) {
  return to_float(from_float<T>(x));
}

// ---- RMSNorm, one thread block of kThreads per row. Thread t owns columns t, t + kThreads, ...
// in both passes; the sum of its squares accumulates in that order (sum_squares_step), and the
// block reduction is fixed, so every kernel built from these pieces gets the same inverse norm.

__device__ __forceinline__ void sum_squares_step(float& local, float value) { local += value * value; }

// 1 / sqrt(mean of squares + eps) from each thread's partial sum; `scratch` holds kWarps floats.
__device__ __forceinline__ float rms_inverse(float local, int64_t d, float eps, float* scratch) {
  const float sum_squares = block_reduce(local, SumOp{}, 0.0f, scratch);
  return 1.0f / sqrtf(sum_squares / float(d) + eps);
}

// out = weight * T(row * inv): the normalised value rounded to T before the weight, as HF's RMSNorm.
template <class T>
__device__ __forceinline__ void rms_scale_row(const T* row, const T* __restrict__ weight, int64_t d, float inv,
                                              T* __restrict__ out) {
  for (int64_t j = threadIdx.x; j < d; j += kThreads) {
    const float normed = round_to<T>(to_float(row[j]) * inv);
    out[j] = from_float<T>(to_float(weight[j]) * normed);
  }
}

// ---- SwiGLU's product, as HF computes act_fn(gate) * up: s = T(silu(gate)) in fp32, then
// s * up (the caller rounds it to T). silu_mul's kernels call it, and so does the decode-GEMM
// experiment's SwiGLU epilogue (experiments/gemm_mma/gemm_mma_experiment.cu), so that the two
// would agree bit for bit on the same gate and up.

__device__ __forceinline__ float silu_f32(float x) { return x / (1.0f + expf(-x)); }

template <class T>
__device__ __forceinline__ float silu_product(float gate, float up) {
  return round_to<T>(silu_f32(gate)) * up;
}

// ---- RoPE, HF's rotate_half layout, with the host model's roundings in type T.

// fp32 operations rounded on their own, never fused into an FMA (the host model rounds every op).
// nvcc keeps __fmul_rn and friends apart. HIP defines them as plain operators in its own headers,
// beyond the reach of a pragma in our code, and clang fused them (v_fma_f32 in the gfx90a code of
// the f32 RoPE kernel); the operators written here, under the pragma, carry no licence to fuse.
#if defined(VERLPP_GPU_HIP) && VERLPP_GPU_HIP
__device__ __forceinline__ float mul_rn(float a, float b) {
#pragma clang fp contract(off)
  return a * b;
}
__device__ __forceinline__ float add_rn(float a, float b) {
#pragma clang fp contract(off)
  return a + b;
}
__device__ __forceinline__ float sub_rn(float a, float b) {
#pragma clang fp contract(off)
  return a - b;
}
#else
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
#endif

// cos and sin of angle = float(position) * inv_freq (one fp32 product, the ABI's rounding),
// computed in fp64 so that they are correctly rounded to fp32, then rounded to T.
template <class T>
__device__ __forceinline__ void rope_cos_sin(float position, float inv_freq, float& c, float& s) {
  double sd, cd;
  sincos(double(mul_rn(position, inv_freq)), &sd, &cd);
  c = round_to<T>(float(cd));
  s = round_to<T>(float(sd));
}

// The pair (a, b) = (x_j, x_{j+S/2}) rotated: lo = T(T(a c) - T(b s)), hi = T(T(b c) + T(a s)).
template <class T>
__device__ __forceinline__ void rotate_pair(float a, float b, float c, float s, T& lo, T& hi) {
  lo = from_float<T>(sub_rn(round_to<T>(mul_rn(a, c)), round_to<T>(mul_rn(b, s))));
  hi = from_float<T>(add_rn(round_to<T>(mul_rn(b, c)), round_to<T>(mul_rn(a, s))));
}

}  // namespace verlpp::cuda
