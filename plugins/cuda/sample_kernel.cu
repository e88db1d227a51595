// cuda: the sampling kernel and its launcher. No sort. Untruncated rows (temperature > 0, no
// top-k, top_p >= 1: an RL rollout's usual case) draw by inverse CDF over the softmax
// denominator that the argmax pass computes anyway; top-k / top-p rows become thresholds found by
// binary search over the bit patterns of the values (each step one block-wide count or sum over
// the row), then a Gumbel-max draw over the kept set. Kept sets are the ones cpu_ref's sorted
// reference keeps (ties at a boundary are all kept); tokens differ from cpu_ref's for a seed (it
// walks its CDF in probability order, this kernel in index order), the distribution does not
// (the conformance suite checks it). The uniform is cpu_ref's: 53 bits of the row's (seed, step).
//
// Two kernels. slice_kernel, grid (rows, splits): each block reads one slice of a row once, its
// 8 warps each a contiguous run of it (a "group"), and leaves the block's partial (first argmax,
// max-rescaled sum of exp) and each group's (max, sum) in a stream-ordered workspace; one block
// per row had only ~2 blocks per SM at batch 256 and far fewer below it, too few bytes in flight.
// finish_kernel, one block per row, merges a row's partials in a fixed order (deterministic, no
// atomics) and writes the token and log-prob. Without a memory pool the finish kernel reads the
// whole row itself (one split, still 8 groups).
//
// The inverse-CDF draw, in the finish kernel: u from the row's bits, t = u W with W the sum of
// the group masses (each rescaled to the row's max, walked in index order in fp64); the group
// whose cumulative range holds t is re-read, and the element is the first, in index order, whose
// fp64 prefix sum of q_j = 2^(x_j c - max c) passes the target. The target is mapped into the
// group by proportion (t's fraction of the group's stored mass times the re-read total), so each
// token's probability is q_j / W up to the fp32 rounding of q_j and of the stored sums (relative
// ~1e-6), not shifted onto a group's last token. A group is at most 1/8 of a slice, so the
// re-read is small (~9,600 elements at batch 256 x 151,936). The per-element Gumbel draw this
// replaces cost a 64-bit hash and two logs per element and made the slice kernel compute-bound.
// Rows whose denominator is not a positive finite number (every logit -inf; a NaN or +inf logit,
// which makes it NaN; a temperature so small that x / T overflows) give their argmax: the first
// +inf if there is one, else the first maximum of the non-NaN values. -inf (masked) logits have
// q = 0 and are never drawn.
//
// Logits may be f32, bf16 or f16 (ABI 1.3): every read converts to fp32 on load (exact), and
// the rest is the fp32 code. The result must equal the fp32 call's on the converted values bit
// for bit, log-prob included, and the softmax denominator is a float sum whose rounding depends
// on which thread adds which element in which step; so the 16-bit kernels keep the fp32 path's
// exact partition: quads of four elements from a quad-aligned start (`head` scalars before it),
// a quad one 16-byte float4 load in fp32 and one 8-byte load in 16-bit. An 8-value 16-byte load
// would span two lanes' quads of that partition (the neighbour's data would need a shuffle and
// put no more bytes in flight per thread). The draw's sums are fixed functions of the values,
// the indices and `head` alone (vector or scalar loads there give the same values).
#include "dependent_launch.cuh"
#include "block_reduce.cuh"
#include "kernels.hpp"
#include "workspace_pool.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace verlpp::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kLoadsInFlight = 4;               // quads per lane per step (16 values)
constexpr int kWarpStep = 32 * kLoadsInFlight;  // quads a warp reads per step
constexpr int kRun = 16;                        // elements per thread in the draw's re-read
constexpr int kTile = kThreads * kRun;          // elements the block re-reads per step
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kStride = 0xD1B54A32D192ED03ull;  // the Gumbel hash's multiplier of j + 1

