// cuda: the sampling kernel and its launcher. One thread block per row, no sort: top-k and
// top-p become thresholds found by binary search over the bit patterns of the values (each
// step one block-wide count or sum over the row); the token is then drawn from the kept set by
// the Gumbel-max trick: argmax over kept j of log q_j + G_j, G_j = -log(-log u_j) with u_j a
// counter-based hash of (seed, step, j). That is an exact draw from q restricted to the kept
// set in one coalesced pass (an inverse CDF in index order needed per-thread contiguous
// chunks, which do not coalesce: 0.77 ms per call at 256 x 151936 on an H200). The kept set is
// the one cpu_ref's sorted reference keeps (ties at a boundary are all kept); the tokens drawn
// for a seed differ from cpu_ref's, the distribution does not (the conformance suite checks it).
// Untruncated rows (top_k off, top_p = 1) take three passes; top-k / top-p add their searches.
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

// The block's largest value and its first index (ties: the smaller index), to every thread.
__device__ ArgMax block_argmax(ArgMax best, float* best_value, int64_t* best_index) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    float other_value = gpu_shfl_xor(best.value, offset);
    int64_t other_index = gpu_shfl_xor(best.index, offset);
    if (other_value > best.value || (other_value == best.value && other_index < best.index)) best = ArgMax{other_value, other_index};
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    best_value[warp] = best.value;
    best_index[warp] = best.index;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w)
      if (best_value[w] > best_value[0] || (best_value[w] == best_value[0] && best_index[w] < best_index[0])) {
        best_value[0] = best_value[w];
        best_index[0] = best_index[w];
      }
  }
  __syncthreads();
  const ArgMax result{best_value[0], best_index[0]};
  __syncthreads();  // the arrays may be reused by the next call
  return result;
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
  __shared__ float scratch_f[kWarps];
  __shared__ unsigned long long scratch_u[kWarps];
  __shared__ float best_value[kWarps];
  __shared__ int64_t best_index[kWarps];

  const int64_t row = blockIdx.x;
  const float* x = logits + row * v;
  const float t = temperature[row];
  const bool greedy = !(t > 0.0f);
  const float temp = greedy ? 1.0f : t;

  // Pass 1: the row's max and its first index (NaNs never win).
  ArgMax best{-INFINITY, v};
  for (int64_t j = threadIdx.x; j < v; j += kThreads) {
    float value = x[j];
    if (value > best.value || (value == best.value && j < best.index)) best = ArgMax{value, j};
  }
  best = block_argmax(best, best_value, best_index);
  const float x_max = best.value;
  const int64_t argmax = best.index < v ? best.index : 0;
  const float z_max = x_max / temp;  // division by temp > 0 is monotone: max(x / t) = max(x) / t

  // Pass 2: the softmax denominator (relative to the max), for the log-prob.
  float local = 0.0f;
  for (int64_t j = threadIdx.x; j < v; j += kThreads) local += expf(x[j] / temp - z_max);
  const float total = block_reduce(local, SumOp{}, 0.0f, scratch_f);

  int64_t token = argmax;
  if (!greedy) {
    // top-k: the largest key K with count(key >= K) >= k; kept_k = {key(x) >= K}.
    const int32_t k = top_k[row];
    uint32_t key_floor = 0;  // every token
    if (k > 0 && int64_t(k) < v) {
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
    const float p = top_p[row];
    uint32_t q_floor = 0;
    if (p < 1.0f) {
      // q = exp(x / t - max); the mass of the top-k set.
      local = 0.0f;
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

    // Gumbel-max over the kept tokens: argmax of log q_j - log(-log u_j), u_j in (0, 1) from 24
    // bits of a hash of the row's (seed, step) and j. The argmax itself is always kept, so the
    // set is never empty.
    const uint64_t row_bits = splitmix64(splitmix64(seeds[row]) + step * 0x9E3779B97F4A7C15ull);
    ArgMax pick{-INFINITY, v};
    for (int64_t j = threadIdx.x; j < v; j += kThreads) {
      const float xj = x[j];
      if (ordered_key(xj) < key_floor) continue;
      const float z = xj / temp - z_max;  // log q_j
      if (q_floor != 0 && __float_as_uint(expf(z)) < q_floor) continue;
      const uint64_t bits = splitmix64(row_bits + uint64_t(j + 1) * 0xD1B54A32D192ED03ull);
      const float u = (float(bits >> 40) + 0.5f) * (1.0f / 16777216.0f);
      const float score = z - logf(-logf(u));
      if (score > pick.value || (score == pick.value && j < pick.index)) pick = ArgMax{score, j};
    }
    pick = block_argmax(pick, best_value, best_index);
    token = pick.index < v ? pick.index : argmax;
  }
  if (threadIdx.x == 0) {
    out_tokens[row] = token;
    out_logprobs[row] = x[token] / temp - z_max - logf(total);
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
