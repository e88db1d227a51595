// cuda: the sampling kernel and its launcher. One thread block per row, no sort: top-k and
// top-p become thresholds found by binary search over the bit patterns of the values (each
// step one block-wide count or sum over the row); the token is then drawn from the kept set by
// the Gumbel-max trick: argmax over kept j of log q_j + G_j, G_j = -log(-log u_j) with u_j a
// counter-based hash of (seed, step, j). That is an exact draw from q restricted to the kept
// set in one coalesced pass (an inverse CDF in index order needed per-thread contiguous
// chunks, which do not coalesce: 0.77 ms per call at 256 x 151936 on an H200). The kept set is
// the one cpu_ref's sorted reference keeps (ties at a boundary are all kept); the tokens drawn
// for a seed differ from cpu_ref's, the distribution does not (the conformance suite checks it).
// Every row takes one pass for its argmax and softmax denominator, which is also the draw when
// nothing is filtered (greedy, or top_k off and top_p = 1); top-k / top-p rows add their
// searches and one more pass for the draw over the kept set.
#include "block_reduce.cuh"
#include "kernels.hpp"

#include <cmath>
#include <cstdint>

namespace verlpp::cuda {
namespace {

// Order-preserving map of a float to uint32 (larger float -> larger key; NaN sorts highest).
__device__ __forceinline__ uint32_t ordered_key(float x) {
  uint32_t bits = __float_as_uint(x);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct ArgMax {
  float value;
  int64_t index;
};

// a = the larger of a and (value, index): ties go to the smaller index, NaN never wins.
__device__ __forceinline__ void keep_max(ArgMax& a, float value, int64_t index) {
  if (value > a.value || (value == a.value && index < a.index)) a = ArgMax{value, index};
}

// The block's largest value and its first index (ties: the smaller index), to every thread.
__device__ ArgMax block_argmax(ArgMax best, float* best_value, int64_t* best_index) {
  for (int offset = 16; offset > 0; offset >>= 1)
    keep_max(best, gpu_shfl_xor(best.value, offset), gpu_shfl_xor(best.index, offset));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    best_value[warp] = best.value;
    best_index[warp] = best.index;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    ArgMax all{best_value[0], best_index[0]};
    for (int w = 1; w < kWarps; ++w) keep_max(all, best_value[w], best_index[w]);
    best_value[0] = all.value;
    best_index[0] = all.index;
  }
  __syncthreads();
  const ArgMax result{best_value[0], best_index[0]};
  __syncthreads();  // the arrays may be reused by the next call
  return result;
}

// Calls fn(j, x[j]) for this thread's share of the row, 16-byte loads with kLoadsInFlight of
// them issued before any is used: one block serves a whole row, so the bytes each thread keeps
// in flight decide how fast it streams (one 4-byte load at a time left a pass latency-bound at
// ~1 GB/s per SM). The order of j differs between threads; callers break ties by index.
constexpr int kLoadsInFlight = 4;
template <class Fn>
__device__ __forceinline__ void for_each_logit(const float* __restrict__ x, int64_t v, Fn&& fn) {
  const bool aligned = (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
  const int64_t n4 = aligned ? v / 4 : 0;  // float4s; the rest element by element
  const float4* x4 = reinterpret_cast<const float4*>(x);
  for (int64_t f0 = threadIdx.x; f0 < n4; f0 += int64_t(kThreads) * kLoadsInFlight) {
    float4 r[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int64_t f = f0 + int64_t(u) * kThreads;
      if (f < n4) r[u] = x4[f];
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int64_t f = f0 + int64_t(u) * kThreads;
      if (f < n4) {
        fn(4 * f, r[u].x);
        fn(4 * f + 1, r[u].y);
        fn(4 * f + 2, r[u].z);
        fn(4 * f + 3, r[u].w);
      }
    }
  }
  for (int64_t j = 4 * n4 + threadIdx.x; j < v; j += kThreads) fn(j, x[j]);
}

// Online softmax denominator: the max m of z and the sum s of exp(z - m).
struct SoftmaxSum {
  float m, s;
};
__device__ __forceinline__ SoftmaxSum merge(SoftmaxSum a, SoftmaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return SoftmaxSum{m, 0.0f};
  return SoftmaxSum{m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
__device__ SoftmaxSum block_softmax_sum(SoftmaxSum x, float* ms, float* ss) {
  for (int offset = 16; offset > 0; offset >>= 1)
    x = merge(x, SoftmaxSum{gpu_shfl_xor(x.m, offset), gpu_shfl_xor(x.s, offset)});
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) ms[warp] = x.m, ss[warp] = x.s;
  __syncthreads();
  if (threadIdx.x == 0) {
    SoftmaxSum all = SoftmaxSum{ms[0], ss[0]};
    for (int w = 1; w < kWarps; ++w) all = merge(all, SoftmaxSum{ms[w], ss[w]});
    ms[0] = all.m, ss[0] = all.s;
  }
  __syncthreads();
  const SoftmaxSum result{ms[0], ss[0]};
  __syncthreads();
  return result;
}

// The Gumbel noise -log(-log u) of element j, u in (0, 1) from 24 bits of a hash of the row's
// (seed, step) bits and j.
__device__ __forceinline__ float gumbel(uint64_t row_bits, int64_t j) {
  const uint64_t bits = splitmix64(row_bits + uint64_t(j + 1) * 0xD1B54A32D192ED03ull);
  const float u = (float(bits >> 40) + 0.5f) * (1.0f / 16777216.0f);
  return -logf(-logf(u));
}

// grid.x = b rows, block = kThreads.
__global__ void __launch_bounds__(kThreads)
sample_kernel(const float* __restrict__ logits,       // [b, v] f32
              int64_t v,
              const float* __restrict__ temperature,  // [b]; <= 0 (or NaN) = greedy
              const int32_t* __restrict__ top_k,      // [b]; <= 0 or >= v = all
              const float* __restrict__ top_p,        // [b]; >= 1 = all
              const uint64_t* __restrict__ seeds,     // [b]
              uint64_t step,
              int64_t* __restrict__ out_tokens,       // [b]
              float* __restrict__ out_logprobs) {     // [b]
  __shared__ float scratch_f[kWarps], scratch_m[kWarps];
  __shared__ unsigned long long scratch_u[kWarps];
  __shared__ float best_value[kWarps];
  __shared__ int64_t best_index[kWarps];

  const int64_t row = blockIdx.x;
  const float* x = logits + row * v;
  const float t = temperature[row];
  const bool greedy = !(t > 0.0f);
  const float temp = greedy ? 1.0f : t;
  const int32_t k = top_k[row];
  const float p = top_p[row];
  const bool top_k_on = !greedy && k > 0 && int64_t(k) < v, top_p_on = !greedy && p < 1.0f;
  const bool draw_in_first_pass = !greedy && !top_k_on && !top_p_on;
  const uint64_t row_bits = splitmix64(splitmix64(seeds[row]) + step * 0x9E3779B97F4A7C15ull);

  // Pass 1, every row: the argmax, the softmax denominator (online) and, when nothing is
  // filtered, the Gumbel-max draw (argmax of z + G needs no shift by the max).
  ArgMax best{-INFINITY, v}, pick{-INFINITY, v};
  SoftmaxSum sum{-INFINITY, 0.0f};
  for_each_logit(x, v, [&](int64_t j, float xj) {
    keep_max(best, xj, j);
    const float z = xj / temp;
    if (z > sum.m) {
      sum.s = sum.s * expf(sum.m - z) + 1.0f;
      sum.m = z;
    } else if (z != -INFINITY) {
      sum.s += expf(z - sum.m);
    }
    if (draw_in_first_pass) keep_max(pick, z + gumbel(row_bits, j), j);
  });
  best = block_argmax(best, best_value, best_index);
  if (draw_in_first_pass) pick = block_argmax(pick, best_value, best_index);
  sum = block_softmax_sum(sum, scratch_f, scratch_m);
  const int64_t argmax = best.index < v ? best.index : 0;
  const float z_max = sum.m;  // = max(x) / t: division by t > 0 is monotone and correctly rounded

  if (top_k_on || top_p_on) {
    // top-k: the largest key K with count(key >= K) >= k; kept_k = {key(x) >= K}.
    uint32_t key_floor = 0;  // every token
    if (top_k_on) {
      uint64_t lo = 0, hi = uint64_t(1) << 32;  // count(>= lo) >= k; count(>= hi) = 0 < k
      while (hi - lo > 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        unsigned long long count = 0;
        for (int64_t j = threadIdx.x; j < v; j += kThreads) count += ordered_key(x[j]) >= mid;
        count = block_reduce(count, SumOp{}, 0ull, scratch_u);
        if (count >= (unsigned long long)k) lo = mid;
        else hi = mid;
      }
      key_floor = uint32_t(lo);
    }
    // top-p: keep token j iff the kept_k mass of tokens with larger q is < p * mass_k, i.e.
    // bits(q_j) >= B, the smallest B with G(B) = sum(q > B) < p * mass_k (G never increases).
    uint32_t q_floor = 0;
    if (top_p_on) {
      // q = exp(x / t - max); the mass of the top-k set.
      float local = 0.0f;
      for (int64_t j = threadIdx.x; j < v; j += kThreads)
        if (ordered_key(x[j]) >= key_floor) local += expf(x[j] / temp - z_max);
      const float mass_k = block_reduce(local, SumOp{}, 0.0f, scratch_f);
      const float limit = (p > 0.0f ? p : 0.0f) * mass_k;
      uint32_t lo = 0, hi = 0x7f800000u;  // G(lo) = mass_k >= limit; G(+inf bits) = 0
      while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        local = 0.0f;
        for (int64_t j = threadIdx.x; j < v; j += kThreads) {
          if (ordered_key(x[j]) < key_floor) continue;
          const float q = expf(x[j] / temp - z_max);
          if (__float_as_uint(q) > mid) local += q;
        }
        const float g = block_reduce(local, SumOp{}, 0.0f, scratch_f);
        if (g < limit) hi = mid;
        else lo = mid;
      }
      q_floor = hi;
    }

    // Gumbel-max over the kept tokens: argmax of log q_j + G_j. The argmax itself is always
    // kept, so the set is never empty.
    for_each_logit(x, v, [&](int64_t j, float xj) {
      if (ordered_key(xj) < key_floor) return;
      const float z = xj / temp - z_max;  // log q_j
      if (q_floor != 0 && __float_as_uint(expf(z)) < q_floor) return;
      keep_max(pick, z + gumbel(row_bits, j), j);
    });
    pick = block_argmax(pick, best_value, best_index);
  }
  const int64_t token = !greedy && pick.index < v ? pick.index : argmax;
  if (threadIdx.x == 0) {
    out_tokens[row] = token;
    out_logprobs[row] = x[token] / temp - z_max - logf(sum.s);
  }
}

}  // namespace

gpuError_t launch_sample(const float* logits, int64_t b, int64_t v, const float* temperature, const int32_t* top_k,
                          const float* top_p, const uint64_t* seeds, uint64_t step, int64_t* out_tokens,
                          float* out_logprobs, gpuStream_t stream) {
  if (b == 0) return gpuSuccess;
  if (b > 0x7fffffff || v <= 0) return gpuErrorInvalidValue;
  sample_kernel<<<dim3(unsigned(b)), kThreads, 0, stream>>>(logits, v, temperature, top_k, top_p, seeds, step, out_tokens,
                                                            out_logprobs);
  return gpuGetLastError();
}

}  // namespace verlpp::cuda