// 2^x by the special-function unit, subnormals flushed: the hot loop's per-element exp
// (exp2f adds a subnormal fix-up of ~3 instructions).
#if defined(VERLPP_GPU_HIP) && VERLPP_GPU_HIP
__device__ __forceinline__ float fast_exp2(float x) { return exp2f(x); }
#else
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
#endif

// fl(x c), the reference a sum of 2^(x_j c - reference) is taken against. Always this rounded
// product, never fused into a neighbouring subtraction (__fmul_rn is not contracted into an fma):
// a rescale between two references must see the same values the sums were built with, or each
// merge shifts the sum by the rounding of x c (up to 5e-4 in log-prob at |x| ~ 1e4, compounding
// over a row's ~10 merge levels).
__device__ __forceinline__ float reference(float x, float c) { return __fmul_rn(x, c); }

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

// The Gumbel noise -log(-log u) of element j for the top-k / top-p draw, u in (0, 1) from 24
// bits k of a hash of the row's (seed, step) bits and j: u = (k + 0.5) / 2^24 in fp32, clamped
// below 1 (k = 2^24 - 1 would round to u = 1, G = +inf).
__device__ __forceinline__ float gumbel(uint64_t row_bits, int64_t j) {
  const uint32_t k = noise_bits(row_bits + uint64_t(j + 1) * kStride + kGolden);
  const float u = k == 0xFFFFFFu ? 0x1.fffffep-1f : (float(k) + 0.5f) * (1.0f / 16777216.0f);
  return -logf(-logf(u));
}

// Per thread or merged: the first argmax of x (NaN never counts) and the softmax denominator
// sum_j 2^(x_j c - mc) with c = log2(e) / t and mc = reference(best, c) (0 while best = -inf).
// Index "none" = v.
struct Partial {
  float best;
  int32_t best_i;
  float sum;
};

// A group's max and its sum relative to fl(max * c), kept for the inverse-CDF walk.
struct GroupMass {
  float best, sum;
};

// (value, index) pairs: the larger wins, ties go to the smaller index. Symmetric, so any merge
// order gives the same pair.
__device__ __forceinline__ void keep_max(float& value, int32_t& index, float v2, int32_t i2) {
  if (v2 > value || (v2 == value && i2 < index)) value = v2, index = i2;
}

// Symmetric too (the two rescaled sums are added, and fp32 addition commutes), so both lanes
// of a shuffle get the same bits.
__device__ Partial merge(Partial a, const Partial& b, float c) {
  const float best = fmaxf(a.best, b.best);
  if (best != -INFINITY) {  // rescale both sums to the new reference (a side at -inf holds 0 or NaN)
    const float ref = reference(best, c);
    if (a.best != -INFINITY) a.sum *= exp2f(reference(a.best, c) - ref);
    a.sum += b.best != -INFINITY ? b.sum * exp2f(reference(b.best, c) - ref) : b.sum;
  } else {
    a.sum += b.sum;
  }
  keep_max(a.best, a.best_i, b.best, b.best_i);
  return a;
}

__device__ Partial shfl_xor(const Partial& p, int offset) {
  return Partial{gpu_shfl_xor(p.best, offset), gpu_shfl_xor(p.best_i, offset), gpu_shfl_xor(p.sum, offset)};
}

// The 32-lane group's merged partial, to every lane (a fixed xor tree).
__device__ Partial warp_merge(Partial p, float c) {
  for (int offset = 16; offset > 0; offset >>= 1) p = merge(p, shfl_xor(p, offset), c);
  return p;
}

// The block's merged partial from each warp's, to every thread: the warps in order.
__device__ Partial block_merge(Partial p, float c, Partial* scratch) {
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

// The temperature a row computes with: t, or 1 for greedy rows (t <= 0 or NaN).
__device__ __forceinline__ float row_temperature(float t) { return t > 0.0f ? t : 1.0f; }

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
  s.temp = row_temperature(t);
  s.c = kLog2e / s.temp;
  s.k = top_k[row];
  s.p = top_p[row];
  s.top_k_on = !s.greedy && s.k > 0 && int64_t(s.k) < v;
  s.top_p_on = !s.greedy && s.p < 1.0f;
  s.draw = !s.greedy && !s.top_k_on && !s.top_p_on;
  s.row_bits = splitmix64(splitmix64(seeds[row]) + step * kGolden);
  return s;
}

