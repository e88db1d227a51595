// cuda: ABI 1.3's decode-step fusion rotary_kv_store and its launcher (add_rms_norm, the other
// 1.3 fusion, shares rms_norm's kernel in rms_norm_kernels.cu), and the unfused form of 1.5's
// rotary_paged_attention_decode (rotary_kv_store, then the attention) for what the fused
// tensor-core kernel of attention_mma_kernel.cu does not take. It replaces several launches of
// a decode step with one, and rounds exactly where the kernels it replaces round, through the
// shared per-element math of layer_ops.cuh:
//  - rotary_kv_store: RoPE on q and k, and the paged-cache stores of k and v, in place of a
//    rotary_embedding and two index_copy_ launches. One block per token: the token's cos/sin
//    (S/2 fp64 sincos, as rotary_kernel) go to shared memory once, then each thread rotates
//    16-byte packs of pairs (8 bf16/f16 values of x_j and 8 of x_{j+S/2}) or copies a 16-byte
//    pack of v. At Qwen2.5-0.5B's decode shape (H = 14, K = 2, S = 64) that is 64 rotation packs
//    and 16 copy packs per token, on 96 threads.
#include "dependent_launch.cuh"
#include "block_reduce.cuh"
#include "kernels.hpp"
#include "layer_ops.cuh"
#include "workspace_pool.hpp"

#include "gpu_device.cuh"

#include <cstdint>

