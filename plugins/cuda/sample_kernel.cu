// cuda: the sampling kernel and its launcher. No sort: the token is drawn by the Gumbel-max
// trick, argmax over kept j of log q_j + G_j, G_j = -log(-log u_j) with u_j a counter-based
// hash of (seed, step, j): an exact draw from q restricted to the kept set in one coalesced
// pass. top-k and top-p become thresholds found by binary search over the bit patterns of the
// values (each step one block-wide count or sum over the row). The kept set is the one cpu_ref's
// sorted reference keeps (ties at a boundary are all kept); the tokens drawn for a seed differ
// from cpu_ref's, the distribution does not (the conformance suite checks it).
//
// Two kernels. slice_kernel, grid (rows, splits): each block reads one slice of a row once and
// leaves a partial (argmax, softmax denominator and, for untruncated sampling rows, the best
// Gumbel candidate) in a stream-ordered workspace; one block per row had only ~2 blocks per SM
// at batch 256 and far fewer below it, too few bytes in flight (239 us at 256 x 151936 on an
// H200, ~650 GB/s). finish_kernel, one block per row, merges a row's partials in a fixed order
// (deterministic, no atomics) and writes the token and log-prob; top-k / top-p rows then run
// their searches and a draw pass over the kept set there, one block per row as before. Without
// a memory pool the finish kernel reads the whole row itself (one split).
//
// The draw is compute-heavy: a 64-bit hash and two accurate logs per element cost more than
// the element's 4 bytes of bandwidth. The hash is kept for every element, but the exact
// z_j + G_j is only computed for elements that can still beat the warp's best exact value P, a
// test made with cheap rigorous bounds (see candidate filter below); the result is the same
// argmax as evaluating every element, so tokens equal the old kernel's for the same seeds.
//
// Logits may be f32, bf16 or f16 (ABI 1.3): every read converts to fp32 on load (exact), and
// the rest is the fp32 code. The result must equal the fp32 call's on the converted values bit
// for bit, log-prob included, and the softmax denominator is a float sum whose rounding depends
// on which thread adds which element in which step; so the 16-bit kernels keep the fp32 path's
// exact partition: quads of four elements from a quad-aligned start (`head` scalars before it),
// a quad one 16-byte float4 load in fp32 and one 8-byte load in 16-bit. An 8-value 16-byte load
// would span two threads' quads of that partition (the neighbour's data would need a shuffle
// and put no more bytes in flight per thread). The hash index of every element is unchanged.
#include "dependent_launch.cuh"
#include "block_reduce.cuh"
#include "kernels.hpp"
#include "workspace_pool.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace verlpp::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kLoadsInFlight = 4;                   // quads per thread per step (16 values)
constexpr int kStep = kThreads * kLoadsInFlight;    // quads a block reads per step
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kStride = 0xD1B54A32D192ED03ull;  // the hash's multiplier of j + 1

// 2^x and log2(x) by the special-function unit, subnormals flushed: the hot loop's per-element
// exp and the filter's log (exp2f / __log2f add a subnormal fix-up of ~3 instructions each).
#if defined(VERLPP_GPU_HIP) && VERLPP_GPU_HIP
__device__ __forceinline__ float fast_exp2(float x) { return exp2f(x); }
__device__ __forceinline__ float fast_log2(float x) { return __log2f(x); }
#else
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
#endif