// How a row is cut, a function of v, the split configuration and `head` only (so the same for
// 16-bit rows and their fp32 conversion at the same element offset from an aligned allocation):
// `head` scalar elements up to quad alignment (16 bytes in fp32, 8 in 16-bit), n4 quads, then
// fewer than 4 tail elements. Split s owns quads [s per_split, (s + 1) per_split), and within
// it warp w a contiguous run of per_warp of them: group g = s * kWarps + w. Group 0 also owns the
// head and the last group the tail, so the groups cover [0, v) in index order.
struct RowLayout {
  int32_t v, head, n4, splits, per_split, per_warp;

  template <class T>
  __device__ RowLayout(const T* x, int32_t v_, int32_t splits_, int32_t per_split_) : v(v_), splits(splits_) {
    constexpr uintptr_t kQuadBytes = 4 * sizeof(T);
    const uintptr_t misalign = reinterpret_cast<uintptr_t>(x) & (kQuadBytes - 1);
    head = min(v, int32_t(((kQuadBytes - misalign) & (kQuadBytes - 1)) / sizeof(T)));
    n4 = (v - head) / 4;
    per_split = splits == 1 ? n4 : per_split_;                      // the launcher's figure assumes head = 0
    per_warp = ((per_split + kWarps - 1) / kWarps + 31) / 32 * 32;  // whole 32-quad warp loads
  }
  __device__ int32_t groups() const { return splits * kWarps; }
  __device__ int32_t tail() const { return head + 4 * n4; }
  // Quads [qb, qe) of group g.
  __device__ void quads(int32_t g, int32_t& qb, int32_t& qe) const {
    const int32_t s = g / kWarps, w = g % kWarps;
    const int32_t sb = min(n4, s * per_split), se = min(n4, sb + per_split);
    qb = min(se, sb + w * per_warp);
    qe = min(se, qb + per_warp);
  }
  // Elements [eb, ee) of group g.
  __device__ void elements(int32_t g, int32_t& eb, int32_t& ee) const {
    int32_t qb, qe;
    quads(g, qb, qe);
    eb = g == 0 ? 0 : head + 4 * qb;
    ee = g == groups() - 1 ? v : head + 4 * qe;
  }
};

