// cuda: decode attention over the paged KV cache on tensor cores (mma.sync m16n8k16, bf16 and
// f16), flash-decoding style, and the launcher the kernel table calls
// (launch_paged_attention_decode, kernels.hpp). f32, head sizes other than 64/128, block sizes
// that are not a multiple of 16, misaligned tensors, pre-sm_80 devices and HIP go to the CUDA-core
// kernel of attention_kernel.cu (launch_paged_attention_decode_simt) unchanged.
//
// Why: the CUDA-core kernel spends ~450 FMAs + 8 shuffles per lane on each 16-position tile of a
// GQA-7 group, so it is issue-bound at ~1.4-1.8 TB/s. Here the per-16-position work of one warp
// is 8 ldmatrix + 16 mma (12 with P rounded once) + ~50 scalar instructions: HBM-bound. Measured
// on H200 (docs/benchmarks.md): 1.9x at B=256 (3.1-3.8 TB/s), 2.3-3.5x at B=32..128, in CUDA graphs.
//
// Work decomposition
//  - One CTA per (sequence, KV head, <=16 query heads of its group, context partition); grid =
//    (KV heads x head blocks, partitions, B), KV head fastest so the two KV heads of a sequence,
//    which interleave at 128-byte granularity in [block, slot, K, S], are read at the same time.
//    The group's query heads are the M rows of the mma (7 of 16 for Qwen2.5 used in Q K^T).
//  - W warps per CTA (4 by default); warp w owns chunks w, w + W, ... of the partition; a chunk is
//    16 * NG positions (NG = 1: 16). Each warp is an independent pipeline: STG shared-memory
//    stages of its own (K and V of one chunk each), filled with 16-byte cp.async.cg, STG - 1
//    chunks in flight while it computes one. A lane reads data other lanes copied, so every
//    stage is fenced by cp.async.wait_group + __syncwarp (no CTA barrier in the main loop).
//    Block tables are read one chunk ahead (their latency stays off the critical path); with
//    block_size a multiple of 16 a 16-position group never crosses a cache block: one table
//    entry per group.
//  - Shared rows are HEAD * 2 bytes with the 16-byte piece c of row r stored at c ^ (r & 7), so
//    the 8 row addresses of every ldmatrix phase hit 8 distinct bank groups (no conflicts), and a
//    warp's cp.async writes stay conflict-free too.
//
// Per chunk, per warp (fragment layouts as in the PTX ISA, "Matrix Fragments for mma.m16n8k16":
// groupID g = lane >> 2, t = lane % 4; A regs (g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..);
// B regs (k = 2t.., n = g), (k = 2t+8.., n = g); C (g, 2t..) then (g+8, 2t..)):
//  1. S = Q K^T: A = Q (rows = heads, loaded once into registers as A fragments), B = K rows
//     straight from shared memory with ldmatrix (K stored [position][dim] is B "col"). 16
//     positions x HEAD dims = 2 n-tiles x HEAD/16 k-steps (8 mma at head 64).
//  2. Online softmax in registers, fp32, log2 units (scores * scale * log2e, ex2.approx):
//     a thread holds 4 scores per 16 positions of head g (and of head g + 8 when the CTA has more
//     than 8 heads); row max = 2 quad shuffles; the running sum stays per thread until the end.
//  3. O^T += V^T P^T, the transposed product: M = head dims, N = 8 query heads, K = positions.
//     Its B operand P^T (k = position 2t.., n = head g) is exactly what the S accumulator of
//     thread (g, t) holds, converted pairwise to bf16/f16 (no shuffles, no shared memory), and
//     its A operand V^T comes from ldmatrix.trans of the stored V rows. With N = heads the
//     accumulators are 7/8 useful (16 fp32 registers at head 64) instead of 7/16, and the P.V
//     mma count halves (4 per 16 positions at head 64; 8 when the CTA has > 8 heads). By
//     default P goes in as two terms, hi = round(p) and lo = round(p - hi) (twice the P.V mma:
//     8 + 8 per 16 positions, still far below what the memory time hides); see Numerics.
//     Rescaling O^T by a head's factor needs the factor of heads 2t, 2t+1: 2 shuffles a chunk.
//  4. End: the W warps' (max, sum, O) merge through shared memory (reusing the stages) in a
//     fixed order (deterministic); out = O / sum rounded to the dtype, or, with partitions, an
//     unnormalised fp32 partial (O, max, sum) to a workspace and a combine kernel.
//
// Sizes (head 64, variant 0 = W4.C16.S3: 4 warps, 16-position chunks, 3 stages): 4 KB (K + V)
// per chunk; 48 KB dynamic + 0.5 KB static shared per CTA; 80 registers (125 with > 8 heads); 4
// CTAs (16 warps) per SM by shared memory, so 512 CTAs (B=256, K=2) are one wave on 132 SMs;
// 16 warps x 2 chunks x 4 KB = 128 KB in flight per SM (Little's law needs ~40-60 KB at 4.8 TB/s
// and ~1-1.5 us loaded latency). The CTA's first table entries are read together with its
// context length (unsplit: their positions do not depend on it), so the start-up chain is
// length+table -> K/V, not length -> table -> K/V.
// Configurations (head 64), chosen by grid size from a sweep of seven on the H200: >= 3 CTAs per
// SM W4.C16.S3 (the default above); more than one W4.C32.S2 (4 warps, 32-position chunks, 2
// stages, 64 KB, 3 CTAs/SM: fewer per-chunk overheads); below that W8.C32.S2 (8 warps, 128 KB,
// one CTA per SM, a deeper pipeline per CTA). Head 128: W4.C16.S3 (96 KB, 2 CTAs/SM). P rounded
// once (no split) was 1-3% faster at B=256; the split was kept for its accuracy (see Numerics).
//
// Split-K: measured on H200, splitting lost everywhere from B*K = 64 CTAs up (the combine kernel
// and the workspace's stream-ordered alloc/free nodes cost ~2-3 us a call, more than the extra
// parallelism wins). So automatic partitions are 1 unless the grid has fewer than SMs / 4 CTAs
// (B*K < 33 here), then ceil(SMs / CTAs) capped at one per 256 positions of the table's length.
// The partition size is derived on the device from each sequence's length (a multiple of the
// chunk, >= 64), as in the old kernel; the workspace comes from workspace_pool's stream-ordered
// pool (graph-capturable).
//
// Numerics vs the fp32 CUDA-core kernel: Q K^T products are exact and accumulated in fp32 by the
// tensor core; softmax is fp32 (ex2.approx); P.V's products are exact, accumulated in fp32.
// The only new rounding is P's conversion to the input dtype for the mma. Rounded once (variant
// 1, as flash attention does), each weight carries a relative error <= u (bf16 2^-8, f16 2^-11);
// the divisor then sums the rounded p, so the output is a convex combination of V rows off by at
// most u * sum_i p_i |v_i - out| / sum_i p_i: measured on H200 up to ~5 ulps of small outputs
// (|out| ~ 0.1) in bf16, i.e. ~4e-3 absolute for unit-variance V. Split (default), the weight
// error is <= u^2 (bf16 2^-16) and the result matches the fp32 kernel to within output rounding.
#include "dependent_launch.cuh"
#include "kernels.hpp"
#include "layer_ops.cuh"
#include "workspace_pool.hpp"