// Order-preserving map of a float to uint32 (larger float -> larger key; NaN sorts highest).
__device__ __forceinline__ uint32_t ordered_key(float x) {
  uint32_t bits = __float_as_uint(x);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// A quad, four consecutive logits read by one vector load from a 4-element-aligned address:
// a float4 (16 bytes) of fp32, 8 bytes of 16-bit values; to_quad widens it to fp32 (exact).
// `padding` is a quad of -inf in the raw type, selected in place of a load past the slice
// before the widening, so each quad has one conversion path and no branch around it.
template <class T>
struct QuadOf {
  using type = uint2;
  static constexpr uint32_t kNegInf2 = std::is_same<T, __half>::value ? 0xFC00FC00u : 0xFF80FF80u;  // two -inf
  static __device__ __forceinline__ uint2 padding() { return make_uint2(kNegInf2, kNegInf2); }
};
template <>
struct QuadOf<float> {
  using type = float4;
  static __device__ __forceinline__ float4 padding() { return make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY); }
};
template <class T>
__device__ __forceinline__ float4 to_quad(typename QuadOf<T>::type raw) {
  T h[4];
  memcpy(h, &raw, sizeof(raw));
  return make_float4(to_float(h[0]), to_float(h[1]), to_float(h[2]), to_float(h[3]));
}
template <>
__device__ __forceinline__ float4 to_quad<float>(float4 r) {
  return r;
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += kGolden;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The top 24 bits of splitmix64(y) given h = y + kGolden (the final xor-shift leaves them alone).
__device__ __forceinline__ uint32_t noise_bits(uint64_t h) {
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
  return uint32_t(h >> 40);
}

// The Gumbel noise -log(-log u) of element j, u in (0, 1) from 24 bits k of a hash of the
// row's (seed, step) bits and j: u = (k + 0.5) / 2^24 in fp32. For k = 2^24 - 1 that sum rounds
// to 2^24, u = 1 and G = +inf (once per ~110 rows of 151936 tokens the draw was a uniform pick
// over the whole vocabulary); u is clamped to the largest float below 1 there.
__device__ __forceinline__ float gumbel(uint64_t row_bits, int64_t j) {
  const uint32_t k = noise_bits(row_bits + uint64_t(j + 1) * kStride + kGolden);
  const float u = k == 0xFFFFFFu ? 0x1.fffffep-1f : (float(k) + 0.5f) * (1.0f / 16777216.0f);
  return -logf(-logf(u));
}

// A lower bound on -ln u for the filter, never above the exact value and within ~1e-4 of it
// where it matters: u <= (floor(k / 2) + 1) / 2^23 = uhi, built from bits; -ln uhi >= 1 - uhi,
// and >= ln2 * (-lg2.approx(uhi) - 2^-20) (its error is below 2^-22), both exact in fp32 terms.
__device__ __forceinline__ float neg_log_u_floor(uint32_t k) {
  const float uhi = __uint_as_float(0x3F800000u | (k >> 1)) - 0x1.fffffcp-1f;  // exact
  return fmaxf(1.0f - uhi, fmaf(-fast_log2(uhi), 0.69314f, -1e-6f));
}

// Per thread or merged: the first argmax of x (NaN never counts), the softmax denominator
// sum_j 2^(x_j c - mc) with c = log2(e) / t and mc = fl(best * c) (0 while best = -inf), and,
// for drawing rows, the best exact candidate x_j / t + G_j. Indices: "none" = v.
struct Partial {
  float best;
  int32_t best_i;
  float sum;
  float pick;
  int32_t pick_i;
};

// (value, index) pairs: the larger wins, ties go to the smaller index. Symmetric, so any merge
// order gives the same pair.
__device__ __forceinline__ void keep_max(float& value, int32_t& index, float v2, int32_t i2) {
  if (v2 > value || (v2 == value && i2 < index)) value = v2, index = i2;
}

__device__ Partial merge(Partial a, const Partial& b, float c) {
  const float best = fmaxf(a.best, b.best);
  if (best != -INFINITY) {  // rescale both sums to the new reference (a side at -inf holds 0 or NaN)
    const float ref = best * c;
    if (a.best != -INFINITY) a.sum *= exp2f(a.best * c - ref);
    a.sum += b.best != -INFINITY ? b.sum * exp2f(b.best * c - ref) : b.sum;
  } else {
    a.sum += b.sum;
  }
  keep_max(a.best, a.best_i, b.best, b.best_i);
  keep_max(a.pick, a.pick_i, b.pick, b.pick_i);
  return a;
}

__device__ Partial shfl_xor(const Partial& p, int offset) {
  return Partial{gpu_shfl_xor(p.best, offset), gpu_shfl_xor(p.best_i, offset), gpu_shfl_xor(p.sum, offset),
                 gpu_shfl_xor(p.pick, offset), gpu_shfl_xor(p.pick_i, offset)};
}

// The block's merged partial, to every thread. Fixed tree, so deterministic.
__device__ Partial block_merge(Partial p, float c, Partial* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) p = merge(p, shfl_xor(p, offset), c);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // scratch may still be read by an earlier call
  if (lane == 0) scratch[warp] = p;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) p = merge(p, scratch[w], c);
    scratch[0] = p;
  }
  __syncthreads();
  return scratch[0];
}