// One lane's share of group g of row x: lane l reads quads qb + 32 i + l (i = 0, 1, ...), so a
// warp's loads are contiguous, 4 quads in flight per lane; lanes of warp 0 of split 0 also take
// the head, lanes of the last group the tail. A lane visits its indices in increasing order, so
// within a lane "strictly larger" is the tie rule; the trip count is the same for every lane
// of the warp (its shuffles after the loop need every lane).
template <class T>
__device__ Partial group_pass(const T* __restrict__ x, const RowLayout& layout, int32_t g, float c) {
  const int32_t none = layout.v, lane = threadIdx.x & 31;
  float best = -INFINITY, sum = 0.0f, mc = 0.0f;
  int32_t best_i = none;
  auto scalar = [&](int32_t j) {  // head and tail elements, one at a time
    const float xj = to_float(x[j]);
    if (xj > best) {
      if (best != -INFINITY) sum *= exp2f(mc - reference(xj, c));
      best = xj, best_i = j, mc = reference(xj, c);
    } else if (xj == best && best_i == none) {
      best_i = j;  // a row of -inf so far: the first index, as keep_max has it
    }
    sum += exp2f(fmaf(xj, c, -mc));
  };
  if (g == 0 && lane < layout.head) scalar(lane);

  int32_t qb, qe;
  layout.quads(g, qb, qe);
  using Quad = typename QuadOf<T>::type;
  const Quad* x4 = reinterpret_cast<const Quad*>(x + layout.head);
  for (int32_t base = qb; base < qe; base += kWarpStep) {
    float xv[4 * kLoadsInFlight];
    bool valid[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int32_t f = base + u * 32 + lane;
      valid[u] = f < qe;
      const float4 r = to_quad<T>(valid[u] ? x4[f] : QuadOf<T>::padding());
      xv[4 * u] = r.x, xv[4 * u + 1] = r.y, xv[4 * u + 2] = r.z, xv[4 * u + 3] = r.w;
    }
    auto first_index = [&](float value) {  // the first valid element equal to value, or none
      int32_t found = none;
#pragma unroll
      for (int i = 4 * kLoadsInFlight - 1; i >= 0; --i)
        if (valid[i >> 2] && xv[i] == value) found = layout.head + 4 * (base + (i >> 2) * 32 + lane) + (i & 3);
      return found;
    };
    float cm = -INFINITY;
#pragma unroll
    for (int i = 0; i < 4 * kLoadsInFlight; ++i) cm = fmaxf(cm, xv[i]);  // NaN never counts
    if (cm > best) {  // a new max (rare after the first steps): rescale the sum to it
      if (best != -INFINITY) sum *= exp2f(mc - reference(cm, c));
      best = cm, best_i = first_index(cm), mc = reference(cm, c);
    } else if (cm == best && best_i == none) {
      best_i = first_index(cm);
    }
    float q[4 * kLoadsInFlight];  // 2^(x c - mc) = e^(z - z_max); padding is -inf: adds 0
#pragma unroll
    for (int i = 0; i < 4 * kLoadsInFlight; ++i) q[i] = fast_exp2(fmaf(xv[i], c, -mc));
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) sum += (q[4 * u] + q[4 * u + 1]) + (q[4 * u + 2] + q[4 * u + 3]);
  }
  if (g == layout.groups() - 1)
    for (int32_t j = layout.tail() + lane; j < layout.v; j += 32) scalar(j);
  return Partial{best, best_i, sum};
}

// The block's partial of split `split` of row x, to every thread; each warp's (its group's)
// max and sum go to groups[warp].
template <class T>
__device__ Partial row_slice(const T* x, const RowLayout& layout, int32_t split, float c, GroupMass* groups,
                             Partial* scratch) {
  const int32_t warp = threadIdx.x >> 5;
  const Partial p = warp_merge(group_pass(x, layout, split * kWarps + warp, c), c);
  if ((threadIdx.x & 31) == 0) groups[warp] = GroupMass{p.best, p.sum};
  return block_merge(p, c, scratch);
}

// Exclusive prefix sum over the 32 lanes in lane order, and the lanes' total (the same bits in
// every lane): a butterfly whose additions depend on nothing but the lane numbers.
__device__ double warp_exclusive_scan(double value, double& total) {
  const int lane = threadIdx.x & 31;
  double before = 0.0;
  total = value;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const double other = gpu_shfl_xor(total, offset);
    if (lane & offset) before = other + before;  // the partner's half comes first
    total = total + other;                       // both partners add the same two numbers
  }
  return before;
}

// The same over the block in thread order (the warps' totals added in warp order).
__device__ double block_exclusive_scan(double value, double& total, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double warp_total;
  const double before = warp_exclusive_scan(value, warp_total);
  __syncthreads();  // scratch may still be read by an earlier call
  if (lane == 0) scratch[warp] = warp_total;
  __syncthreads();
  double offset = 0.0;
  total = 0.0;
  for (int w = 0; w < kWarps; ++w) {
    if (w == warp) offset = total;
    total += scratch[w];
  }
  return offset + before;
}