#if !(defined(VERLPP_GPU_HIP) && VERLPP_GPU_HIP)

#include "mma_ptx.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace verlpp::cuda {
namespace {

constexpr int kMaxParts = 128;
constexpr int kMinPartition = 64;  // positions; a multiple of every chunk size
constexpr float kLog2e = 1.4426950408889634f;

struct Params {
  const void *q, *k, *v;
  const int32_t *tables, *lens;
  void* out;
  int64_t q_stride;  // elements between two sequences' q rows
  // rotary_paged_attention_decode (ROPE kernels only): the new token's k and v rows (at their
  // strides), its position and slot, and the caches it is stored into (k, v above, writable).
  const void *k_new, *v_new;
  int64_t k_new_stride, v_new_stride;
  const int64_t *positions, *slots;
  const float* inv_freq;
  int64_t slot_count;  // num_blocks * block_size: a slot outside [0, slot_count) is stored nowhere
  float* ws_acc;       // [B, H, parts, S] unnormalised partial outputs (parts > 1)
  float* ws_stats;     // [B, H, parts, 2] their (max in log2 units, sum)
  int heads, group, kv_count, head_blocks, heads_per_block;
  int block_size, bs_shift, max_blocks, parts, part_align;
  float scale_log2;
};

__device__ __forceinline__ int context_length(const Params& a, int seq) {
  const int len = __ldg(a.lens + seq);
  const int max_len = a.max_blocks * a.block_size;
  return len < 0 ? 0 : len > max_len ? max_len : len;  // never read past the block table row
}

// Positions per partition (parts > 1); the attention and combine kernels agree on it.
__device__ __forceinline__ int partition_size(int len, int parts, int align) {
  const int size = ((len + parts - 1) / parts + align - 1) / align * align;
  return size > kMinPartition ? size : kMinPartition;
}

__device__ __forceinline__ float fast_exp2(float x) {  // 2^x, ~2 ulp; 2^-inf = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// (lo, hi) rounded to T and packed (lo in the low half, as mma fragments order elements);
// `rounded` gets the rounded values back as fp32.
template <class T>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi, float2& rounded) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    rounded = __bfloat1622float2(h);
    return reinterpret_cast<const uint32_t&>(h);
  } else {
    const __half2 h = __floats2half2_rn(lo, hi);
    rounded = __half22float2(h);
    return reinterpret_cast<const uint32_t&>(h);
  }
}

// P of a (lo, hi) pair of positions as mma B fragments. SPLIT: p = hi + lo with both terms in T
// (hi = round(p), lo = round(p - hi)), so P.V is good to ~2^-16 (bf16) relative per weight and
// the divisor is the fp32 sum of p; else the single rounded term, and the divisor sums the
// rounded values (the weights P.V applies then sum exactly to it).
template <class T, bool SPLIT>
__device__ __forceinline__ void p_fragment(float p0, float p1, uint32_t& hi, uint32_t& lo, float& sum) {
  float2 r;
  hi = pack_pair<T>(p0, p1, r);
  if constexpr (SPLIT) {
    float2 unused;
    lo = pack_pair<T>(p0 - r.x, p1 - r.y, unused);
    sum += p0 + p1;
  } else {
    lo = 0u;
    sum += r.x + r.y;
  }
}

template <class T>
__device__ __forceinline__ void store_pair(T* p, float x, float y) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
  else
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x, y);
}

__device__ __forceinline__ uint32_t load_u32(const void* p) { return __ldg(static_cast<const unsigned int*>(p)); }

// ---- rotary_paged_attention_decode's prologue ------------------------------------------------
// Run by every CTA of a (sequence, KV head) before its pipeline starts: the token's cos/sin into
// `cs` (rope_cos_sin, as rotary_kv_store computes them); the CTA's q fragments rotated in
// registers (a thread holds columns c and c + HEAD/2 of its rows, in k-steps kk and kk + KS/2);
// the token's K row rotated and its V row copied into `rows`; and, by one CTA per (sequence, KV
// head) (`stores`), both rows into the caches at the token's slot. The roundings are
// rotary_kv_store's (layer_ops.cuh), so q, K and V carry exactly the bits that kernel would have
// handed to the attention: the output is the unfused pair's, bit for bit.
template <class T>
__device__ __forceinline__ void unpack_pair(uint32_t u, T (&v)[2]) {
  memcpy(v, &u, sizeof(u));
}
template <class T>
__device__ __forceinline__ uint32_t pack_values(const T (&v)[2]) {
  uint32_t u;
  memcpy(&u, v, sizeof(u));
  return u;
}