// What a row asks for, from its per-row parameters; temp = 1 for greedy rows.
struct RowSetup {
  float temp, c, p;
  int32_t k;
  bool greedy, top_k_on, top_p_on, draw;
  uint64_t row_bits;
};
__device__ RowSetup row_setup(int64_t row, int64_t v, const float* temperature, const int32_t* top_k,
                              const float* top_p, const uint64_t* seeds, uint64_t step) {
  RowSetup s;
  const float t = temperature[row];
  s.greedy = !(t > 0.0f);  // <= 0 or NaN
  s.temp = s.greedy ? 1.0f : t;
  s.c = kLog2e / s.temp;
  s.k = top_k[row];
  s.p = top_p[row];
  s.top_k_on = !s.greedy && s.k > 0 && int64_t(s.k) < v;
  s.top_p_on = !s.greedy && s.p < 1.0f;
  s.draw = !s.greedy && !s.top_k_on && !s.top_p_on;
  s.row_bits = splitmix64(splitmix64(seeds[row]) + step * kGolden);
  return s;
}

// One thread's share of elements [head + 4 f_begin, head + 4 f_end) of row x (quads from a
// quad-aligned x + head), plus the scalar elements [0, head) and [tail, v) when asked. A
// thread visits its indices in increasing order, so within a thread "strictly larger" is the
// tie rule; the warp keeps the same trip count (its shuffles need every lane).
template <class T, bool kDraw>
__device__ Partial slice_pass(const T* __restrict__ x, int32_t v, int32_t head, int32_t f_begin, int32_t f_end,
                              bool with_head, int32_t tail, const RowSetup& rs) {
  const int32_t none = v;
  const float c = rs.c;
  float best = -INFINITY, sum = 0.0f, mc = 0.0f, pick = -INFINITY;
  int32_t best_i = none, pick_i = none;
  // Exact candidate: the old kernel's value x_j / t + G_j.
  auto offer = [&](int32_t j, float xj) {
    const float value = xj / rs.temp + gumbel(rs.row_bits, j);
    if (value > pick || (value == pick && pick_i == none)) pick = value, pick_i = j;
  };
  auto scalar = [&](int32_t j) {  // head and tail elements: everything exact, one at a time
    const float xj = to_float(x[j]);
    if (xj > best) {
      if (best != -INFINITY) sum *= exp2f(mc - xj * c);
      best = xj, best_i = j, mc = xj * c;
    } else if (xj == best && best_i == none) {
      best_i = j;  // a row of -inf so far: the first index, as keep_max had it
    }
    sum += exp2f(fmaf(xj, c, -mc));
    if (kDraw) offer(j, xj);
  };
  if (with_head && int32_t(threadIdx.x) < head) scalar(threadIdx.x);

  using Quad = typename QuadOf<T>::type;
  const Quad* x4 = reinterpret_cast<const Quad*>(x + head);
  // The hash input of this thread's first element, j = head + 4 (f_begin + tid); it moves by a
  // constant per float4 and per step (kept in a register: recomputing it cost ~3 per element).
  uint64_t hash = rs.row_bits + uint64_t(head + 1 + 4 * (f_begin + int32_t(threadIdx.x))) * kStride + kGolden;
  float warp_pick = -INFINITY;  // the best exact value in this warp as of the last step
  for (int32_t base = f_begin; base < f_end; base += kStep) {
    float xv[4 * kLoadsInFlight];
    bool valid[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int32_t f = base + u * kThreads + threadIdx.x;
      valid[u] = f < f_end;
      const float4 r = to_quad<T>(valid[u] ? x4[f] : QuadOf<T>::padding());
      xv[4 * u] = r.x, xv[4 * u + 1] = r.y, xv[4 * u + 2] = r.z, xv[4 * u + 3] = r.w;
    }
    auto index_of = [&](int i) { return head + 4 * (base + (i >> 2) * kThreads + int32_t(threadIdx.x)) + (i & 3); };
    auto first_index = [&](float value) {  // the first valid element equal to value, or none
      int32_t found = none;
#pragma unroll
      for (int i = 4 * kLoadsInFlight - 1; i >= 0; --i)
        if (valid[i >> 2] && xv[i] == value) found = index_of(i);
      return found;
    };
    float cm = -INFINITY;
#pragma unroll
    for (int i = 0; i < 4 * kLoadsInFlight; ++i) cm = fmaxf(cm, xv[i]);  // NaN never counts
    if (cm > best) {  // a new max (rare after the first steps): rescale the sum to it
      if (best != -INFINITY) sum *= exp2f(mc - cm * c);
      best = cm, best_i = first_index(cm), mc = cm * c;
    } else if (cm == best && best_i == none) {
      best_i = first_index(cm);
    }
    float q[4 * kLoadsInFlight];  // 2^(x c - mc) = e^(z - z_max); padding is -inf: adds 0
#pragma unroll
    for (int i = 0; i < 4 * kLoadsInFlight; ++i) q[i] = fast_exp2(fmaf(xv[i], c, -mc));
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) sum += (q[4 * u] + q[4 * u + 1]) + (q[4 * u + 2] + q[4 * u + 3]);
    if (kDraw) {
      // Candidate filter. Element j can beat the warp's best exact value P only if (in exact
      // math, up to fp32 rounding) e^(z_j - z_max) / (-ln u_j) >= e^(P - z_max); the test uses
      // q_j, the lower bound of -ln u_j and R = e^(P - z_max) lowered by a margin far above
      // every rounding and approximation error (~1e-3 relative), so it never drops the winner,
      // only lets through a few extra elements that the exact test then rejects. Dropping an
      // element beaten by another lane's candidate is safe: that candidate reaches the merge.
      if (warp_pick == -INFINITY && cm != -INFINITY) {
        // No candidate in the warp yet (first step): each lane offers its largest value, which
        // makes P the best of 32 good candidates before the test instead of letting all through.
        const int32_t j = first_index(cm);
        if (j != none) offer(j, to_float(x[j]));
      }
      warp_pick = pick;  // every lane's pick only grows, so this is the warp's best so far
      for (int offset = 16; offset > 0; offset >>= 1) warp_pick = fmaxf(warp_pick, gpu_shfl_xor(warp_pick, offset));
      float bound = 0.0f;  // P = -inf: everything is a candidate
      if (warp_pick != -INFINITY) {
        const float lg = fmaf(warp_pick, kLog2e, -mc);
        bound = exp2f(lg - (1.0f / 512.0f) - (fabsf(warp_pick * kLog2e) + fabsf(mc)) * (1.0f / 262144.0f));
      }
      uint32_t mask = cm == INFINITY ? 0xFFFFu : 0u;  // q is NaN next to +inf: test exactly
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        if (!valid[u]) continue;
        const uint64_t h = hash + uint64_t(4 * u * kThreads) * kStride;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float w = neg_log_u_floor(noise_bits(h + uint64_t(e) * kStride));
          if (q[4 * u + e] >= bound * w) mask |= 1u << (4 * u + e);
        }
      }
      for (int u = 0; u < kLoadsInFlight; ++u) mask &= valid[u] ? ~0u : ~(0xFu << (4 * u));
      while (mask != 0) {  // rare: the few candidates, exactly (re-read from cache)
        const int i = __ffs(mask) - 1;
        mask &= mask - 1;
        const int32_t j = index_of(i);
        offer(j, to_float(x[j]));
      }
      hash += uint64_t(4 * kStep) * kStride;
    }
  }
  if (tail < v)
    for (int32_t j = tail + threadIdx.x; j < v; j += kThreads) scalar(j);
  return Partial{best, best_i, sum, pick, pick_i};
}