// q_j = 2^(x_j c - ref) of the kRun elements [r0, r0 + kRun) clipped to `end` (0 past it), and
// their fp32 sum in index order: four quad loads where the run is whole and quad-aligned,
// scalar loads otherwise (the same values).
template <class T>
__device__ float run_weights(const T* __restrict__ x, int32_t r0, int32_t end, float c, float ref, float (&q)[kRun]) {
  float xv[kRun];
  if (r0 + kRun <= end && (reinterpret_cast<uintptr_t>(x + r0) & (4 * sizeof(T) - 1)) == 0) {
    using Quad = typename QuadOf<T>::type;
    const Quad* p = reinterpret_cast<const Quad*>(x + r0);
#pragma unroll
    for (int u = 0; u < kRun / 4; ++u) {
      const float4 r = to_quad<T>(p[u]);
      xv[4 * u] = r.x, xv[4 * u + 1] = r.y, xv[4 * u + 2] = r.z, xv[4 * u + 3] = r.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kRun; ++i) xv[i] = r0 + i < end ? to_float(x[r0 + i]) : -INFINITY;
  }
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kRun; ++i) {
    q[i] = fast_exp2(fmaf(xv[i], c, -ref));
    sum += q[i];
  }
  return sum;
}

struct DrawScratch {
  double d[kWarps];
  int32_t i[kWarps];
  int32_t group;
  double fraction;
};

// The inverse-CDF draw of an untruncated row, to every thread (see the header comment).
// `groups` holds the row's layout.groups() (max, sum) pairs; `all` is the row's merged partial.
template <class T>
__device__ int32_t draw_by_cdf(const T* __restrict__ x, const RowLayout& layout, const GroupMass* groups,
                               const Partial& all, const RowSetup& rs, int32_t argmax, DrawScratch& sh) {
  if (!(all.sum > 0.0f && all.sum < INFINITY)) return argmax;  // 0, NaN or +inf: see the header
  const float c = rs.c, ref = reference(all.best, c);
  const double u = double(rs.row_bits >> 11) * 0x1p-53;  // cpu_ref's uniform_draw(seed, step)

  // The group: warp 0, lane l walking its own run of consecutive groups.
  if (threadIdx.x < 32) {
    const int32_t lane = threadIdx.x, count = layout.groups(), per_lane = (count + 31) / 32;
    const int32_t gb = min(count, lane * per_lane), ge = min(count, gb + per_lane);
    auto mass = [&](int32_t g) {  // the group's sum rescaled to the row's max, as merge does
      const GroupMass m = groups[g];
      return m.best != -INFINITY ? double(m.sum * exp2f(reference(m.best, c) - ref)) : 0.0;
    };
    double own = 0.0;
    for (int32_t g = gb; g < ge; ++g) own += mass(g);
    double total;
    double cum = warp_exclusive_scan(own, total);
    const double target = u * total;
    int32_t pick = INT_MAX, last = -1;
    double fraction = 1.0;
    for (int32_t g = gb; g < ge; ++g) {
      const double m = mass(g);
      if (m > 0.0) {
        last = g;
        if (pick == INT_MAX && cum + m > target) pick = g, fraction = fmin(fmax((target - cum) / m, 0.0), 1.0);
      }
      cum += m;
    }
    int32_t first = pick;
    for (int offset = 16; offset > 0; offset >>= 1) {
      first = min(first, gpu_shfl_xor(first, offset));
      last = max(last, gpu_shfl_xor(last, offset));
    }
    // Rounding may leave the target past the last group: its end (the fallback below).
    if (first == INT_MAX && lane == 0) sh.group = last, sh.fraction = 1.0;
    if (first != INT_MAX && pick == first) sh.group = pick, sh.fraction = fraction;
  }
  __syncthreads();
  const int32_t group = sh.group;
  const double fraction = sh.fraction;
  if (group < 0) return argmax;  // no group with mass after rescaling: degenerate, as above

  // Re-read the group: its total R, then the first element, in index order, whose prefix sum
  // exceeds fraction * R. Thread t takes the run [tile + kRun t, tile + kRun (t + 1)); a run's
  // sum is fp32 (rounding relative to the run's mass, ~1e-7), prefixes over runs are fp64 (an
  // fp32 prefix over ~10^4 elements would round each token's share by up to ~1e-3 of itself).
  int32_t eb, ee;
  layout.elements(group, eb, ee);
  float q[kRun];
  double own = 0.0;
  for (int32_t tile = eb; tile < ee; tile += kTile)
    own += run_weights(x, tile + kRun * int32_t(threadIdx.x), ee, c, ref, q);
  const double group_total = block_reduce(own, SumOp{}, 0.0, sh.d);
  if (!(group_total > 0.0)) return argmax;  // every q_j flushed to 0 (mass below 2^-126 of the max)
  const double target = fraction * group_total;
  double carry = 0.0;
  int32_t last = -1;  // this thread's last element with q_j > 0
  for (int32_t tile = eb; tile < ee; tile += kTile) {
    const int32_t r0 = tile + kRun * int32_t(threadIdx.x);
    const float mine = run_weights(x, r0, ee, c, ref, q);
    double tile_total;
    // What is left of the target at the run's start: the run's own scale, so fp32 suffices.
    const float left = float(target - (carry + block_exclusive_scan(mine, tile_total, sh.d)));
    float prefix = 0.0f;  // the same additions as run_weights' sum
    int32_t found = INT_MAX;
#pragma unroll
    for (int i = 0; i < kRun; ++i) {
      prefix += q[i];
      if (q[i] > 0.0f) {  // a -inf logit (q = 0) is never the first to pass the target
        last = r0 + i;
        if (found == INT_MAX && prefix > left) found = r0 + i;
      }
    }
    found = block_reduce(found, SmallerOp{}, INT_MAX, sh.i);
    if (found != INT_MAX) return found;
    carry += tile_total;
  }
  // Rounding left the target at or past the re-read total: the group's last element with mass.
  return block_reduce(last, LargerOp{}, -1, sh.i);
}

