// cuda: decode attention over the paged KV cache (one query token per sequence, GQA) on CUDA
// cores, and its launcher launch_paged_attention_decode_simt, flash-decoding style: it serves
// f32, HIP, pre-sm_80 GPUs and the shapes that the tensor-core kernel (attention_mma_kernel.cu,
// about 2x faster on an H200) does not take. Decode attention is bound by reading the KV cache: the goal is
// that every K/V row crosses the memory bus once per call, with enough bytes in flight per SM to
// keep HBM busy, and little enough arithmetic per byte that the math hides behind the loads.
//  - One thread block per (sequence, KV head, up to 8 query heads of its group, context
//    partition) serves all those query heads from one read of each K/V row (GQA group 7 of
//    Qwen2.5 would otherwise re-read the cache 7 times).
//  - A row is split over `lanes` lanes of EL elements each (8-byte vectors; head 64: 16 lanes, 2
//    rows per warp step), so a lane keeps only 8 x EL fp32 values of q and 8 x EL accumulators:
//    127 registers at head 64, 4 blocks (16 warps) per SM.
//  - Each warp is an independent pipeline over its own tiles (tile k of the partition goes to
//    warp k % 4; a tile is 8 K and 8 V vectors per lane, 16 positions at head 64 in bf16): while
//    it computes tile k, tile k + 1 is already on its way into shared memory by cp.async, so a
//    block keeps 16 KB in flight without holding it in registers. A lane reads back only the
//    vectors it copied itself, so the pipeline needs no barrier, not even between lanes.
//  - Per tile, K and V are used together with an online softmax (flash attention): scores, the
//    tile max, exp, the rescale of the accumulators (skipped when no head's max moved), p . V.
//    The scores of a tile go through a small per-warp shared table, the only data lanes share.
//  - The head partial dot products of a row are summed over its lanes by halving exchanges with
//    no selects: lane c keeps head slot s as head s ^ (c / (lanes / 8)), so at every step the
//    half to keep is always the lower one (7 + 1 shuffles for 8 heads on 16 lanes).
//  - fp32 math (exp2 of log2e-scaled scores); the 4 warps' (max, sum, acc) are merged in a fixed
//    order at the end (deterministic); the output is acc / sum rounded to the dtype.
//  - When (sequences x KV heads) would not fill the GPU, the context is also split into
//    partitions (split-K): each block writes an unnormalised partial (max, sum, acc) to a
//    workspace and a small kernel combines the partitions. The partition size is derived on the
//    device from each sequence's real length, so no device-to-host read is needed.
// Head sizes that break 8-byte alignment (or misaligned tensors) take the same kernel with
// synchronous scalar loads; HIP (plugins/rocm builds this file) and pre-sm_80 GPUs copy the
// tiles with plain loads instead of cp.async.
#include "dependent_launch.cuh"
#include "block_reduce.cuh"
#include "kernels.hpp"
#include "workspace_pool.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#if !(defined(VERLPP_GPU_HIP) && VERLPP_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define VERLPP_ATTN_CP_ASYNC 1
#else
#define VERLPP_ATTN_CP_ASYNC 0
#endif