template <class T, int HEAD, int W>
__device__ __forceinline__ void rope_prologue(const Params& a, int seq, int kv, bool stores,
                                              uint32_t (&qa)[HEAD / 16][4], float* cs, T* rows) {
  constexpr int HALF = HEAD / 2, KS = HEAD / 16;
  const float position = float(__ldg(a.positions + seq));
  for (int j = threadIdx.x; j < HALF; j += W * 32)
    rope_cos_sin<T>(position, __ldg(a.inv_freq + j), cs[j], cs[HALF + j]);
  __syncthreads();
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int kk = 0; kk < KS / 2; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // registers 2, 3 hold columns 2t + 8, +9 (A fragment layout)
      const int c = 16 * kk + 2 * t + ((r & 2) ? 8 : 0);
      T lo[2], hi[2], new_lo[2], new_hi[2];
      unpack_pair(qa[kk][r], lo);
      unpack_pair(qa[kk + KS / 2][r], hi);
#pragma unroll
      for (int e = 0; e < 2; ++e)
        rotate_pair<T>(to_float(lo[e]), to_float(hi[e]), cs[c + e], cs[HALF + c + e], new_lo[e], new_hi[e]);
      qa[kk][r] = pack_values(new_lo);
      qa[kk + KS / 2][r] = pack_values(new_hi);
    }
  const T* k_row = static_cast<const T*>(a.k_new) + seq * a.k_new_stride + static_cast<int64_t>(kv) * HEAD;
  const T* v_row = static_cast<const T*>(a.v_new) + seq * a.v_new_stride + static_cast<int64_t>(kv) * HEAD;
  for (int j = threadIdx.x; j < HALF; j += W * 32)
    rotate_pair<T>(to_float(k_row[j]), to_float(k_row[j + HALF]), cs[j], cs[HALF + j], rows[j], rows[j + HALF]);
  for (int j = threadIdx.x; j < HEAD; j += W * 32) rows[HEAD + j] = v_row[j];
  __syncthreads();
  if (!stores) return;
  const int64_t slot = __ldg(a.slots + seq);
  if (slot < 0 || slot >= a.slot_count) return;  // stored nowhere, as rotary_kv_store skips it
  T* k_cache = const_cast<T*>(static_cast<const T*>(a.k)) + (slot * a.kv_count + kv) * HEAD;
  T* v_cache = const_cast<T*>(static_cast<const T*>(a.v)) + (slot * a.kv_count + kv) * HEAD;
  for (int j = threadIdx.x; j < 2 * HEAD; j += W * 32) {
    if (j < HEAD)
      k_cache[j] = rows[j];
    else
      v_cache[j - HEAD] = rows[j];
  }
}

