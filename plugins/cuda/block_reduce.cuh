// cuda: device helpers shared by the kernels: the fixed block size, dtype conversions, 16-byte
// packs and a block-wide reduction. Included only by .cu files.
#pragma once

#include "gpu_device.cuh"

namespace verlpp::cuda {

constexpr int kThreads = 256;  // a multiple of 32: every warp is full for the shuffles below
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(gpu_bfloat16 x) { return gpu_bfloat162float(x); }

// VEC values of T loaded and stored as one piece (a 16-byte vector when VEC * sizeof(T) is 16).
template <class T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ gpu_bfloat16 from_float<gpu_bfloat16>(float x) {
  return gpu_float2bfloat16_rn(x);
}

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
// The larger / smaller of two ordered values (integers: MaxOp is fmaxf, which skips NaN).
struct LargerOp {
  template <class V>
  __device__ V operator()(V a, V b) const {
    return a > b ? a : b;
  }
};
struct SmallerOp {
  template <class V>
  __device__ V operator()(V a, V b) const {
    return a < b ? a : b;
  }
};
struct SumOp {
  template <class V>
  __device__ V operator()(V a, V b) const {
    return a + b;
  }
};

// Reduces `value` over the block; every thread gets the result. `scratch` holds kWarps values
// and may be reused by the next call (the leading barrier protects earlier readers).
template <class V, class Op>
__device__ V block_reduce(V value, Op op, V identity, V* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) value = op(value, gpu_shfl_xor(value, offset));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < kWarps ? scratch[lane] : identity;
    for (int offset = 16; offset > 0; offset >>= 1) value = op(value, gpu_shfl_xor(value, offset));
    if (lane == 0) scratch[0] = value;
  }
  __syncthreads();
  return scratch[0];
}

}  // namespace verlpp::cuda