namespace verlpp::cuda {
namespace {

// Sizes of one rotary_kv_store call, in elements.
struct KvStoreShape {
  int32_t q_heads, kv_heads, half;  // H, K, S/2
  int32_t pair_packs, packs;        // per token: packs of VEC pairs (q and k heads), then all packs (+ v's)
  int64_t slots;                    // num_blocks * block_size: a slot outside [0, slots) is skipped
  int64_t q_stride, k_stride, v_stride;
};

// grid.x = n tokens, block = a multiple of 32 up to kThreads, dynamic shared memory 2 * half
// floats. Packs of VEC values: VEC = 16 bytes / sizeof(T) where every row and base allows, else 1.
template <class T, int VEC>
__global__ void __launch_bounds__(kThreads)
    rotary_kv_store_kernel(const T* __restrict__ q,  // [n, H, S] at row stride q_stride
                           const T* __restrict__ k,  // [n, K, S] at k_stride
                           const T* __restrict__ v,  // [n, K, S] at v_stride
                           const int64_t* __restrict__ positions, const float* __restrict__ inv_freq,
                           const int64_t* __restrict__ slot_mapping,
                           T* __restrict__ q_out,    // [n, H, S]
                           T* __restrict__ k_cache,  // [slots, K, S]
                           T* __restrict__ v_cache, KvStoreShape shape) {
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
  using P = Pack<T, VEC>;
  extern __shared__ float cos_sin[];  // cos [half], then sin [half], rounded to T
  const int64_t token = blockIdx.x;
  const int32_t half = shape.half, s = 2 * half, per_half = half / VEC;
  const float position = float(positions[token]);
  for (int32_t j = threadIdx.x; j < half; j += blockDim.x)
    rope_cos_sin<T>(position, inv_freq[j], cos_sin[j], cos_sin[half + j]);
  // A slot the plugin cannot refuse (it lives on the device) that is out of range is skipped:
  // the token's q is still rotated, its k and v stored nowhere.
  const int64_t slot = slot_mapping[token];
  const bool stores = slot >= 0 && slot < shape.slots;
  const int64_t cache_row = (stores ? slot : 0) * int64_t(shape.kv_heads) * s;
  __syncthreads();
  for (int32_t i = threadIdx.x; i < shape.packs; i += blockDim.x) {
    if (i >= shape.pair_packs) {  // v: a pack of the token's K * S dense values, copied
      const int32_t e = (i - shape.pair_packs) * VEC;
      if (stores)
        *reinterpret_cast<P*>(v_cache + cache_row + e) = *reinterpret_cast<const P*>(v + token * shape.v_stride + e);
      continue;
    }
    const int32_t head = i / per_half, j = (i % per_half) * VEC;
    const T* in;
    T* out;
    if (head < shape.q_heads) {
      in = q + token * shape.q_stride + head * s;
      out = q_out + (token * shape.q_heads + head) * s;
    } else {
      if (!stores) continue;
      in = k + token * shape.k_stride + (head - shape.q_heads) * s;
      out = k_cache + cache_row + (head - shape.q_heads) * s;
    }
    const P lo = *reinterpret_cast<const P*>(in + j), hi = *reinterpret_cast<const P*>(in + j + half);
    P new_lo, new_hi;
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      rotate_pair<T>(to_float(lo.v[e]), to_float(hi.v[e]), cos_sin[j + e], cos_sin[half + j + e], new_lo.v[e],
                     new_hi.v[e]);
    *reinterpret_cast<P*>(out + j) = new_lo;
    *reinterpret_cast<P*>(out + j + half) = new_hi;
  }
}

// Whether 16-byte packs fit: half a head in whole packs (then S and every cache row too), every
// base 16-byte aligned and every row stride in whole packs.
template <class T>
bool packs_fit(const RotaryKvStoreOperands& o) {
  constexpr int64_t kVec = 16 / sizeof(T);
  if (o.half % kVec != 0) return false;
  for (const void* p : {o.q, o.k, o.v, static_cast<const void*>(o.q_out), static_cast<const void*>(o.k_cache),
                        static_cast<const void*>(o.v_cache)})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return o.q_row_stride % kVec == 0 && o.k_row_stride % kVec == 0 && o.v_row_stride % kVec == 0;
}

template <class T, int VEC>
gpuError_t rotary_kv_store_as(const RotaryKvStoreOperands& o, gpuStream_t stream) {
  KvStoreShape shape{};
  shape.q_heads = int32_t(o.q_heads);
  shape.kv_heads = int32_t(o.kv_heads);
  shape.half = int32_t(o.half);
  shape.pair_packs = int32_t((o.q_heads + o.kv_heads) * o.half / VEC);
  shape.packs = shape.pair_packs + int32_t(o.kv_heads * 2 * o.half / VEC);
  shape.slots = o.slots;
  shape.q_stride = o.q_row_stride;
  shape.k_stride = o.k_row_stride;
  shape.v_stride = o.v_row_stride;
  // Enough warps for every pack (or every cos/sin) of a token at once, at most kThreads.
  const int32_t work = shape.packs > shape.half ? shape.packs : shape.half;
  const int32_t threads = work >= kThreads ? kThreads : ((work + 31) / 32) * 32;
  const size_t shared = size_t(2 * o.half) * sizeof(float);
  return launch_kernel(rotary_kv_store_kernel<T, VEC>, dim3(unsigned(o.tokens)), threads, shared, stream,
                       static_cast<const T*>(o.q), static_cast<const T*>(o.k), static_cast<const T*>(o.v), o.positions,
                       o.inv_freq, o.slot_mapping, static_cast<T*>(o.q_out), static_cast<T*>(o.k_cache),
                       static_cast<T*>(o.v_cache), shape);
}

template <class T>
gpuError_t rotary_kv_store_packed(const RotaryKvStoreOperands& o, gpuStream_t stream) {
  if (packs_fit<T>(o)) return rotary_kv_store_as<T, 16 / sizeof(T)>(o, stream);
  return rotary_kv_store_as<T, 1>(o, stream);
}

}  // namespace

gpuError_t launch_rotary_kv_store(const RotaryKvStoreOperands& o, FloatType type, gpuStream_t stream) {
  if (o.tokens == 0 || o.half == 0) return gpuSuccess;
  // One block per token; a token's packs are counted in 32-bit ints.
  if (o.tokens > 0x7fffffff || o.half > kMaxRotaryHalf || (o.q_heads + 2 * o.kv_heads) * 2 * o.half > 0x7fffffff)
    return gpuErrorInvalidConfiguration;
  switch (type) {
    case FloatType::f32:
      return rotary_kv_store_packed<float>(o, stream);
    case FloatType::f16:
      return rotary_kv_store_packed<__half>(o, stream);
    case FloatType::bf16:
      return rotary_kv_store_packed<gpu_bfloat16>(o, stream);
  }
  return gpuErrorInvalidValue;
}

gpuError_t launch_rotary_then_attention(const RotaryKvStoreOperands& o, FloatType type, const int32_t* block_tables,
                                        const int32_t* context_lens, int64_t block_size, int64_t max_blocks,
                                        float scale, void* out, gpuStream_t stream) {
  if (o.tokens == 0) return gpuSuccess;
  int device = 0;
  if (gpuGetDevice(&device) != gpuSuccess) return gpuGetLastError();
  const WorkspacePool state = workspace_pool(device);
  if (state.pool == nullptr) return gpuErrorNotSupported;
  const size_t elem = type == FloatType::f32 ? 4 : 2;
  void* q_rotated = nullptr;  // [B, H, S], in stream order, so the call stays asynchronous and capturable
  gpuError_t status =
      gpuMallocFromPoolAsync(&q_rotated, size_t(o.tokens * o.q_heads * 2 * o.half) * elem, state.pool, stream);
  if (status != gpuSuccess) return status;
  RotaryKvStoreOperands with_copy = o;
  with_copy.q_out = q_rotated;
  status = launch_rotary_kv_store(with_copy, type, stream);
  if (status == gpuSuccess)
    status =
        launch_paged_attention_decode(q_rotated, o.k_cache, o.v_cache, type, block_tables, context_lens, o.tokens,
                                      o.q_heads, o.kv_heads, 2 * o.half, block_size, max_blocks, scale, out, stream);
  const gpuError_t freed = gpuFreeAsync(q_rotated, stream);
  return status != gpuSuccess ? status : freed;
}

}  // namespace verlpp::cuda
