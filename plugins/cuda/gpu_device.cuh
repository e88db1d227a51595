// The device-side half of the portability layer (see gpu_runtime.hpp): half/bfloat16 types and
// the warp shuffle, for .cu files only. The kernels reduce over 32-lane groups ("warps" of 32)
// on every GPU: on AMD's 64-lane wavefronts a shuffle of width 32 with an xor offset below 32
// stays inside its half, so each half is one such group and the block reductions hold unchanged.
// CUDA spells the shuffle exactly as before (__shfl_xor_sync over all 32 lanes).
#pragma once

#include "gpu_runtime.hpp"

#if defined(VERLPP_GPU_HIP) && VERLPP_GPU_HIP
#include <hip/hip_runtime.h>
#include <hip/hip_bfloat16.h>
#include <hip/hip_fp16.h>

// HIP 5.2 has no __nv_bfloat16 intrinsics; hip_bfloat16 converts with round-to-nearest-even,
// as __float2bfloat16_rn does.
using gpu_bfloat16 = hip_bfloat16;
__device__ __forceinline__ float gpu_bfloat162float(gpu_bfloat16 x) { return static_cast<float>(x); }
__device__ __forceinline__ gpu_bfloat16 gpu_float2bfloat16_rn(float x) { return gpu_bfloat16(x); }
#define gpu_shfl_xor(value, offset) __shfl_xor((value), (offset), 32)
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>

using gpu_bfloat16 = __nv_bfloat16;
#define gpu_bfloat162float __bfloat162float
#define gpu_float2bfloat16_rn __float2bfloat16_rn
#define gpu_shfl_xor(value, offset) __shfl_xor_sync(0xffffffffu, (value), (offset))
#endif
