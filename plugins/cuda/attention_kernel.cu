// cuda: decode attention over the paged KV cache (one query token per sequence, GQA) and its
// launcher. One thread block per (query head, sequence). The context is walked in chunks of
// kThreads positions: each thread scores one position (q . k * scale, q held in shared memory),
// the block rescales its running softmax (max, sum) as in flash attention, and thread d adds the
// chunk's probability-weighted V column d. fp32 math; the output rounded to the input type.
// Straightforward rather than fast: a split-K (flash-decoding) version is the next step.
#include "block_reduce.cuh"
#include "kernels.hpp"

#include <cmath>
#include <cstdint>

namespace verlpp::cuda {
namespace {

// grid = (H, B), block = kThreads; S <= kThreads (checked by the launcher).
template <class T>
__global__ void __launch_bounds__(kThreads)
paged_attention_decode_kernel(const T* __restrict__ q,               // [B, H, S]
                              const T* __restrict__ k_cache,         // [num_blocks, block_size, K, S]
                              const T* __restrict__ v_cache,         // [num_blocks, block_size, K, S]
                              const int32_t* __restrict__ block_tables,  // [B, max_blocks]
                              const int32_t* __restrict__ context_lens,  // [B]
                              int64_t h_count, int64_t kv_count, int64_t s, int64_t block_size, int64_t max_blocks,
                              float scale,
                              T* __restrict__ out) {                 // [B, H, S]
  __shared__ float q_s[kThreads];
  __shared__ float p_s[kThreads];  // this chunk's scores, then exp(score - running max)
  __shared__ float scratch[kWarps];
  const int64_t head = blockIdx.x, seq = blockIdx.y;
  const int64_t kv = head / (h_count / kv_count);
  const int tid = threadIdx.x;
  if (tid < s) q_s[tid] = to_float(q[(seq * h_count + head) * s + tid]);
  __syncthreads();
  const int64_t len = context_lens[seq];
  const int32_t* table = block_tables + seq * max_blocks;
  // Element offset of (position t, this KV head, dim 0).
  auto row = [&](int64_t t) {
    const int64_t block = table[t / block_size];
    return ((block * block_size + t % block_size) * kv_count + kv) * s;
  };

  float running_max = -INFINITY, running_sum = 0.0f, acc = 0.0f;  // acc: output dim `tid`
  for (int64_t start = 0; start < len; start += kThreads) {
    const int64_t n = len - start < kThreads ? len - start : kThreads;
    float score = -INFINITY;
    if (tid < n) {
      const T* k = k_cache + row(start + tid);
      float dot = 0.0f;
      for (int64_t d = 0; d < s; ++d) dot += q_s[d] * to_float(k[d]);
      score = dot * scale;
    }
    const float chunk_max = block_reduce(score, MaxOp{}, -INFINITY, scratch);
    const float new_max = fmaxf(running_max, chunk_max);
    const float p = tid < n ? expf(score - new_max) : 0.0f;
    p_s[tid] = p;
    const float chunk_sum = block_reduce(p, SumOp{}, 0.0f, scratch);  // its barriers also publish p_s
    const float rescale = expf(running_max - new_max);                 // 0 on the first chunk
    running_sum = running_sum * rescale + chunk_sum;
    if (tid < s) {
      float add = 0.0f;
      for (int64_t t = 0; t < n; ++t) add += p_s[t] * to_float(v_cache[row(start + t) + tid]);
      acc = acc * rescale + add;
    }
    running_max = new_max;
    __syncthreads();  // p_s is rewritten by the next chunk
  }
  if (tid < s) out[(seq * h_count + head) * s + tid] = from_float<T>(len > 0 ? acc / running_sum : 0.0f);
}

template <class T>
gpuError_t attention_as(const void* q, const void* k_cache, const void* v_cache, const int32_t* block_tables,
                         const int32_t* context_lens, int64_t b, int64_t h, int64_t kv, int64_t s, int64_t block_size,
                         int64_t max_blocks, float scale, void* out, gpuStream_t stream) {
  const dim3 grid{static_cast<unsigned>(h), static_cast<unsigned>(b)};
  paged_attention_decode_kernel<T><<<grid, kThreads, 0, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k_cache), static_cast<const T*>(v_cache), block_tables, context_lens, h,
      kv, s, block_size, max_blocks, scale, static_cast<T*>(out));
  return gpuGetLastError();
}

}  // namespace

gpuError_t launch_paged_attention_decode(const void* q, const void* k_cache, const void* v_cache, FloatType type,
                                          const int32_t* block_tables, const int32_t* context_lens, int64_t b, int64_t h,
                                          int64_t kv, int64_t s, int64_t block_size, int64_t max_blocks, float scale,
                                          void* out, gpuStream_t stream) {
  if (b == 0 || h == 0 || s == 0) return gpuSuccess;
  if (s > kThreads || kv <= 0 || h % kv != 0 || b > 65535 || h > 0x7fffffff) return gpuErrorInvalidValue;
  switch (type) {
    case FloatType::f32:
      return attention_as<float>(q, k_cache, v_cache, block_tables, context_lens, b, h, kv, s, block_size, max_blocks, scale, out, stream);
    case FloatType::f16:
      return attention_as<__half>(q, k_cache, v_cache, block_tables, context_lens, b, h, kv, s, block_size, max_blocks, scale, out, stream);
    case FloatType::bf16:
      return attention_as<gpu_bfloat16>(q, k_cache, v_cache, block_tables, context_lens, b, h, kv, s, block_size, max_blocks, scale,
                                         out, stream);
  }
  return gpuErrorInvalidValue;
}

}  // namespace verlpp::cuda