// grid (rows, splits), block kThreads: the partial of (row, split) into parts[row * splits +
// split], its groups' into groups[(row * splits + split) * kWarps + warp].
template <class T>
__global__ void __launch_bounds__(kThreads)
    slice_kernel(const T* __restrict__ logits, int32_t v, int32_t splits, int32_t per_split,
                 const float* __restrict__ temperature, Partial* __restrict__ parts, GroupMass* __restrict__ groups) {
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
  __shared__ Partial scratch[kWarps];
  const int64_t row = blockIdx.x;
  const float c = kLog2e / row_temperature(temperature[row]);  // row_setup's c
  const T* x = logits + row * v;
  const RowLayout layout(x, v, splits, per_split);
  const int64_t at = row * splits + blockIdx.y;
  const Partial p = row_slice(x, layout, blockIdx.y, c, groups + at * kWarps, scratch);
  if (threadIdx.x == 0) parts[at] = p;
}

// grid.x = rows, block = kThreads. parts = NULL: no workspace, the block reads its row itself
// (one split); otherwise the row's splits and groups as slice_kernel left them.
template <class T>
__global__ void __launch_bounds__(kThreads)
    finish_kernel(const T* __restrict__ logits, int32_t v, int32_t splits, int32_t per_split,
                  const Partial* __restrict__ parts, const GroupMass* __restrict__ groups,
                  const float* __restrict__ temperature, const int32_t* __restrict__ top_k,
                  const float* __restrict__ top_p, const uint64_t* __restrict__ seeds, uint64_t step,
                  int64_t* __restrict__ out_tokens, float* __restrict__ out_logprobs) {
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
  __shared__ Partial scratch[kWarps];
  __shared__ GroupMass own_groups[kWarps];
  __shared__ DrawScratch draw_scratch;
  __shared__ float scratch_f[kWarps];
  __shared__ unsigned long long scratch_u[kWarps];

  const int64_t row = blockIdx.x;
  const T* x = logits + row * v;
  const RowSetup rs = row_setup(row, v, temperature, top_k, top_p, seeds, step);
  const float temp = rs.temp;
  const RowLayout layout(x, v, parts != nullptr ? splits : 1, per_split);

  Partial all;
  const GroupMass* row_groups = own_groups;
  if (parts == nullptr) {
    all = row_slice(x, layout, 0, rs.c, own_groups, scratch);
  } else {
    // Warp 0 merges the row's partials: lane l takes l, l + 32, ... in order, then a fixed tree.
    if (threadIdx.x < 32) {
      Partial p{-INFINITY, v, 0.0f};
      for (int32_t s = threadIdx.x; s < splits; s += 32) p = merge(p, parts[row * splits + s], rs.c);
      p = warp_merge(p, rs.c);
      if (threadIdx.x == 0) scratch[0] = p;
    }
    __syncthreads();
    all = scratch[0];
    row_groups = groups + row * layout.groups();
  }
  const int32_t argmax = all.best_i < v ? all.best_i : 0;
  const float z_max = all.best / temp;  // = max(x) / t: division by t > 0 is monotone, correctly rounded

  int32_t token = argmax;  // greedy rows
  if (rs.draw) {
    token = draw_by_cdf(x, layout, row_groups, all, rs, argmax, draw_scratch);
  } else if (rs.top_k_on || rs.top_p_on) {
    // top-k: the largest key K with count(key >= K) >= k; kept_k = {key(x) >= K}.
    uint32_t key_floor = 0;  // every token
    if (rs.top_k_on) {
      uint64_t lo = 0, hi = uint64_t(1) << 32;  // count(>= lo) >= k; count(>= hi) = 0 < k
      while (hi - lo > 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        unsigned long long count = 0;
        for (int64_t j = threadIdx.x; j < v; j += kThreads) count += ordered_key(to_float(x[j])) >= mid;
        count = block_reduce(count, SumOp{}, 0ull, scratch_u);
        if (count >= (unsigned long long)rs.k)
          lo = mid;
        else
          hi = mid;
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
        if (g < limit)
          hi = mid;
        else
          lo = mid;
      }
      q_floor = hi;
    }

    // Gumbel-max over the kept tokens: argmax of log q_j + G_j. The argmax itself is always
    // kept, so the set is never empty.
    float pick = -INFINITY;
    int32_t pick_i = v;
    for (int32_t j = threadIdx.x; j < v; j += kThreads) {
      const float xj = to_float(x[j]);
      if (ordered_key(xj) < key_floor) continue;
      const float z = xj / temp - z_max;  // log q_j
      if (q_floor != 0 && __float_as_uint(expf(z)) < q_floor) continue;
      keep_max(pick, pick_i, z + gumbel(rs.row_bits, j), j);
    }
    // The block's best (value, index), keep_max being symmetric: a fixed tree, then warps in order.
    for (int offset = 16; offset > 0; offset >>= 1)
      keep_max(pick, pick_i, gpu_shfl_xor(pick, offset), gpu_shfl_xor(pick_i, offset));
    __syncthreads();  // scratch may still be read by the merge above
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = Partial{pick, pick_i, 0.0f};
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kWarps; ++w) keep_max(pick, pick_i, scratch[w].best, scratch[w].best_i);
      token = pick_i < v ? pick_i : argmax;
    }
  }
  if (threadIdx.x == 0) {
    out_tokens[row] = token;
    // log q_token - log S with the sum taken against the reference it was computed with: every
    // term is 2^(x_j c - fl(max c)), so log S carries fl(max c) - max c (up to half an ulp of
    // max c: 5e-4 at |max| ~ 1e4, T = 1), which the exact residual r = max c - fl(max c) (one
    // fma) puts back; and x_token - max before the division by T (exact for nearby values)
    // instead of two quotients each rounded at the logits' magnitude.
    const float r = isfinite(all.best) ? fmaf(all.best, rs.c, -reference(all.best, rs.c)) : 0.0f;
    out_logprobs[row] = (to_float(x[token]) - all.best) / temp - logf(all.sum) + r * 0.6931471805599453f;
  }
}