// ---- the attention kernel -----------------------------------------------------------------
// T: __nv_bfloat16 or __half; HEAD: 64 or 128; W warps; chunks of 16 * NG positions; STG stages
// per warp; TWO: the CTA has more than 8 query heads (rows g + 8 of the mma are used too);
// SPLIT: P.V with P as two terms of T (p_fragment); ROPE: rotary_paged_attention_decode (the
// new token's RoPE and cache store first, see rope_prologue).
template <class T, int HEAD, int W, int NG, int STG, bool TWO, bool SPLIT, bool ROPE, int MINB>
__global__ void __launch_bounds__(W * 32, MINB) mma_decode_kernel(const Params a) {
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  static_assert(HEAD == 64 || HEAD == 128, "head size");
  static_assert(STG >= 2 && NG >= 1, "pipeline");
  constexpr int CH = 16 * NG;        // positions per chunk
  constexpr int ROWB = HEAD * 2;     // bytes of one cache row in shared memory
  constexpr int TILEB = CH * ROWB;   // K (or V) bytes of one chunk
  constexpr int STAGEB = 2 * TILEB;  // K then V
  constexpr int CPR = HEAD / 8;      // 16-byte pieces per row
  constexpr int RPP = 32 / CPR;      // rows a warp copies per pass
  constexpr int PASSES = 16 / RPP;   // passes per 16-row group
  constexpr int KS = HEAD / 16;      // k-steps of Q K^T = m-tiles of V^T P^T
  constexpr int NHT = TWO ? 2 : 1;   // 8-head n-tiles of O^T
  constexpr int RED_LD = HEAD + 4;   // merge buffer row (floats): conflict-free scatter
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float st_m[W][16], st_l[W][16];
  __shared__ float rope_cs[ROPE ? HEAD : 1];                 // the token's cos [HEAD / 2], then sin
  __shared__ __align__(16) T new_rows[ROPE ? 2 * HEAD : 8];  // its rotated K row, then its V row

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int seq = blockIdx.z, part = blockIdx.y;
  const int kv = blockIdx.x / a.head_blocks, first = (blockIdx.x % a.head_blocks) * a.heads_per_block;
  const int nh = min(a.heads_per_block, a.group - first);  // >= 1
  const int head0 = kv * a.group + first;

  // Q as the A operand of S = Q K^T (rows = this CTA's heads, zero past nh); loaded before the
  // context length so both latencies overlap.
  uint32_t qa[KS][4];
  {
    const T* qrow =
        static_cast<const T*>(a.q) + static_cast<int64_t>(seq) * a.q_stride + static_cast<int64_t>(head0) * HEAD;
    const T* q_lo = qrow + min(g, nh - 1) * HEAD + 2 * t;  // clamped: always a valid address
    const T* q_hi = qrow + min(g + 8, nh - 1) * HEAD + 2 * t;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      const uint32_t lo0 = load_u32(q_lo + 16 * kk), lo1 = load_u32(q_lo + 16 * kk + 8);
      qa[kk][0] = g < nh ? lo0 : 0u;
      qa[kk][2] = g < nh ? lo1 : 0u;
      if constexpr (TWO) {
        const uint32_t hi0 = load_u32(q_hi + 16 * kk), hi1 = load_u32(q_hi + 16 * kk + 8);
        qa[kk][1] = g + 8 < nh ? hi0 : 0u;
        qa[kk][3] = g + 8 < nh ? hi1 : 0u;
      } else {
        qa[kk][1] = qa[kk][3] = 0u;
      }
    }
  }

  const int32_t* table = a.tables + static_cast<int64_t>(seq) * a.max_blocks;
  const int bs = a.block_size, bs_shift = a.bs_shift, max_len = a.max_blocks * a.block_size;
  auto table_index = [&](int pos) { return bs_shift >= 0 ? pos >> bs_shift : pos / bs; };
  const int len_raw = __ldg(a.lens + seq);
  // Unsplit, the prologue's chunks start at known positions: read their table entries now,
  // bounded by the table row only, so this latency overlaps the length's (entries past the
  // length are never used for an address).
  int pe[STG - 1][NG];
  if (a.parts == 1) {
#pragma unroll
    for (int st = 0; st < STG - 1; ++st)
#pragma unroll
      for (int j = 0; j < NG; ++j) {
        const int gs = (warp + st * W) * CH + 16 * j;
        pe[st][j] = gs < max_len ? __ldg(table + table_index(gs)) : 0;
      }
  }
  const int len = len_raw < 0 ? 0 : len_raw > max_len ? max_len : len_raw;  // never past the table row
  int begin = 0, end = len;
  if (a.parts > 1) {
    const int size = partition_size(len, a.parts, CH);
    begin = part * size;
    end = min(len, begin + size);
    if (begin >= end) return;  // an empty partition (uniform over the CTA): combine skips it
  }
  const int tiles = (end - begin + CH - 1) / CH;
  const int mine = tiles > warp ? (tiles - warp + W - 1) / W : 0;

  const int64_t row_stride = static_cast<int64_t>(a.kv_count) * HEAD;  // elements between cache rows
  const T* kbase = static_cast<const T*>(a.k) + static_cast<int64_t>(kv) * HEAD;
  const T* vbase = static_cast<const T*>(a.v) + static_cast<int64_t>(kv) * HEAD;
  const uint32_t stages = smem_addr(smem) + warp * (STG * STAGEB);
  const int cp_c = lane % CPR, cp_p = lane / CPR;  // lane copies piece cp_c of rows cp_p + RPP i

  auto chunk_start = [&](int k) { return begin + (warp + k * W) * CH; };
  // Block-table entries of the warp's chunk k (one per 16-position group), 0 where unused.
  auto load_entries = [&](int k, int(&e)[NG]) {
#pragma unroll
    for (int j = 0; j < NG; ++j) {
      const int gs = chunk_start(k) + 16 * j;
      e[j] = k < mine && gs < end ? __ldg(table + table_index(gs)) : 0;
    }
  };
  auto issue = [&](int k, int buf, const int(&e)[NG]) {
    const uint32_t kdst = stages + buf * STAGEB, vdst = kdst + TILEB;
#pragma unroll
    for (int j = 0; j < NG; ++j) {
      const int gs = chunk_start(k) + 16 * j;
      const int within = bs_shift >= 0 ? gs & (bs - 1) : gs % bs;
      const int64_t row0 = static_cast<int64_t>(e[j]) * bs + within;  // cache row of position gs
#pragma unroll
      for (int i = 0; i < PASSES; ++i) {
        const int p = cp_p + RPP * i;
        const bool ok = gs + p < end;
        const int64_t off = ok ? (row0 + p) * row_stride + cp_c * 8 : 0;
        const uint32_t so = (16 * j + p) * ROWB + ((cp_c ^ (p & 7)) << 4);
        cp_async_16(kdst + so, kbase + off, ok);
        cp_async_16(vdst + so, vbase + off, ok);
      }
    }
  };

  // ldmatrix row addresses: lanes 8i..8i+7 -> matrix i = (rows 0-7 | 8-15) x (piece 2x | 2x+1):
  // i = 0: rows 0-7, low 8 columns; 1: rows 0-7, high; 2: rows 8-15, low; 3: rows 8-15, high.
  const int lm_row = (lane & 7) + ((lane >> 4) << 3), lm_half = (lane >> 3) & 1, lm_sw = lane & 7;
  auto lm_addr = [&](uint32_t tile, int j, int x) {
    return tile + (16 * j + lm_row) * ROWB + ((((2 * x) + lm_half) ^ lm_sw) << 4);
  };

  float o[KS][NHT][4];  // O^T: (dim 16 dm + g [+8], head 8 hn + 2t [+1])
#pragma unroll
  for (int dm = 0; dm < KS; ++dm)
