// cuda: the sampling kernel and its launcher. One thread block per row, no sort: top-k and
// top-p become thresholds found by binary search over the bit patterns of the values (each
// step one block-wide count or sum over the row), then the token is drawn by inverse CDF over
// the kept tokens in index order. The kept set is the one cpu_ref's sorted reference keeps
// (ties at a boundary are all kept); the draw order differs, the distribution does not.
// Correctness first: up to ~65 passes over a row; a radix select would need far fewer.
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

// The same counter-based draw in [0, 1) as cpu_ref and the host's reference sampler.
__device__ __forceinline__ double uniform_draw(uint64_t seed, uint64_t step) {
  uint64_t bits = splitmix64(splitmix64(seed) + step * 0x9E3779B97F4A7C15ull);
  return double(bits >> 11) * (1.0 / 9007199254740992.0);
}

struct ArgMax {
  float value;
  int64_t index;
};

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
  __shared__ float chunk_prefix[kThreads + 1];
  __shared__ int64_t chosen;
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
  const float x_max = best_value[0];
  const int64_t argmax = best_index[0] < v ? best_index[0] : 0;
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
    // q = exp(x / t - max); the mass of the top-k set.
    local = 0.0f;
    for (int64_t j = threadIdx.x; j < v; j += kThreads)
      if (ordered_key(x[j]) >= key_floor) local += expf(x[j] / temp - z_max);
    const float mass_k = block_reduce(local, SumOp{}, 0.0f, scratch_f);

    // top-p: keep token j iff the kept_k mass of tokens with larger q is < p * mass_k, i.e.
    // bits(q_j) >= B, the smallest B with G(B) = sum(q > B) < p * mass_k (G never increases).
    const float p = top_p[row];
    uint32_t q_floor = 0;
    if (p < 1.0f) {
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

    // Inverse CDF in index order: each thread owns one contiguous chunk of the row.
    const int64_t chunk = (v + kThreads - 1) / kThreads;
    const int64_t begin = threadIdx.x * chunk, end = begin + chunk < v ? begin + chunk : v;
    auto kept_q = [&](int64_t j) -> float {
      if (ordered_key(x[j]) < key_floor) return 0.0f;
      const float q = expf(x[j] / temp - z_max);
      return __float_as_uint(q) >= q_floor ? q : 0.0f;
    };
    float part = 0.0f;
    for (int64_t j = begin; j < end; ++j) part += kept_q(j);
    chunk_prefix[threadIdx.x + 1] = part;
    if (threadIdx.x == 0) chosen = -1;
    __syncthreads();
    if (threadIdx.x == 0) {
      chunk_prefix[0] = 0.0f;
      for (int i = 1; i <= kThreads; ++i) chunk_prefix[i] += chunk_prefix[i - 1];
    }
    __syncthreads();
    const float kept_mass = chunk_prefix[kThreads];
    const float target = float(uniform_draw(seeds[row], step)) * kept_mass;
    // Half-open ranges [prefix_i, prefix_i+1) are disjoint, so at most one thread walks; its
    // walk repeats the sum that made `part`, so it reaches the target inside its chunk.
    if (part > 0.0f && target >= chunk_prefix[threadIdx.x] && target < chunk_prefix[threadIdx.x + 1]) {
      const float local_target = target - chunk_prefix[threadIdx.x];
      float cum = 0.0f;
      int64_t pick = -1;
      for (int64_t j = begin; j < end; ++j) {
        const float q = kept_q(j);
        if (q == 0.0f) continue;
        cum += q;
        pick = j;
        if (cum > local_target) break;
      }
      chosen = pick;
    }
    __syncthreads();
    if (chosen >= 0) {
      token = chosen;
    } else {
      // Rounding put the target at or past the end: take the last kept token.
      unsigned long long last = 0;
      for (int64_t j = threadIdx.x; j < v; j += kThreads)
        if (kept_q(j) > 0.0f && (unsigned long long)(j + 1) > last) last = (unsigned long long)(j + 1);
      last = block_reduce(last, MaxU64{}, 0ull, scratch_u);
      token = last > 0 ? int64_t(last - 1) : argmax;
    }
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