// The block's partial of split `split` of row x: a row is `head` scalar elements up to quad
// alignment (16 bytes in fp32, 8 in 16-bit; split 0 takes them), n4 quads (per_split to a
// split), then the rest (the last). For 16-bit rows and fp32 rows at the same element offset
// from allocations aligned to 16 bytes, head (the offset's distance to a multiple of 4) is the
// same, and so is everything after it.
template <class T, bool kDraw>
__device__ Partial row_slice(const T* x, int32_t v, int32_t split, int32_t splits, int32_t per_split,
                             const RowSetup& rs, Partial* scratch) {
  constexpr uintptr_t kQuadBytes = 4 * sizeof(T);
  const uintptr_t misalign = reinterpret_cast<uintptr_t>(x) & (kQuadBytes - 1);
  const int32_t head = min(v, int32_t(((kQuadBytes - misalign) & (kQuadBytes - 1)) / sizeof(T)));
  const int32_t n4 = (v - head) / 4, tail = split == splits - 1 ? head + 4 * n4 : v;
  const int32_t f_begin = min(n4, split * per_split), f_end = min(n4, f_begin + per_split);
  return block_merge(slice_pass<T, kDraw>(x, v, head, f_begin, f_end, split == 0, tail, rs), rs.c, scratch);
}