#pragma unroll
    for (int hn = 0; hn < NHT; ++hn)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[dm][hn][c] = 0.0f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;  // heads g, g + 8

  {
    if (a.parts > 1) {  // all prologue table reads first: one latency, not STG - 1
#pragma unroll
      for (int st = 0; st < STG - 1; ++st) load_entries(st, pe[st]);
    }
#pragma unroll
    for (int s = 0; s < STG - 1; ++s) {
      if (s < mine) issue(s, s, pe[s]);
      cp_async_commit();  // empty groups keep the group count uniform
    }
  }
  int en[NG];
  load_entries(STG - 1, en);
  // After the first chunks' copies are in flight, so that its latency (cos/sin, the new K/V row,
  // two CTA barriers) overlaps theirs. Uniform over the CTA (the early return above is too).
  if constexpr (ROPE) rope_prologue<T, HEAD, W>(a, seq, kv, part == 0 && first == 0, qa, rope_cs, new_rows);

  for (int k = 0; k < mine; ++k) {
    const int nxt = k + STG - 1;
    if (nxt < mine) issue(nxt, nxt % STG, en);
    cp_async_commit();
    load_entries(nxt + 1, en);  // used next iteration
    cp_async_wait<STG - 1>();   // chunk k has landed (this lane's copies) ...
    __syncwarp();               // ... and every lane's
    const uint32_t kt = stages + (k % STG) * STAGEB, vt = kt + TILEB;
    if constexpr (ROPE) {
      // The new token's row, if this chunk holds the last position, comes from new_rows: its
      // cache row may have been read before (or while) this sequence's storing CTA wrote it.
      const int r = len - 1 - chunk_start(k);
      if (r >= 0 && r < CH && len - 1 < end) {
        if (lane < 2 * CPR) {
          const int piece = lane % CPR;
          const uint32_t dst = (lane < CPR ? kt : vt) + r * ROWB + ((piece ^ (r & 7)) << 4);
          const uint4 value = *reinterpret_cast<const uint4*>(new_rows + (lane < CPR ? 0 : HEAD) + piece * 8);
          *reinterpret_cast<uint4*>(smem + (dst - smem_addr(smem))) = value;
        }
        __syncwarp();
      }
    }

    // 1. S = Q K^T: s[j][n] is the 16 x 8 tile (heads, positions 16 j + 8 n ..).
    float s[NG][2][4];
#pragma unroll
    for (int j = 0; j < NG; ++j) {
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[j][n][c] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        uint32_t b[4];
        ldsm_x4(lm_addr(kt, j, kk), b);
        mma_16816<T>(s[j][0], qa[kk], b[0], b[1]);
        mma_16816<T>(s[j][1], qa[kk], b[2], b[3]);
      }
    }

    // 2. Online softmax (log2 units); positions past `end` get -inf (their K, V are zeros).
    const int cs = chunk_start(k);
    const bool partial = cs + CH > end;
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
    for (int j = 0; j < NG; ++j)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          if (!TWO && c >= 2) continue;
          float x = s[j][n][c] * a.scale_log2;
          if (partial && cs + 16 * j + 8 * n + 2 * t + (c & 1) >= end) x = -INFINITY;
          s[j][n][c] = x;
          if (c < 2)
            mx_lo = fmaxf(mx_lo, x);
          else
            mx_hi = fmaxf(mx_hi, x);
        }
    mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 1));
    mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 2));
    const float nm_lo = fmaxf(m_lo, mx_lo);      // finite: the chunk has a position in the context
    const float f_lo = fast_exp2(m_lo - nm_lo);  // 0 on the warp's first chunk
    m_lo = nm_lo;
    float nm_hi = 0.0f, f_hi = 1.0f;
    if constexpr (TWO) {
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 1));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 2));
      nm_hi = fmaxf(m_hi, mx_hi);
      f_hi = fast_exp2(m_hi - nm_hi);
      m_hi = nm_hi;
    }
    // P^T as B fragments of V^T P^T: (k = position 2t.., n = head g) = this thread's S values.
    uint32_t pb[NG][NHT][2], pl[NG][NHT][2];  // P's (first, second) term
    float ps_lo = 0.0f, ps_hi = 0.0f;
#pragma unroll
    for (int j = 0; j < NG; ++j) {
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        p_fragment<T, SPLIT>(fast_exp2(s[j][n][0] - nm_lo), fast_exp2(s[j][n][1] - nm_lo), pb[j][0][n], pl[j][0][n],
                             ps_lo);
        if constexpr (TWO)
          p_fragment<T, SPLIT>(fast_exp2(s[j][n][2] - nm_hi), fast_exp2(s[j][n][3] - nm_hi), pb[j][NHT - 1][n],
                               pl[j][NHT - 1][n], ps_hi);
      }
    }
    l_lo = l_lo * f_lo + ps_lo;
    if constexpr (TWO) l_hi = l_hi * f_hi + ps_hi;
    // Rescale O^T: this thread's columns are heads 2t, 2t + 1, whose factors quads 2t, 2t+1 hold.
    {
      const float fa = __shfl_sync(0xffffffffu, f_lo, 8 * t), fb = __shfl_sync(0xffffffffu, f_lo, 8 * t + 4);
#pragma unroll
      for (int dm = 0; dm < KS; ++dm) o[dm][0][0] *= fa, o[dm][0][1] *= fb, o[dm][0][2] *= fa, o[dm][0][3] *= fb;
      if constexpr (TWO) {
        const float ga = __shfl_sync(0xffffffffu, f_hi, 8 * t), gb = __shfl_sync(0xffffffffu, f_hi, 8 * t + 4);
#pragma unroll
        for (int dm = 0; dm < KS; ++dm)
          o[dm][NHT - 1][0] *= ga, o[dm][NHT - 1][1] *= gb, o[dm][NHT - 1][2] *= ga, o[dm][NHT - 1][3] *= gb;
      }
    }

    // 3. O^T += V^T P^T: A = V^T (dims x positions) by ldmatrix.trans of the stored V rows.
#pragma unroll
    for (int j = 0; j < NG; ++j)