namespace verlpp::cuda {
namespace {

constexpr int kAttnWarps = 4;
constexpr int kAttnThreads = kAttnWarps * 32;
constexpr int kStages = 2;    // tiles per warp in shared memory: one computed, one loading
constexpr int kUnits = 8;     // K (and V) vectors per lane per tile
constexpr int kMaxHeads = 8;  // query heads per block; a larger GQA group takes several blocks
constexpr int kMinLanes = 8;  // lanes per row >= 8, so a tile has <= 32 rows
constexpr int kMaxTileRows = kUnits * 32 / kMinLanes;
constexpr int kMaxHead = 256;        // head size limit (UNSUPPORTED above, checked in kernel_table.cpp)
constexpr int kMinPartition = 64;    // split-K partitions cover at least this many positions ...
constexpr int kPartitionAlign = 32;  // ... in multiples of this (a multiple of every tile size)
constexpr int kMaxPartitions = 256;
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kPartitionAlign % kMaxTileRows == 0, "partitions start on a tile boundary");
static_assert(kAttnWarps * kStages * 2 * kUnits * 32 * 2 >= kAttnWarps * kMaxHeads * kMaxHead,
              "the staging buffer is reused for the warps' final [heads, S] sums");

// Everything the attention kernel needs; the pointers are typed inside the kernel.
struct Args {
  const void *q, *k_cache, *v_cache;
  const int32_t *block_tables, *context_lens;
  void* out;
  float* ws_acc;    // [B, H, parts, S] unnormalised partial outputs (parts > 1 only)
  float* ws_stats;  // [B, H, parts, 2] their (max, sum); max in log2 units
  int heads, group, kv_count, s, block_size, max_blocks, parts, lanes;
  bool one_block_per_tile;  // block_size is a multiple of the tile: one block-table read per tile
  float scale;
};

__device__ __forceinline__ int context_length(const int32_t* lens, int seq, int max_len) {
  const int len = lens[seq];
  return len < 0 ? 0 : len > max_len ? max_len : len;  // never read past the block table
}

// Positions per partition of a `len`-position context split `parts` ways (parts > 1). Both
// kernels compute it the same way, from the length on the device.
__device__ __forceinline__ int partition_size(int len, int parts) {
  const int size = ((len + parts - 1) / parts + kPartitionAlign - 1) / kPartitionAlign * kPartitionAlign;
  return size > kMinPartition ? size : kMinPartition;
}

// --- staging: a lane's vectors of a tile go to its own slots of shared memory ---------------
// A slot is 8 bytes: one vector of VEC elements (VEC = 8 / sizeof(T)), or one element in .x
// (the low 16 bits for half types) on the scalar path.
template <class T, int VEC, bool kAsync = true>  // kAsync = false: a plain load into a register
__device__ __forceinline__ void stage_slot(uint2* dst, const T* src, bool ok) {
  if constexpr (VEC == 1) {
    if constexpr (std::is_same_v<T, float>)
      dst->x = ok ? __float_as_uint(*src) : 0u;
    else
      dst->x = ok ? *reinterpret_cast<const unsigned short*>(src) : 0u;
  } else {
    static_assert(VEC * sizeof(T) == 8, "8-byte vectors");
#if VERLPP_ATTN_CP_ASYNC
    if constexpr (kAsync) {
      // src-size 0 writes zeros without reading: rows past the context, vectors past the head.
      const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
      asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(addr), "l"(src), "r"(ok ? 8 : 0) : "memory");
      return;
    }
#endif
    *dst = ok ? *reinterpret_cast<const uint2*>(src) : make_uint2(0u, 0u);
  }
}

__device__ __forceinline__ void stage_commit() {
#if VERLPP_ATTN_CP_ASYNC
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N>  // waits until at most N committed groups of this thread are still in flight
__device__ __forceinline__ void stage_wait() {
#if VERLPP_ATTN_CP_ASYNC
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// The per-warp score table is written and read by lanes of one 32-lane group.
__device__ __forceinline__ void group_sync() {
#if defined(VERLPP_GPU_HIP) && VERLPP_GPU_HIP
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "wavefront");  // a wavefront runs in lockstep
  __builtin_amdgcn_wave_barrier();
#else
  __syncwarp();
#endif
}

__device__ __forceinline__ bool group_any(bool x) {
#if defined(VERLPP_GPU_HIP) && VERLPP_GPU_HIP
  return __any(x);  // the whole wavefront: a superset of the group, still correct
#else
  return __any_sync(0xffffffffu, x);
#endif
}

template <class T>
__device__ __forceinline__ float bits_to_float(uint32_t bits) {  // the low 16 bits of a half type
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xffffu)));
  else
    return __uint_as_float(bits << 16);  // bf16 is the top half of an f32: exact
}

// The VEC elements of one slot as fp32 (little-endian pairs for half types).
template <class T, int VEC>
__device__ __forceinline__ void unpack(uint2 w, float* f) {
  if constexpr (std::is_same_v<T, float>) {
    f[0] = __uint_as_float(w.x);
    if constexpr (VEC == 2) f[1] = __uint_as_float(w.y);
  } else if constexpr (VEC == 1)
    f[0] = bits_to_float<T>(w.x);
  else if constexpr (std::is_same_v<T, __half>) {
    f[0] = bits_to_float<T>(w.x), f[1] = bits_to_float<T>(w.x >> 16);
    f[2] = bits_to_float<T>(w.y), f[3] = bits_to_float<T>(w.y >> 16);
  } else {
    f[0] = __uint_as_float(w.x << 16), f[1] = __uint_as_float(w.x & 0xffff0000u);
    f[2] = __uint_as_float(w.y << 16), f[3] = __uint_as_float(w.y & 0xffff0000u);
  }
}