// grid (rows, splits), block kThreads: partial per (row, split) into parts[row * splits + split].
template <class T>
__global__ void __launch_bounds__(kThreads)
slice_kernel(const T* __restrict__ logits, int32_t v, int32_t splits, int32_t per_split,
             const float* __restrict__ temperature, const int32_t* __restrict__ top_k, const float* __restrict__ top_p,
             const uint64_t* __restrict__ seeds, uint64_t step, Partial* __restrict__ parts) {
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
  __shared__ Partial scratch[kWarps];
  const int64_t row = blockIdx.x;
  const RowSetup rs = row_setup(row, v, temperature, top_k, top_p, seeds, step);
  const T* x = logits + row * v;
  const Partial p = rs.draw ? row_slice<T, true>(x, v, blockIdx.y, splits, per_split, rs, scratch)
                            : row_slice<T, false>(x, v, blockIdx.y, splits, per_split, rs, scratch);
  if (threadIdx.x == 0) parts[row * splits + blockIdx.y] = p;
}

// grid.x = rows, block = kThreads. parts = NULL: no workspace, the block reads its row itself.
template <class T>
__global__ void __launch_bounds__(kThreads)
finish_kernel(const T* __restrict__ logits, int32_t v, int32_t splits, const Partial* __restrict__ parts,
              const float* __restrict__ temperature, const int32_t* __restrict__ top_k, const float* __restrict__ top_p,
              const uint64_t* __restrict__ seeds, uint64_t step, int64_t* __restrict__ out_tokens,
              float* __restrict__ out_logprobs) {
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
  __shared__ Partial scratch[kWarps];
  __shared__ float scratch_f[kWarps];
  __shared__ unsigned long long scratch_u[kWarps];

  const int64_t row = blockIdx.x;
  const T* x = logits + row * v;
  const RowSetup rs = row_setup(row, v, temperature, top_k, top_p, seeds, step);
  const float temp = rs.temp;

  Partial all;
  if (parts == nullptr) {
    all = rs.draw ? row_slice<T, true>(x, v, 0, 1, v, rs, scratch) : row_slice<T, false>(x, v, 0, 1, v, rs, scratch);
  } else {
    // Warp 0 merges the row's partials: lane l takes l, l + 32, ... in order, then a fixed tree.
    if (threadIdx.x < 32) {
      Partial p{-INFINITY, v, 0.0f, -INFINITY, v};
      for (int32_t s = threadIdx.x; s < splits; s += 32) p = merge(p, parts[row * splits + s], rs.c);
      for (int offset = 16; offset > 0; offset >>= 1) p = merge(p, shfl_xor(p, offset), rs.c);
      if (threadIdx.x == 0) scratch[0] = p;
    }
    __syncthreads();
    all = scratch[0];
  }
  const int64_t argmax = all.best_i < v ? all.best_i : 0;
  const float z_max = all.best / temp;  // = max(x) / t: division by t > 0 is monotone, correctly rounded

  int64_t pick_i = all.pick_i;
  if (rs.top_k_on || rs.top_p_on) {
    // top-k: the largest key K with count(key >= K) >= k; kept_k = {key(x) >= K}.
    uint32_t key_floor = 0;  // every token
    if (rs.top_k_on) {
      uint64_t lo = 0, hi = uint64_t(1) << 32;  // count(>= lo) >= k; count(>= hi) = 0 < k
      while (hi - lo > 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        unsigned long long count = 0;
        for (int64_t j = threadIdx.x; j < v; j += kThreads) count += ordered_key(to_float(x[j])) >= mid;
        count = block_reduce(count, SumOp{}, 0ull, scratch_u);
        if (count >= (unsigned long long)rs.k) lo = mid;
        else hi = mid;
      }
      key_floor = uint32_t(lo);
    }
    // top-p: keep token j iff the kept_k mass of tokens with larger q is < p * mass_k, i.e.
    // bits(q_j) >= B, the smallest B with G(B) = sum(q > B) < p * mass_k (G never increases).
    uint32_t q_floor = 0;
    if (rs.top_p_on) {
      // q = exp(x / t - max); the mass of the top-k set.
      float local = 0.0f;
      for (int64_t j = threadIdx.x; j < v; j += kThreads)
        if (ordered_key(to_float(x[j])) >= key_floor) local += expf(to_float(x[j]) / temp - z_max);
      const float mass_k = block_reduce(local, SumOp{}, 0.0f, scratch_f);
      const float limit = (rs.p > 0.0f ? rs.p : 0.0f) * mass_k;
      uint32_t lo = 0, hi = 0x7f800000u;  // G(lo) = mass_k >= limit; G(+inf bits) = 0
      while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        local = 0.0f;
        for (int64_t j = threadIdx.x; j < v; j += kThreads) {
          if (ordered_key(to_float(x[j])) < key_floor) continue;
          const float q = expf(to_float(x[j]) / temp - z_max);
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
    Partial mine{-INFINITY, v, 0.0f, -INFINITY, v};
    for (int32_t j = threadIdx.x; j < v; j += kThreads) {
      const float xj = to_float(x[j]);
      if (ordered_key(xj) < key_floor) continue;
      const float z = xj / temp - z_max;  // log q_j
      if (q_floor != 0 && __float_as_uint(expf(z)) < q_floor) continue;
      keep_max(mine.pick, mine.pick_i, z + gumbel(rs.row_bits, j), j);
    }
    pick_i = block_merge(mine, rs.c, scratch).pick_i;
  }
  if (threadIdx.x == 0) {
    const int64_t token = !rs.greedy && pick_i < v ? pick_i : argmax;
    out_tokens[row] = token;
    out_logprobs[row] = to_float(x[token]) / temp - z_max - logf(all.sum);
  }
}

// The two launches for logits of type T (splits and workspace as below).
template <class T>
gpuError_t launch_sample_as(const T* logits, int64_t b, int64_t v, const float* temperature, const int32_t* top_k,
                            const float* top_p, const uint64_t* seeds, uint64_t step, int64_t* out_tokens,
                            float* out_logprobs, gpuStream_t stream) {
  int device = 0;
  if (gpuGetDevice(&device) != gpuSuccess) return gpuGetLastError();
  const WorkspacePool state = workspace_pool(device);

  // Splits: the slice kernel is bound by the hash and the loads of every element, so its time
  // is about (waves of blocks) x (quads per block), with ~4 blocks resident per SM (55-63
  // registers x 256 threads). Pick the split count with the least such time (ties: fewer
  // splits), each split a multiple of kThreads quads and at least kStep of them. The choice
  // depends on v alone, not on the logits' type: 16-bit rows split as their fp32 conversion.
  const int64_t n4 = v / 4;
  int64_t splits = 1, per_split = n4;
  if (state.pool != nullptr && state.sms > 0 && n4 >= 2 * kStep) {
    const int64_t resident = 4 * int64_t(state.sms);
    int64_t best_cost = (b + resident - 1) / resident * n4;
    for (int64_t want = 2; want <= std::min<int64_t>(n4 / kStep, 128); ++want) {
      const int64_t per = ((n4 + want - 1) / want + kThreads - 1) / kThreads * kThreads;
      const int64_t count = (n4 + per - 1) / per;
      const int64_t cost = (b * count + resident - 1) / resident * per;
      if (cost < best_cost) best_cost = cost, splits = count, per_split = per;
    }
  }
  void* workspace = nullptr;  // stays NULL on failure: the finish kernel then reads rows itself
  if (splits > 1 && gpuMallocFromPoolAsync(&workspace, size_t(b * splits) * sizeof(Partial), state.pool, stream) != gpuSuccess)
    (void)gpuGetLastError(), workspace = nullptr;
  Partial* parts = static_cast<Partial*>(workspace);
  gpuError_t launched = gpuSuccess;
  if (parts != nullptr)
    launched = launch_kernel(slice_kernel<T>, dim3(unsigned(b), unsigned(splits)), kThreads, 0, stream, logits,
                             int32_t(v), int32_t(splits), int32_t(per_split), temperature, top_k, top_p, seeds, step,
                             parts);
  if (launched == gpuSuccess)
    launched = launch_kernel(finish_kernel<T>, dim3(unsigned(b)), kThreads, 0, stream, logits, int32_t(v),
                             parts ? int32_t(splits) : 1, static_cast<const Partial*>(parts), temperature, top_k,
                             top_p, seeds, step, out_tokens, out_logprobs);
  if (workspace != nullptr) {
    const gpuError_t freed = gpuFreeAsync(workspace, stream);  // after the kernels, in stream order
    if (launched == gpuSuccess && freed != gpuSuccess) return freed;
  }
  return launched;
}

}  // namespace

gpuError_t launch_sample(const void* logits, FloatType type, int64_t b, int64_t v, const float* temperature,
                          const int32_t* top_k, const float* top_p, const uint64_t* seeds, uint64_t step,
                          int64_t* out_tokens, float* out_logprobs, gpuStream_t stream) {
  if (b == 0) return gpuSuccess;
  // int32 indices inside a row (v below 2^31 - 2^20 leaves room for a step's overshoot).
  if (b > 0x7fffffff || v <= 0 || v > 0x7ff00000) return gpuErrorInvalidValue;
  switch (type) {
    case FloatType::f32:
      return launch_sample_as(static_cast<const float*>(logits), b, v, temperature, top_k, top_p, seeds, step,
                              out_tokens, out_logprobs, stream);
    case FloatType::bf16:
      return launch_sample_as(static_cast<const gpu_bfloat16*>(logits), b, v, temperature, top_k, top_p, seeds, step,
                              out_tokens, out_logprobs, stream);
    case FloatType::f16:
      return launch_sample_as(static_cast<const __half*>(logits), b, v, temperature, top_k, top_p, seeds, step,
                              out_tokens, out_logprobs, stream);
  }
  return gpuErrorInvalidValue;
}

}  // namespace verlpp::cuda