#pragma unroll
      for (int dm = 0; dm < KS; ++dm) {
        uint32_t va[4];
        ldsm_x4_trans(lm_addr(vt, j, dm), va);
#pragma unroll
        for (int hn = 0; hn < NHT; ++hn) {
          mma_16816<T>(o[dm][hn], va, pb[j][hn][0], pb[j][hn][1]);
          if constexpr (SPLIT) mma_16816<T>(o[dm][hn], va, pl[j][hn][0], pl[j][hn][1]);
        }
      }
    __syncwarp();  // every lane is done with this stage before a later issue() refills it
  }
  cp_async_wait<0>();
  __syncthreads();  // all warps are done with the stages: they become the merge buffer

  // 4. Merge the W warps (fixed order: deterministic) and write.
  l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 1);
  l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 2);
  if constexpr (TWO) {
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 1);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 2);
  }
  float* red = reinterpret_cast<float*>(smem);  // [W][16 heads][RED_LD]
  {
    float* rw = red + warp * 16 * RED_LD;
    if (t == 0) {
      st_m[warp][g] = m_lo, st_l[warp][g] = l_lo;
      if constexpr (TWO) st_m[warp][g + 8] = m_hi, st_l[warp][g + 8] = l_hi;
    }
#pragma unroll
    for (int dm = 0; dm < KS; ++dm)
#pragma unroll
      for (int hn = 0; hn < NHT; ++hn) {
        const int h = 8 * hn + 2 * t, d = 16 * dm + g;
        rw[h * RED_LD + d] = o[dm][hn][0];
        rw[(h + 1) * RED_LD + d] = o[dm][hn][1];
        rw[h * RED_LD + d + 8] = o[dm][hn][2];
        rw[(h + 1) * RED_LD + d + 8] = o[dm][hn][3];
      }
  }
  __syncthreads();
  const int64_t obase = static_cast<int64_t>(seq) * a.heads + head0;
  for (int idx = threadIdx.x; idx < nh * (HEAD / 2); idx += W * 32) {
    const int h = idx / (HEAD / 2), d = (idx % (HEAD / 2)) * 2;
    float mm = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) mm = fmaxf(mm, st_m[w][h]);
    float x0 = 0.0f, x1 = 0.0f, l = 0.0f;
    if (mm != -INFINITY) {  // -inf only for an empty context
#pragma unroll
      for (int w = 0; w < W; ++w) {
        const float wt = fast_exp2(st_m[w][h] - mm);  // 0 for a warp that had no chunk
        const float* r = red + (w * 16 + h) * RED_LD + d;
        x0 = fmaf(wt, r[0], x0);
        x1 = fmaf(wt, r[1], x1);
        l = fmaf(wt, st_l[w][h], l);
      }
    }
    if (a.parts == 1) {
      T* out = static_cast<T*>(a.out) + (obase + h) * HEAD + d;
      store_pair<T>(out, l > 0.0f ? x0 / l : 0.0f, l > 0.0f ? x1 / l : 0.0f);
    } else {
      const int64_t slot = (obase + h) * a.parts + part;
      *reinterpret_cast<float2*>(a.ws_acc + slot * HEAD + d) = make_float2(x0, x1);
      if (d == 0) a.ws_stats[2 * slot] = mm, a.ws_stats[2 * slot + 1] = l;
    }
  }
#else
  __trap();  // the launcher only runs this on sm_80+
#endif
}

// grid = (H, B), 128 threads: out = sum_p 2^(m_p - M) acc_p / sum_p 2^(m_p - M) l_p over the
// sequence's non-empty partitions (M = max_p m_p), in a fixed order.
template <class T>
__global__ void __launch_bounds__(128) mma_combine_kernel(const Params a, int head_size) {
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
  __shared__ float weight[kMaxParts];
  const int head = blockIdx.x, seq = blockIdx.y;
  const int len = context_length(a, seq);
  const int size = partition_size(len, a.parts, a.part_align);
  const int used = (len + size - 1) / size;
  const int64_t o = static_cast<int64_t>(seq) * a.heads + head;
  const float* stats = a.ws_stats + 2 * o * a.parts;
  float m = -INFINITY;
  for (int p = 0; p < used; ++p) m = fmaxf(m, stats[2 * p]);
  for (int p = threadIdx.x; p < used; p += blockDim.x) weight[p] = exp2f(stats[2 * p] - m);
  __syncthreads();
  float sum = 0.0f;
  for (int p = 0; p < used; ++p) sum = fmaf(weight[p], stats[2 * p + 1], sum);
  for (int d = threadIdx.x; d < head_size; d += blockDim.x) {
    float x = 0.0f;
    for (int p = 0; p < used; ++p) x = fmaf(weight[p], a.ws_acc[(o * a.parts + p) * head_size + d], x);
    static_cast<T*>(a.out)[o * head_size + d] = from_float<T>(used > 0 && sum > 0.0f ? x / sum : 0.0f);
  }
}

// ---- host side ----------------------------------------------------------------------------
// Head 64, measured on H200 (a sweep of seven configurations, 132 SMs): with >= 3 CTAs per SM
// the 48 KB one (4 CTAs/SM, one wave at B=256 K=2) is best; below that the 32-position
// double-buffered one (fewer per-chunk overheads, 3 CTAs/SM); below one CTA per SM a deeper
// pipeline per CTA.
enum class Config { w4_c16_s3, w4_c32_s2, w8_c32_s2 };

Config choose_config(const Params& a, int64_t b, int sms) {
  const int64_t ctas = b * a.kv_count * a.head_blocks;
  sms = std::max(sms, 1);
  if (ctas >= 3 * sms) return Config::w4_c16_s3;
  if (ctas > sms) return Config::w4_c32_s2;
  return Config::w8_c32_s2;
}