// Sums the P head partials of a row over its `lanes` lanes. Lane c holds head s ^ (c / (lanes /
// P)) in slot s, so in each halving step the partner's upper half is exactly the heads this lane
// keeps in its lower half: v[i] += partner's v[i + half], no selects. Lane c ends with the total
// of head c / (lanes / P) (P <= lanes, both powers of two).
template <int P>
__device__ __forceinline__ float reduce_row(float (&v)[P], int lanes) {
  int offset = lanes >> 1;
#pragma unroll
  for (int half = P / 2; half >= 1; half >>= 1, offset >>= 1)
#pragma unroll
    for (int i = 0; i < half; ++i) v[i] += gpu_shfl_xor(v[i + half], offset);
  for (; offset > 0; offset >>= 1) v[0] += gpu_shfl_xor(v[0], offset);
  return v[0];
}

// 4 blocks (16 warps) per SM while q and the accumulators take <= 64 registers; 2 above.
template <int P, int EL>
constexpr int kMinBlocksPerSm = P* EL <= 32 ? 4 : 2;

// Head slots for NH query heads: the next power of two (reduce_row's halving needs one).
template <int NH>
constexpr int kSlots = NH <= 1   ? 1
                       : NH <= 2 ? 2
                       : NH <= 4 ? 4
                                 : 8;