// Blocks of slice_kernel<T> resident per SM, for the split count's model: asked once per type
// (40-42 registers on sm_80 / sm_90: 5-6 blocks of 256 threads), 4 if the runtime cannot say.
template <class T>
int slice_blocks_per_sm() {
  static const int blocks = [] {
    int n = 0;
    if (gpuOccupancyMaxActiveBlocksPerMultiprocessor(&n, slice_kernel<T>, kThreads, 0) == gpuSuccess && n > 0) return n;
    (void)gpuGetLastError();
    return 4;
  }();
  return blocks;
}

// The two launches for logits of type T (splits and workspace as below).
template <class T>
gpuError_t launch_sample_as(const T* logits, int64_t b, int64_t v, const float* temperature, const int32_t* top_k,
                            const float* top_p, const uint64_t* seeds, uint64_t step, int64_t* out_tokens,
                            float* out_logprobs, gpuStream_t stream) {
  int device = 0;
  if (gpuGetDevice(&device) != gpuSuccess) return gpuGetLastError();
  const WorkspacePool state = workspace_pool(device);

  // Splits: the slice kernel is bound by its loads, so its time is about (waves of blocks) x
  // (quads per block). Pick the split count with the least such time (ties: fewer splits), each
  // split a multiple of kThreads quads and at least 4 kThreads of them. The choice depends on v
  // alone, not on the logits' type: 16-bit rows split as their fp32 conversion (the occupancy
  // query is the fp32 kernel's for that reason). More splits also make the finish kernel's
  // re-read (one group, 1/8 of a split) shorter.
  const int64_t n4 = v / 4, min_split = 4 * kThreads;
  int64_t splits = 1, per_split = n4;
  if (state.pool != nullptr && state.sms > 0 && n4 >= 2 * min_split) {
    const int64_t resident = int64_t(slice_blocks_per_sm<float>()) * state.sms;
    int64_t best_cost = (b + resident - 1) / resident * n4;
    for (int64_t want = 2; want <= std::min<int64_t>(n4 / min_split, 128); ++want) {
      const int64_t per = ((n4 + want - 1) / want + kThreads - 1) / kThreads * kThreads;
      const int64_t count = (n4 + per - 1) / per;
      const int64_t cost = (b * count + resident - 1) / resident * per;
      if (cost < best_cost) best_cost = cost, splits = count, per_split = per;
    }
  }
  // Workspace: b * splits partials, then b * splits * kWarps group masses (4-byte aligned both).
  void* workspace = nullptr;  // stays NULL on failure: the finish kernel then reads rows itself
  const size_t partials = size_t(b * splits);
  if (splits > 1 && gpuMallocFromPoolAsync(&workspace, partials * (sizeof(Partial) + kWarps * sizeof(GroupMass)),
                                           state.pool, stream) != gpuSuccess)
    (void)gpuGetLastError(), workspace = nullptr;
  Partial* parts = static_cast<Partial*>(workspace);
  GroupMass* groups = parts != nullptr ? reinterpret_cast<GroupMass*>(parts + partials) : nullptr;
  gpuError_t launched = gpuSuccess;
  if (parts != nullptr)
    launched = launch_kernel(slice_kernel<T>, dim3(unsigned(b), unsigned(splits)), kThreads, 0, stream, logits,
                             int32_t(v), int32_t(splits), int32_t(per_split), temperature, parts, groups);
  if (launched == gpuSuccess)
    launched = launch_kernel(finish_kernel<T>, dim3(unsigned(b)), kThreads, 0, stream, logits, int32_t(v),
                             parts ? int32_t(splits) : 1, int32_t(per_split), static_cast<const Partial*>(parts),
                             static_cast<const GroupMass*>(groups), temperature, top_k, top_p, seeds, step, out_tokens,
                             out_logprobs);
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