constexpr int kMaxDevices = 64;

template <class T, int HEAD, int W, int NG, int STG, bool SPLIT, bool TWO, bool ROPE>
gpuError_t launch_config(Params a, int64_t b, int device, const verlpp::cuda::WorkspacePool& state,
                         gpuStream_t stream) {
  constexpr size_t kPipe = size_t(W) * STG * 2 * 16 * NG * HEAD * 2;
  constexpr size_t kRed = size_t(W) * 16 * (HEAD + 4) * 4;
  constexpr size_t kSmem = kPipe > kRed ? kPipe : kRed;
  constexpr size_t kStatic = 2 * W * 16 * 4 + (ROPE ? HEAD * 4 + 2 * HEAD * 2 : 0);
  constexpr int kFit = int((227 * 1024) / (kSmem + 1024 + kStatic));  // CTAs per SM by shared memory
  constexpr int MINB = kFit < 1 ? 1 : kFit > 8 ? 8 : kFit;
  auto* kernel = &mma_decode_kernel<T, HEAD, W, NG, STG, TWO, SPLIT, ROPE, MINB>;
  // The dynamic shared-memory limit is an attribute of the function in each device's context:
  // raise it once per device (static + dynamic above 48 KB needs it; 48 KB + 512 B does). Two
  // threads racing here both set the same value.
  static std::atomic<uint64_t> configured{0};
  const uint64_t bit = uint64_t(1) << (device % kMaxDevices);
  if ((configured.load(std::memory_order_acquire) & bit) == 0) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)) !=
        cudaSuccess)
      return cudaGetLastError();
    configured.fetch_or(bit, std::memory_order_acq_rel);
  }
  const int64_t ctas = b * a.kv_count * a.head_blocks;
  const int64_t max_len = int64_t(a.max_blocks) * a.block_size;
  // Split-K costs a combine kernel and the workspace's allocation nodes (~2-3 us in a graph on
  // H200): measured, 1 partition won everywhere from B*K = 64 CTAs up. Split only grids of
  // fewer than SMs / 4 CTAs, into partitions of >= kSplitMin positions of the table's length.
  constexpr int64_t kSplitMin = 256;
  const int64_t sms = std::max(state.sms, 1);
  int64_t parts = 4 * ctas >= sms ? 1 : std::min<int64_t>((sms + ctas - 1) / ctas, max_len / kSplitMin);
  parts = std::min<int64_t>({parts, (max_len + kMinPartition - 1) / kMinPartition, kMaxParts});
  if (parts < 1 || state.pool == nullptr) parts = 1;
  a.parts = static_cast<int>(parts);
  a.part_align = 16 * NG;

  void* workspace = nullptr;
  if (a.parts > 1) {
    const size_t partials = size_t(b) * a.heads * a.parts;
    if (cudaMallocFromPoolAsync(&workspace, partials * (HEAD + 2) * sizeof(float), state.pool, stream) == cudaSuccess) {
      a.ws_acc = static_cast<float*>(workspace);
      a.ws_stats = a.ws_acc + partials * HEAD;
    } else {
      (void)cudaGetLastError();  // no workspace: run unsplit
      workspace = nullptr;
      a.parts = 1;
    }
  }
  const dim3 grid{static_cast<unsigned>(a.kv_count * a.head_blocks), static_cast<unsigned>(a.parts),
                  static_cast<unsigned>(b)};
  gpuError_t launched = launch_kernel(kernel, grid, W * 32, kSmem, stream, a);
  if (launched == cudaSuccess && a.parts > 1) {
    const dim3 combine_grid{static_cast<unsigned>(a.heads), static_cast<unsigned>(b)};
    launched = launch_kernel(mma_combine_kernel<T>, combine_grid, 128, 0, stream, a, HEAD);
  }
  if (workspace != nullptr) {
    const gpuError_t freed = cudaFreeAsync(workspace, stream);
    if (launched == cudaSuccess && freed != cudaSuccess) return freed;
  }
  return launched;
}

template <class T, int HEAD, int W, int NG, int STG, bool ROPE>
gpuError_t launch_heads(const Params& a, int64_t b, int device, const verlpp::cuda::WorkspacePool& state,
                        gpuStream_t stream) {
  return a.heads_per_block > 8 ? launch_config<T, HEAD, W, NG, STG, true, true, ROPE>(a, b, device, state, stream)
                               : launch_config<T, HEAD, W, NG, STG, true, false, ROPE>(a, b, device, state, stream);
}

template <class T, bool ROPE>
gpuError_t launch_typed(const Params& a, int64_t b, int64_t s, int device, const verlpp::cuda::WorkspacePool& state,
                        gpuStream_t stream) {
  if (s == 128) return launch_heads<T, 128, 4, 1, 3, ROPE>(a, b, device, state, stream);
  switch (choose_config(a, b, state.sms)) {
    case Config::w4_c32_s2:
      return launch_heads<T, 64, 4, 2, 2, ROPE>(a, b, device, state, stream);
    case Config::w8_c32_s2:
      return launch_heads<T, 64, 8, 2, 2, ROPE>(a, b, device, state, stream);
    case Config::w4_c16_s3:
      break;
  }
  return launch_heads<T, 64, 4, 1, 3, ROPE>(a, b, device, state, stream);
}