// grid = (parts, kv_count * blocks per group, B), block = kAttnThreads. Lane `lane` of a warp
// serves row lane / lanes of each step and elements [VEC * (c + j * lanes), + VEC) of it, j < EL /
// VEC (c = lane % lanes). NH >= the block's query heads (7 for Qwen2.5's group: no dummy head
// in p . V; q . k still computes kSlots<NH>).
template <class T, int VEC, int EL, int NH>
__global__ void __launch_bounds__(kAttnThreads, (kMinBlocksPerSm<kSlots<NH>, EL>)) paged_attention_kernel(Args a) {
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
  constexpr int P = kSlots<NH>;
  constexpr int NC = EL / VEC;         // vectors per lane per row
  constexpr int kSteps = kUnits / NC;  // rows per lane per tile
  static_assert(NC * VEC == EL && kSteps * NC == kUnits, "tile shape");
  __shared__ uint2 staging[kAttnWarps][kStages][2][kUnits][32];       // [warp][stage][K, V][slot][lane]
  __shared__ __align__(16) float probs[kAttnWarps][kMaxTileRows][P];  // a tile's exp(score - max)
  __shared__ float factors[kAttnWarps][P];                            // a tile's rescale per head
  __shared__ float warp_max[kAttnWarps][P], warp_sum[kAttnWarps][P];
  const T* __restrict__ q = static_cast<const T*>(a.q);
  const T* __restrict__ k_cache = static_cast<const T*>(a.k_cache);
  const T* __restrict__ v_cache = static_cast<const T*>(a.v_cache);

  const int part = blockIdx.x, seq = blockIdx.z;
  const int blocks_per_group = (a.group + kMaxHeads - 1) / kMaxHeads;
  const int per_block = (a.group + blocks_per_group - 1) / blocks_per_group;  // <= P
  const int kv = blockIdx.y / blocks_per_group, first = (blockIdx.y % blocks_per_group) * per_block;
  const int head0 = kv * a.group + first;  // this block's query heads: head0 .. head0 + heads - 1
  const int heads = min(per_block, a.group - first);
  const int len = context_length(a.context_lens, seq, a.max_blocks * a.block_size);
  int begin = 0, end = len;
  if (a.parts > 1) {
    const int size = partition_size(len, a.parts);
    begin = part * size;
    end = min(len, begin + size);
    if (begin >= end) return;  // an empty partition: the combine kernel does not read it
  }

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int lanes = a.lanes, rows_per_step = 32 / lanes;
  const int c = lane & (lanes - 1), r = lane / lanes;
  const int held = c / (lanes / P);          // the head whose score reduce_row leaves here
  const bool writer = c % (lanes / P) == 0;  // one lane per (row, head) writes its p
  const int tile_rows = kSteps * rows_per_step, nvec = a.s / VEC, bs = a.block_size;
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks;
  const float scale = a.scale * kLog2e;  // scores in log2 units: exp2 below

  float qf[P][EL];  // slot s: query head s ^ held (see reduce_row), 0 past the block's heads
#pragma unroll
  for (int s = 0; s < P; ++s) {
    const int g = s ^ held;
    const T* row = q + (static_cast<int64_t>(seq) * a.heads + head0 + g) * a.s;
#pragma unroll
    for (int j = 0; j < NC; ++j) {
      const int vi = c + j * lanes;
      uint2 w = make_uint2(0u, 0u);
      stage_slot<T, VEC, false>(&w, row + vi * VEC, g < heads && vi < nvec);
      unpack<T, VEC>(w, &qf[s][j * VEC]);
    }
  }
  float acc[NH][EL] = {};                     // head g (not permuted), the lane's elements
  float run_max = -INFINITY, run_sum = 0.0f;  // of head `held` over this lane's rows

  // The warp's k-th tile (partition tile warp + k * kAttnWarps) into stage `buf`: K and V of the
  // lane's rows, one cache-row lookup per row, or, when a tile never crosses a cache block, per
  // tile: `base` (tile_base(k)), read one tile ahead so its latency is not waited for.
  const int tiles = (end - begin + tile_rows - 1) / tile_rows;
  const int mine = tiles > warp ? (tiles - warp + kAttnWarps - 1) / kAttnWarps : 0;
  auto tile_base = [&](int k) {
    const int start = begin + (warp + k * kAttnWarps) * tile_rows;
    return a.one_block_per_tile && k < mine ? table[start / bs] * bs + start % bs : 0;
  };
  auto stage_tile = [&](int k, int buf, int base) {
    const int start = begin + (warp + k * kAttnWarps) * tile_rows;
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      const int i = step * rows_per_step + r, t = start + i;
      const bool valid = t < end;
      const int row = a.one_block_per_tile ? base + i : valid ? table[t / bs] * bs + t % bs : 0;
      const int64_t offset = (static_cast<int64_t>(row) * a.kv_count + kv) * a.s;
#pragma unroll
      for (int j = 0; j < NC; ++j) {
        const int vi = c + j * lanes;
        const bool ok = valid && vi < nvec;
        const int64_t at = ok ? offset + vi * VEC : 0;
        stage_slot<T, VEC>(&staging[warp][buf][0][step * NC + j][lane], k_cache + at, ok);
        stage_slot<T, VEC>(&staging[warp][buf][1][step * NC + j][lane], v_cache + at, ok);
      }
    }
  };

  int base = tile_base(0);  // of the next tile to stage
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) {
    if (k < mine) stage_tile(k, k, base), base = tile_base(k + 1);
    stage_commit();  // empty groups keep the count of groups in flight uniform
  }
  for (int k = 0; k < mine; ++k) {
    const int buf = k % kStages, next = k + kStages - 1;
    if (next < mine) stage_tile(next, next % kStages, base), base = tile_base(next + 1);
    stage_commit();
    stage_wait<kStages - 1>();  // tile k has landed (this lane's slots: no barrier needed)
    const int start = begin + (warp + k * kAttnWarps) * tile_rows;

    // 1. Scores of this lane's rows for head `held`, in log2 units; -inf past the context.
    float score[kSteps];
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      float kf[EL];
#pragma unroll
      for (int j = 0; j < NC; ++j) unpack<T, VEC>(staging[warp][buf][0][step * NC + j][lane], &kf[j * VEC]);
      float dot[P];
#pragma unroll
      for (int s = 0; s < P; ++s) {
        dot[s] = 0.0f;
#pragma unroll
        for (int e = 0; e < EL; ++e) dot[s] = fmaf(qf[s][e], kf[e], dot[s]);
      }
      const float x = reduce_row<P>(dot, lanes) * scale;
      score[step] = start + step * rows_per_step + r < end ? x : -INFINITY;
    }
    // 2. Online softmax: the tile max over the warp's rows, the lane's p = exp2(score - max).
    float tile_max = score[0];
#pragma unroll
    for (int step = 1; step < kSteps; ++step) tile_max = fmaxf(tile_max, score[step]);
    for (int offset = lanes; offset < 32; offset <<= 1) tile_max = fmaxf(tile_max, gpu_shfl_xor(tile_max, offset));
    const float new_max = fmaxf(run_max, tile_max);  // finite: a tile has a row in the context
    const float factor = exp2f(run_max - new_max);   // 0 on the first tile (run_max = -inf)
    float sum = 0.0f;
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      const float p = exp2f(score[step] - new_max);
      sum += p;
      if (writer) probs[warp][step * rows_per_step + r][held] = p;
    }
    run_sum = run_sum * factor + sum;
    run_max = new_max;
    if (writer && r == 0) factors[warp][held] = factor;
    group_sync();
    // 3. acc = acc * factor + p . v. Most tiles leave every head's max where it was.
    if (group_any(factor != 1.0f)) {
#pragma unroll
      for (int g = 0; g < NH; ++g) {
        const float f = factors[warp][g];
#pragma unroll
        for (int e = 0; e < EL; ++e) acc[g][e] *= f;
      }
    }
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      float vf[EL];
#pragma unroll
      for (int j = 0; j < NC; ++j) unpack<T, VEC>(staging[warp][buf][1][step * NC + j][lane], &vf[j * VEC]);
      float p[P];
      const float* prow = probs[warp][step * rows_per_step + r];
      if constexpr (P % 4 == 0) {
#pragma unroll
        for (int g = 0; g < P; g += 4) {
          const float4 p4 = *reinterpret_cast<const float4*>(prow + g);
          p[g] = p4.x, p[g + 1] = p4.y, p[g + 2] = p4.z, p[g + 3] = p4.w;
        }
      } else {
#pragma unroll
        for (int g = 0; g < P; ++g) p[g] = prow[g];
      }
#pragma unroll
      for (int g = 0; g < NH; ++g)
#pragma unroll
        for (int e = 0; e < EL; ++e) acc[g][e] = fmaf(p[g], vf[e], acc[g][e]);
    }
    group_sync();  // probs and factors are rewritten by the next tile
  }
  stage_wait<0>();

  // Merge the warp's rows (lanes with the same c share the running max), then the 4 warps in a
  // fixed order through shared memory (deterministic), reusing the staging buffer.
  for (int offset = lanes; offset < 32; offset <<= 1) run_sum += gpu_shfl_xor(run_sum, offset);
#pragma unroll
  for (int g = 0; g < NH; ++g)
#pragma unroll
    for (int e = 0; e < EL; ++e)
      for (int offset = lanes; offset < 32; offset <<= 1) acc[g][e] += gpu_shfl_xor(acc[g][e], offset);
  __syncthreads();                                                   // every warp is done with the staging buffer
  float* total = reinterpret_cast<float*>(&staging[0][0][0][0][0]);  // [warp][head][S]
  if (r == 0) {
#pragma unroll
    for (int g = 0; g < NH; ++g)
#pragma unroll
      for (int j = 0; j < NC; ++j)
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const int vi = c + j * lanes;
          if (g < heads && vi < nvec) total[(warp * P + g) * a.s + vi * VEC + e] = acc[g][j * VEC + e];
        }
    if (writer) warp_max[warp][held] = run_max, warp_sum[warp][held] = run_sum;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < heads * a.s; idx += kAttnThreads) {
    const int g = idx / a.s, d = idx % a.s;
    float m = -INFINITY;
    for (int w = 0; w < kAttnWarps; ++w) m = fmaxf(m, warp_max[w][g]);
    float x = 0.0f, sum = 0.0f;
    if (m != -INFINITY) {  // -inf only when the context is empty
      for (int w = 0; w < kAttnWarps; ++w) {
        const float weight = exp2f(warp_max[w][g] - m);  // 0 for a warp that had no tile
        x = fmaf(weight, total[(w * P + g) * a.s + d], x);
        sum = fmaf(weight, warp_sum[w][g], sum);
      }
    }
    const int64_t o = static_cast<int64_t>(seq) * a.heads + head0 + g;
    if (a.parts == 1) {
      static_cast<T*>(a.out)[o * a.s + d] = from_float<T>(sum > 0.0f ? x / sum : 0.0f);
    } else {
      a.ws_acc[(o * a.parts + part) * a.s + d] = x;
      if (d == 0) a.ws_stats[2 * (o * a.parts + part)] = m, a.ws_stats[2 * (o * a.parts + part) + 1] = sum;
    }
  }
}