// Whether the tensor-core kernel takes a call (else the CUDA-core kernel, or for the fused entry
// the unfused pair, serves it), and its Params when it does.
bool mma_params(const void* q, const void* k_cache, const void* v_cache, const int32_t* block_tables,
                const int32_t* context_lens, int64_t b, int64_t h, int64_t kv, int64_t s, int64_t block_size,
                int64_t max_blocks, float scale, void* out, FloatType type, const WorkspacePool& state, bool on_device,
                Params& a) {
  const auto misaligned = [](const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n != 0; };
  // cc_major >= 8: mma.sync on bf16, cp.async and ldmatrix.
  const bool supported = on_device && state.cc_major >= 8 && type != FloatType::f32 && (s == 64 || s == 128) && b > 0 &&
                         b <= 65535 && h > 0 && kv > 0 && h % kv == 0 && h <= INT_MAX && block_size > 0 &&
                         block_size % 16 == 0 && max_blocks >= 0 && max_blocks * block_size <= INT_MAX &&
                         kv * ((h / kv + 15) / 16) <= INT_MAX && !misaligned(k_cache, 16) && !misaligned(v_cache, 16) &&
                         !misaligned(q, 4) && !misaligned(out, 4);
  if (!supported) return false;
  const int group = static_cast<int>(h / kv);
  const int head_blocks = (group + 15) / 16;
  a = Params{};
  a.q = q, a.k = k_cache, a.v = v_cache, a.tables = block_tables, a.lens = context_lens, a.out = out;
  a.q_stride = h * s;
  a.heads = static_cast<int>(h), a.group = group, a.kv_count = static_cast<int>(kv);
  a.head_blocks = head_blocks, a.heads_per_block = (group + head_blocks - 1) / head_blocks;
  a.block_size = static_cast<int>(block_size), a.max_blocks = static_cast<int>(max_blocks);
  a.bs_shift = (block_size & (block_size - 1)) == 0 ? __builtin_ctzll(static_cast<unsigned long long>(block_size)) : -1;
  a.parts = 1, a.part_align = 16;
  a.scale_log2 = scale * kLog2e;
  return true;
}

WorkspacePool device_state(int& device) {
  const bool on_device = cudaGetDevice(&device) == cudaSuccess;
  if (!on_device) {
    (void)cudaGetLastError();
    device = -1;
    return WorkspacePool{};
  }
  return workspace_pool(device);
}

}  // namespace

gpuError_t launch_paged_attention_decode(const void* q, const void* k_cache, const void* v_cache, FloatType type,
                                         const int32_t* block_tables, const int32_t* context_lens, int64_t b, int64_t h,
                                         int64_t kv, int64_t s, int64_t block_size, int64_t max_blocks, float scale,
                                         void* out, gpuStream_t stream) {
  int device = 0;
  const WorkspacePool state = device_state(device);
  Params a;
  if (!mma_params(q, k_cache, v_cache, block_tables, context_lens, b, h, kv, s, block_size, max_blocks, scale, out,
                  type, state, device >= 0, a))  // includes every invalid argument: the CUDA-core launcher reports it
    return launch_paged_attention_decode_simt(q, k_cache, v_cache, type, block_tables, context_lens, b, h, kv, s,
                                              block_size, max_blocks, scale, out, stream);
  return type == FloatType::bf16 ? launch_typed<__nv_bfloat16, false>(a, b, s, device, state, stream)
                                 : launch_typed<__half, false>(a, b, s, device, state, stream);
}

gpuError_t launch_rotary_paged_attention_decode(const RotaryKvStoreOperands& o, FloatType type,
                                                const int32_t* block_tables, const int32_t* context_lens,
                                                int64_t block_size, int64_t max_blocks, float scale, void* out,
                                                gpuStream_t stream) {
  int device = 0;
  const WorkspacePool state = device_state(device);
  const int64_t s = 2 * o.half;
  Params a;
  // q is read as 4-byte pairs, k and v one value at a time: rows and bases on the 4-byte grid.
  const bool pairs = o.q_row_stride % 2 == 0 && reinterpret_cast<uintptr_t>(o.q) % 4 == 0;
  if (pairs && mma_params(o.q, o.k_cache, o.v_cache, block_tables, context_lens, o.tokens, o.q_heads, o.kv_heads, s,
                          block_size, max_blocks, scale, out, type, state, device >= 0, a)) {
    a.q_stride = o.q_row_stride;
    a.k_new = o.k, a.v_new = o.v;
    a.k_new_stride = o.k_row_stride, a.v_new_stride = o.v_row_stride;
    a.positions = o.positions, a.slots = o.slot_mapping, a.inv_freq = o.inv_freq;
    a.slot_count = o.slots;
    return type == FloatType::bf16 ? launch_typed<__nv_bfloat16, true>(a, o.tokens, s, device, state, stream)
                                   : launch_typed<__half, true>(a, o.tokens, s, device, state, stream);
  }
  return launch_rotary_then_attention(o, type, block_tables, context_lens, block_size, max_blocks, scale, out, stream);
}

}  // namespace verlpp::cuda

#else  // HIP: no mma.sync; the CUDA-core kernel serves every call

namespace verlpp::cuda {

gpuError_t launch_paged_attention_decode(const void* q, const void* k_cache, const void* v_cache, FloatType type,
                                         const int32_t* block_tables, const int32_t* context_lens, int64_t b, int64_t h,
                                         int64_t kv, int64_t s, int64_t block_size, int64_t max_blocks, float scale,
                                         void* out, gpuStream_t stream) {
  return launch_paged_attention_decode_simt(q, k_cache, v_cache, type, block_tables, context_lens, b, h, kv, s,
                                            block_size, max_blocks, scale, out, stream);
}

gpuError_t launch_rotary_paged_attention_decode(const RotaryKvStoreOperands& o, FloatType type,
                                                const int32_t* block_tables, const int32_t* context_lens,
                                                int64_t block_size, int64_t max_blocks, float scale, void* out,
                                                gpuStream_t stream) {
  return launch_rotary_then_attention(o, type, block_tables, context_lens, block_size, max_blocks, scale, out, stream);
}

}  // namespace verlpp::cuda

#endif