// grid = (H, B), block = kAttnThreads: out = sum_p 2^(m_p - M) acc_p / sum_p 2^(m_p - M) l_p
// over the non-empty partitions p of the sequence (M = max_p m_p; maxima in log2 units).
template <class T>
__global__ void __launch_bounds__(kAttnThreads) combine_partitions_kernel(Args a) {
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
  __shared__ float weight[kMaxPartitions];
  const int head = blockIdx.x, seq = blockIdx.y;
  const int len = context_length(a.context_lens, seq, a.max_blocks * a.block_size);
  const int size = partition_size(len, a.parts);
  const int used = (len + size - 1) / size;
  const int64_t o = static_cast<int64_t>(seq) * a.heads + head;
  const float* stats = a.ws_stats + 2 * o * a.parts;
  float m = -INFINITY;
  for (int p = 0; p < used; ++p) m = fmaxf(m, stats[2 * p]);
  for (int p = threadIdx.x; p < used; p += kAttnThreads) weight[p] = exp2f(stats[2 * p] - m);
  __syncthreads();
  float sum = 0.0f;
  for (int p = 0; p < used; ++p) sum += weight[p] * stats[2 * p + 1];
  for (int d = threadIdx.x; d < a.s; d += kAttnThreads) {
    float x = 0.0f;
    for (int p = 0; p < used; ++p) x = fmaf(weight[p], a.ws_acc[(o * a.parts + p) * a.s + d], x);
    static_cast<T*>(a.out)[o * a.s + d] = from_float<T>(used > 0 && sum > 0.0f ? x / sum : 0.0f);
  }
}

// Smallest power of two >= x (x >= 1).
int pow2_at_least(int x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

template <class T, int VEC, int EL, int NH>
gpuError_t launch_as(Args a, int64_t b, gpuStream_t stream) {
  a.lanes = std::max({pow2_at_least((a.s + EL - 1) / EL), kMinLanes, kSlots<NH>});  // <= 32: S <= 32 * EL
  const int tile_rows = kUnits / (EL / VEC) * (32 / a.lanes);
  a.one_block_per_tile = a.block_size % tile_rows == 0;
  const int64_t blocks_per_group = (a.group + kMaxHeads - 1) / kMaxHeads;
  if (a.kv_count * blocks_per_group > 65535) return gpuErrorInvalidValue;
  const dim3 grid{static_cast<unsigned>(a.parts), static_cast<unsigned>(a.kv_count * blocks_per_group),
                  static_cast<unsigned>(b)};
  gpuError_t launched = launch_kernel(paged_attention_kernel<T, VEC, EL, NH>, grid, kAttnThreads, 0, stream, a);
  if (launched == gpuSuccess && a.parts > 1) {
    const dim3 combine_grid{static_cast<unsigned>(a.heads), static_cast<unsigned>(b)};
    launched = launch_kernel(combine_partitions_kernel<T>, combine_grid, kAttnThreads, 0, stream, a);
  }
  return launched;
}

// NH: the block's query heads, ceil(G / blocks per group) <= 8, rounded up to 1, 2, 4, 7 or 8.
template <class T, int VEC, int EL>
gpuError_t launch_heads(Args a, int64_t b, gpuStream_t stream) {
  const int blocks_per_group = (a.group + kMaxHeads - 1) / kMaxHeads;
  const int per_block = (a.group + blocks_per_group - 1) / blocks_per_group;
  if (per_block == 1) return launch_as<T, VEC, EL, 1>(a, b, stream);
  if (per_block == 2) return launch_as<T, VEC, EL, 2>(a, b, stream);
  if (per_block <= 4) return launch_as<T, VEC, EL, 4>(a, b, stream);
  if (per_block == 7) return launch_as<T, VEC, EL, 7>(a, b, stream);
  return launch_as<T, VEC, EL, kMaxHeads>(a, b, stream);
}

template <class T>
gpuError_t launch_typed(Args a, int64_t b, gpuStream_t stream) {
  constexpr int kVec = 8 / sizeof(T);
  const bool aligned = a.s % kVec == 0 && (reinterpret_cast<uintptr_t>(a.q) | reinterpret_cast<uintptr_t>(a.k_cache) |
                                           reinterpret_cast<uintptr_t>(a.v_cache)) %
                                                  8 ==
                                              0;
  if (!aligned) return launch_as<T, 1, 8, kMaxHeads>(a, b, stream);  // any head size, scalar loads
  if (a.s <= 32 * 4) return launch_heads<T, kVec, 4>(a, b, stream);  // 4 elements a lane (head 64: 16 lanes)
  return launch_heads<T, kVec, 8>(a, b, stream);                     // up to 256
}

gpuError_t launch_any(FloatType type, const Args& a, int64_t b, gpuStream_t stream) {
  switch (type) {
    case FloatType::f32:
      return launch_typed<float>(a, b, stream);
    case FloatType::f16:
      return launch_typed<__half>(a, b, stream);
    case FloatType::bf16:
      return launch_typed<gpu_bfloat16>(a, b, stream);
  }
  return gpuErrorInvalidValue;
}

}  // namespace

gpuError_t launch_paged_attention_decode_simt(const void* q, const void* k_cache, const void* v_cache, FloatType type,
                                              const int32_t* block_tables, const int32_t* context_lens, int64_t b,
                                              int64_t h, int64_t kv, int64_t s, int64_t block_size, int64_t max_blocks,
                                              float scale, void* out, gpuStream_t stream) {
  if (b == 0 || h == 0 || s == 0) return gpuSuccess;
  if (s > kMaxHead || kv <= 0 || h % kv != 0 || b > 65535 || h > 0x7fffffff || block_size <= 0 || max_blocks < 0 ||
      max_blocks * block_size > 0x7fffffff)
    return gpuErrorInvalidValue;
  Args a{q,
         k_cache,
         v_cache,
         block_tables,
         context_lens,
         out,
         nullptr,
         nullptr,
         static_cast<int>(h),
         static_cast<int>(h / kv),
         static_cast<int>(kv),
         static_cast<int>(s),
         static_cast<int>(block_size),
         static_cast<int>(max_blocks),
         1,
         0,
         false,
         scale};

  // Split-K when the (sequence, KV head, head block) grid would not give every SM ~3 blocks
  // (up to 4 fit): aim at ~4 blocks per SM, with partitions of at least kMinPartition positions
  // of the longest context the block tables can hold (the real lengths are only read on the
  // device).
  int device = 0;
  if (gpuGetDevice(&device) != gpuSuccess) return gpuGetLastError();
  const WorkspacePool state = workspace_pool(device);
  const int64_t base_blocks = b * kv * ((h / kv + kMaxHeads - 1) / kMaxHeads);
  const int64_t max_len = max_blocks * block_size;
  if (state.pool != nullptr && state.sms > 0 && base_blocks < 3 * state.sms && max_len > kMinPartition) {
    int64_t parts = (4 * state.sms + base_blocks - 1) / base_blocks;
    parts = std::min<int64_t>({parts, (max_len + kMinPartition - 1) / kMinPartition, kMaxPartitions});
    a.parts = static_cast<int>(parts);
  }
  void* workspace = nullptr;
  if (a.parts > 1) {
    const size_t partials = static_cast<size_t>(b * h * a.parts);
    if (gpuMallocFromPoolAsync(&workspace, partials * (s + 2) * sizeof(float), state.pool, stream) == gpuSuccess) {
      a.ws_acc = static_cast<float*>(workspace);
      a.ws_stats = a.ws_acc + partials * s;
    } else {
      (void)gpuGetLastError();  // out of memory for the workspace: run unsplit instead
      workspace = nullptr;
      a.parts = 1;
    }
  }
  const gpuError_t launched = launch_any(type, a, b, stream);
  if (workspace != nullptr) {
    const gpuError_t freed = gpuFreeAsync(workspace, stream);  // after the kernels, in stream order
    if (launched == gpuSuccess && freed != gpuSuccess) return freed;
  }
  return launched;
}

}  // namespace verlpp::cuda
