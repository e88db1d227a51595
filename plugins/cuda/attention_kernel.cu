// cuda: decode attention over the paged KV cache (one query token per sequence, GQA) and its
// launcher, flash-decoding style. Decode attention is bound by reading the KV cache, so the
// design goal is that every K/V row crosses the memory bus once per call:
//  - one thread block per (sequence, KV head, up to kMaxGroup query heads of its group, context
//    partition) serves all those query heads from one read of each K/V row (GQA group 7 of
//    Qwen2.5 would otherwise re-read the cache 7 times);
//  - a row is read as 16-byte vectors by a group of `lanes` lanes (head 64 in bf16: 8 lanes of
//    one vector each, 4 rows per warp), the warps splitting the positions of a chunk;
//  - fp32 math: a chunk's scores go to shared memory, then each head's running (max, sum) and
//    the accumulators are rescaled as in flash attention; the output is rounded to the dtype;
//  - when (sequences x KV heads) would not fill the GPU, the context is also split into
//    partitions (split-K): each block writes an unnormalised partial (max, sum, acc) to a
//    workspace and a small kernel combines the partitions. The partition size is derived on the
//    device from each sequence's real length, so no device-to-host read is needed.
// Head sizes that break 16-byte alignment (or misaligned tensors) take the same kernel with
// scalar loads.
#include "block_reduce.cuh"
#include "kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>

namespace verlpp::cuda {
namespace {

constexpr int kAttnWarps = 4;
constexpr int kAttnThreads = kAttnWarps * 32;
constexpr int kSteps = 8;          // row steps per chunk (each warp takes rows_per_warp rows a step)
constexpr int kUnroll = 4;         // rows whose loads a lane keeps in flight together
constexpr int kMaxGroup = 8;       // query heads per block; a larger GQA group takes several blocks
constexpr int kMinLanes = 4;       // lanes per row >= 4, so a chunk has <= kMaxChunk positions
constexpr int kMaxChunk = kSteps * kAttnWarps * (32 / kMinLanes);
constexpr int kMaxHead = 256;      // head size limit (UNSUPPORTED above, checked in kernel_table.cpp)
constexpr int kMinPartition = 64;  // split-K partitions cover at least this many positions ...
constexpr int kPartitionAlign = 32;  // ... in multiples of this
constexpr int kMaxPartitions = 256;
static_assert(kMaxChunk >= kMaxHead, "the score buffer is reused for the final [heads, S] sums");

// Everything the attention kernel needs; the pointers are typed inside the kernel.
struct Args {
  const void* q;
  const void* k_cache;
  const void* v_cache;
  const int32_t* block_tables;
  const int32_t* context_lens;
  void* out;
  float* ws_acc;    // [B, H, parts, S] unnormalised partial outputs (parts > 1 only)
  float* ws_stats;  // [B, H, parts, 2] their (max, sum)
  int heads, group, kv_count, s, block_size, max_blocks, parts, lanes;
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

// A vector of VEC elements is held as raw 32-bit words (4 for a 16-byte vector, 1 for a scalar)
// and converted to fp32 where it is used: q, and the K/V rows in flight, then take half the
// registers for 16-bit types (a group of 8 heads keeps 64 q values per lane).
template <int VEC>
constexpr int kWords = VEC == 1 ? 1 : 4;

template <class T>
__device__ __forceinline__ float bits_to_float(uint32_t bits) {  // the low 16 bits of a half type
  if constexpr (std::is_same_v<T, __half>) return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xffffu)));
  else return __uint_as_float(bits << 16);  // bf16 is the top half of an f32: exact
}

// Element e of a vector held as words.
template <class T, int VEC>
__device__ __forceinline__ float element(const uint32_t (&w)[kWords<VEC>], int e) {
  if constexpr (std::is_same_v<T, float>) return __uint_as_float(w[VEC == 1 ? 0 : e]);
  else if constexpr (VEC == 1) return bits_to_float<T>(w[0]);
  else return bits_to_float<T>(e % 2 == 0 ? w[e / 2] : w[e / 2] >> 16);  // little-endian pairs
}

// The lane's NC vectors of one row (vector c + j * lanes) as words: one 16-byte load each when
// VEC > 1 (the launcher checked the alignment), a scalar load otherwise; zeros where there is none.
template <class T, int VEC, int NC>
__device__ __forceinline__ void load_row(const T* row, bool valid, int c, int lanes, int nvec, uint32_t (&out)[NC][kWords<VEC>]) {
#pragma unroll
  for (int j = 0; j < NC; ++j) {
    const int vi = c + j * lanes;
    if (valid && vi < nvec) {
      if constexpr (VEC == 1) {
        if constexpr (std::is_same_v<T, float>) out[j][0] = __float_as_uint(row[vi]);
        else out[j][0] = *reinterpret_cast<const unsigned short*>(row + vi);
      } else {
        static_assert(VEC * sizeof(T) == 16, "16-byte vectors");
        const uint4 x = *reinterpret_cast<const uint4*>(row + vi * VEC);
        out[j][0] = x.x, out[j][1] = x.y, out[j][2] = x.z, out[j][3] = x.w;
      }
    } else {
#pragma unroll
      for (int w = 0; w < kWords<VEC>; ++w) out[j][w] = 0u;  // +0.0 in every dtype
    }
  }
}

// Sums each of the N values over the `lanes` lanes of a row group (N <= lanes, both powers of
// two) and returns to lane c the total of value c / (lanes / N). Each step hands half of the
// values to the partner lane instead of reducing every value over every step: N - 1 + log2(lanes / N)
// shuffles instead of N * log2(lanes) (7 instead of 24 for a group of 8 heads on 8 lanes).
template <int N>
__device__ __forceinline__ float row_reduce(const float (&v)[N], int c, int lanes) {
  if constexpr (N == 1) {
    float x = v[0];
    for (int offset = lanes >> 1; offset > 0; offset >>= 1) x += gpu_shfl_xor(x, offset);
    return x;
  } else {
    const int offset = lanes >> 1;
    const bool upper = (c & offset) != 0;
    float kept[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const float keep = upper ? v[i + N / 2] : v[i];
      const float send = upper ? v[i] : v[i + N / 2];
      kept[i] = keep + gpu_shfl_xor(send, offset);
    }
    return row_reduce<N / 2>(kept, c, offset);
  }
}

// grid = (parts, kv_count * blocks per group, B), block = kAttnThreads. Lane `lane` of a warp
// serves row lane / lanes of each step and vectors c, c + lanes, ... of it (c = lane % lanes).
// Blocks per SM the register allocation must allow: 3 (<= 168 registers) keeps up to 4 heads
// per block spill-free; 8 heads (64 fp32 accumulators and 32 words of q per lane) need up to
// 255 registers, so 2.
template <int GMAX>
constexpr int kMinBlocksPerSm = GMAX >= 8 ? 2 : 3;

template <class T, int VEC, int NC, int GMAX>
__global__ void __launch_bounds__(kAttnThreads, kMinBlocksPerSm<GMAX>) paged_attention_kernel(Args a) {
  static_assert(VEC * NC <= 8, "at most 8 dimensions per lane");
  __shared__ float probs[GMAX][kMaxChunk];  // a chunk's scores, then exp(score - max); at the end the sums
  __shared__ float run_max[GMAX], run_sum[GMAX], rescale[GMAX];
  const T* __restrict__ q = static_cast<const T*>(a.q);
  const T* __restrict__ k_cache = static_cast<const T*>(a.k_cache);
  const T* __restrict__ v_cache = static_cast<const T*>(a.v_cache);

  const int part = blockIdx.x, seq = blockIdx.z;
  const int blocks_per_group = (a.group + GMAX - 1) / GMAX;
  const int kv = blockIdx.y / blocks_per_group, first = (blockIdx.y % blocks_per_group) * GMAX;
  const int head0 = kv * a.group + first;  // this block's query heads: head0 .. head0 + heads - 1
  const int heads = min(GMAX, a.group - first);
  const int len = context_length(a.context_lens, seq, a.max_blocks * a.block_size);
  int begin = 0, end = len;
  if (a.parts > 1) {
    const int size = partition_size(len, a.parts);
    begin = part * size;
    end = min(len, begin + size);
    if (begin >= end) return;  // an empty partition: the combine kernel does not read it
  }

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int lanes = a.lanes, rows_per_warp = 32 / lanes;
  const int c = lane & (lanes - 1), row_in_warp = lane / lanes;
  const int rows_per_step = kAttnWarps * rows_per_warp, chunk = kSteps * rows_per_step;
  const int nvec = a.s / VEC;
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks;

  uint32_t qr[GMAX][NC][kWords<VEC>];  // the lane's slice of every query head
#pragma unroll
  for (int g = 0; g < GMAX; ++g) load_row<T, VEC, NC>(q + (static_cast<int64_t>(seq) * a.heads + head0 + g) * a.s, g < heads, c, lanes, nvec, qr[g]);
  float acc[GMAX][NC][VEC] = {};
  if (threadIdx.x < GMAX) run_max[threadIdx.x] = -INFINITY, run_sum[threadIdx.x] = 0.0f;
  const int held = c / (lanes / GMAX);  // the head whose score row_reduce leaves in this lane

  for (int start = begin; start < end; start += chunk) {
    const int n = min(chunk, end - start);
    // Cache rows (block * block_size + slot) of this lane's positions: one block-table read
    // each, shared by K and V.
    int32_t row[kSteps];
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      const int i = step * rows_per_step + warp * rows_per_warp + row_in_warp, t = start + i;
      row[step] = i < n ? table[t / a.block_size] * a.block_size + t % a.block_size : 0;
    }
    // 1. Scores q . k * scale into probs[head][i].
#pragma unroll
    for (int step0 = 0; step0 < kSteps; step0 += kUnroll) {
      uint32_t kr[kUnroll][NC][kWords<VEC>];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = (step0 + u) * rows_per_step + warp * rows_per_warp + row_in_warp;
        load_row<T, VEC, NC>(k_cache + (static_cast<int64_t>(row[step0 + u]) * a.kv_count + kv) * a.s, i < n, c, lanes, nvec, kr[u]);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float dot[GMAX];
#pragma unroll
        for (int g = 0; g < GMAX; ++g) {
          dot[g] = 0.0f;
#pragma unroll
          for (int j = 0; j < NC; ++j)
#pragma unroll
            for (int e = 0; e < VEC; ++e) dot[g] = fmaf(element<T, VEC>(qr[g][j], e), element<T, VEC>(kr[u][j], e), dot[g]);
        }
        const float score = row_reduce<GMAX>(dot, c, lanes) * a.scale;  // every lane shuffles
        const int i = (step0 + u) * rows_per_step + warp * rows_per_warp + row_in_warp;
        if (i < n && held < heads && c % (lanes / GMAX) == 0) probs[held][i] = score;
      }
    }
    __syncthreads();
    // 2. Softmax update: warp w owns heads w, w + kAttnWarps, ...
    for (int g = warp; g < heads; g += kAttnWarps) {
      float m = -INFINITY;
      for (int i = lane; i < n; i += 32) m = fmaxf(m, probs[g][i]);
      for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, gpu_shfl_xor(m, offset));
      const float old_max = run_max[g], new_max = fmaxf(old_max, m);
      float sum = 0.0f;
      for (int i = lane; i < n; i += 32) {
        const float p = expf(probs[g][i] - new_max);
        probs[g][i] = p;
        sum += p;
      }
      for (int offset = 16; offset > 0; offset >>= 1) sum += gpu_shfl_xor(sum, offset);
      if (lane == 0) {
        const float factor = expf(old_max - new_max);  // 0 on the first chunk (old_max = -inf)
        rescale[g] = factor;
        run_sum[g] = run_sum[g] * factor + sum;
        run_max[g] = new_max;
      }
    }
    __syncthreads();
    // 3. acc = acc * rescale + sum over the chunk of p * v.
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
      const float factor = g < heads ? rescale[g] : 1.0f;
#pragma unroll
      for (int j = 0; j < NC; ++j)
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[g][j][e] *= factor;
    }
#pragma unroll
    for (int step0 = 0; step0 < kSteps; step0 += kUnroll) {
      uint32_t vr[kUnroll][NC][kWords<VEC>];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = (step0 + u) * rows_per_step + warp * rows_per_warp + row_in_warp;
        load_row<T, VEC, NC>(v_cache + (static_cast<int64_t>(row[step0 + u]) * a.kv_count + kv) * a.s, i < n, c, lanes, nvec, vr[u]);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = (step0 + u) * rows_per_step + warp * rows_per_warp + row_in_warp;
#pragma unroll
        for (int g = 0; g < GMAX; ++g) {
          const float p = i < n && g < heads ? probs[g][i] : 0.0f;  // stale entries are never used
#pragma unroll
          for (int j = 0; j < NC; ++j)
#pragma unroll
            for (int e = 0; e < VEC; ++e) acc[g][j][e] = fmaf(p, element<T, VEC>(vr[u][j], e), acc[g][j][e]);
        }
      }
    }
    __syncthreads();  // probs and rescale are rewritten by the next chunk
  }

  // Sum the rows of each warp (lanes with the same c), then the warps in a fixed order through
  // shared memory (deterministic), reusing probs as total[head * S + dim].
#pragma unroll
  for (int g = 0; g < GMAX; ++g)
#pragma unroll
    for (int j = 0; j < NC; ++j)
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        for (int offset = lanes; offset < 32; offset <<= 1) acc[g][j][e] += gpu_shfl_xor(acc[g][j][e], offset);
  float* total = &probs[0][0];
  for (int w = 0; w < kAttnWarps; ++w) {
    if (warp == w && lane < lanes) {
#pragma unroll
      for (int g = 0; g < GMAX; ++g)
#pragma unroll
        for (int j = 0; j < NC; ++j)
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const int vi = c + j * lanes;
            if (g < heads && vi < nvec) {
              const int idx = g * a.s + vi * VEC + e;
              total[idx] = (w == 0 ? 0.0f : total[idx]) + acc[g][j][e];
            }
          }
    }
    __syncthreads();
  }
  for (int idx = threadIdx.x; idx < heads * a.s; idx += kAttnThreads) {
    const int g = idx / a.s, d = idx % a.s;
    const int64_t o = static_cast<int64_t>(seq) * a.heads + head0 + g;
    if (a.parts == 1)
      static_cast<T*>(a.out)[o * a.s + d] = from_float<T>(run_sum[g] > 0.0f ? total[idx] / run_sum[g] : 0.0f);
    else
      a.ws_acc[(o * a.parts + part) * a.s + d] = total[idx];
  }
  if (a.parts > 1 && threadIdx.x < heads) {
    const int64_t o = (static_cast<int64_t>(seq) * a.heads + head0 + threadIdx.x) * a.parts + part;
    a.ws_stats[2 * o] = run_max[threadIdx.x];
    a.ws_stats[2 * o + 1] = run_sum[threadIdx.x];
  }
}

// grid = (H, B), block = kAttnThreads: out = sum_p e^(m_p - M) acc_p / sum_p e^(m_p - M) l_p over
// the non-empty partitions p of the sequence (M = max_p m_p).
template <class T>
__global__ void __launch_bounds__(kAttnThreads) combine_partitions_kernel(Args a) {
  __shared__ float weight[kMaxPartitions];
  const int head = blockIdx.x, seq = blockIdx.y;
  const int len = context_length(a.context_lens, seq, a.max_blocks * a.block_size);
  const int size = partition_size(len, a.parts);
  const int used = (len + size - 1) / size;
  const int64_t o = static_cast<int64_t>(seq) * a.heads + head;
  const float* stats = a.ws_stats + 2 * o * a.parts;
  float m = -INFINITY;
  for (int p = 0; p < used; ++p) m = fmaxf(m, stats[2 * p]);
  for (int p = threadIdx.x; p < used; p += kAttnThreads) weight[p] = expf(stats[2 * p] - m);
  __syncthreads();
  float sum = 0.0f;
  for (int p = 0; p < used; ++p) sum += weight[p] * stats[2 * p + 1];
  for (int d = threadIdx.x; d < a.s; d += kAttnThreads) {
    float x = 0.0f;
    for (int p = 0; p < used; ++p) x = fmaf(weight[p], a.ws_acc[(o * a.parts + p) * a.s + d], x);
    static_cast<T*>(a.out)[o * a.s + d] = from_float<T>(used > 0 ? x / sum : 0.0f);
  }
}

// Per device: the SM count (for the split decision) and a memory pool for the split-K
// workspace. The workspace is allocated and freed stream-ordered on the launch stream, so the
// call stays asynchronous on any stream; the pool's own release threshold keeps those few MB
// mapped between calls (the device's default pool would hand them back at every synchronise).
struct DeviceState {
  int sms = 0;
  gpuMemPool_t pool = nullptr;  // NULL: no pool (no stream-ordered allocator), never split
};

DeviceState device_state(int device) {
  static std::mutex mutex;
  static std::map<int, DeviceState> states;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = states.find(device);
  if (found != states.end()) return found->second;
  DeviceState state;
  if (gpuDeviceGetAttribute(&state.sms, gpuDevAttrMultiProcessorCount, device) != gpuSuccess) state.sms = 0;
  gpuMemPoolProps props{};
  props.allocType = gpuMemAllocationTypePinned;
  props.location.type = gpuMemLocationTypeDevice;
  props.location.id = device;
  if (gpuMemPoolCreate(&state.pool, &props) == gpuSuccess) {
    uint64_t keep = uint64_t(64) << 20;
    (void)gpuMemPoolSetAttribute(state.pool, gpuMemPoolAttrReleaseThreshold, &keep);
  } else {
    state.pool = nullptr;
  }
  (void)gpuGetLastError();  // a failed query only disables the split path
  states.emplace(device, state);
  return state;
}

// Smallest power of two >= x (x >= 1).
int pow2_at_least(int x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

template <class T, int VEC, int NC, int GMAX>
gpuError_t launch_as(Args a, int64_t b, gpuStream_t stream) {
  const int per_lane = (a.s / VEC + NC - 1) / NC;
  a.lanes = pow2_at_least(per_lane);
  if (a.lanes < kMinLanes) a.lanes = kMinLanes;
  if (a.lanes < GMAX) a.lanes = GMAX;  // row_reduce needs N <= lanes
  const int64_t blocks_per_group = (a.group + GMAX - 1) / GMAX;
  if (a.kv_count * blocks_per_group > 65535) return gpuErrorInvalidValue;
  const dim3 grid{static_cast<unsigned>(a.parts), static_cast<unsigned>(a.kv_count * blocks_per_group), static_cast<unsigned>(b)};
  paged_attention_kernel<T, VEC, NC, GMAX><<<grid, kAttnThreads, 0, stream>>>(a);
  if (a.parts > 1) {
    const dim3 combine_grid{static_cast<unsigned>(a.heads), static_cast<unsigned>(b)};
    combine_partitions_kernel<T><<<combine_grid, kAttnThreads, 0, stream>>>(a);
  }
  return gpuGetLastError();
}

template <class T>
gpuError_t launch_typed(Args a, int64_t b, gpuStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool aligned = a.s % kVec == 0 && (reinterpret_cast<uintptr_t>(a.q) | reinterpret_cast<uintptr_t>(a.k_cache) |
                                           reinterpret_cast<uintptr_t>(a.v_cache)) % 16 == 0;
  if (!aligned) return launch_as<T, 1, 8, kMaxGroup>(a, b, stream);  // any head size, scalar loads
  constexpr int kNc = kMaxHead / (32 * kVec);                         // vectors per lane for S = 256
  if (a.group == 1) return launch_as<T, kVec, kNc, 1>(a, b, stream);
  if (a.group == 2) return launch_as<T, kVec, kNc, 2>(a, b, stream);
  if (a.group <= 4) return launch_as<T, kVec, kNc, 4>(a, b, stream);
  return launch_as<T, kVec, kNc, kMaxGroup>(a, b, stream);
}

gpuError_t launch_any(FloatType type, const Args& a, int64_t b, gpuStream_t stream) {
  switch (type) {
    case FloatType::f32: return launch_typed<float>(a, b, stream);
    case FloatType::f16: return launch_typed<__half>(a, b, stream);
    case FloatType::bf16: return launch_typed<gpu_bfloat16>(a, b, stream);
  }
  return gpuErrorInvalidValue;
}

}  // namespace

gpuError_t launch_paged_attention_decode(const void* q, const void* k_cache, const void* v_cache, FloatType type,
                                          const int32_t* block_tables, const int32_t* context_lens, int64_t b, int64_t h,
                                          int64_t kv, int64_t s, int64_t block_size, int64_t max_blocks, float scale,
                                          void* out, gpuStream_t stream) {
  if (b == 0 || h == 0 || s == 0) return gpuSuccess;
  if (s > kMaxHead || kv <= 0 || h % kv != 0 || b > 65535 || h > 0x7fffffff || block_size <= 0 || max_blocks < 0 ||
      max_blocks * block_size > 0x7fffffff)
    return gpuErrorInvalidValue;
  Args a{q, k_cache, v_cache, block_tables, context_lens, out, nullptr, nullptr,
         static_cast<int>(h), static_cast<int>(h / kv), static_cast<int>(kv), static_cast<int>(s),
         static_cast<int>(block_size), static_cast<int>(max_blocks), 1, 0, scale};

  // Split-K when the (sequence, KV head, head block) grid would leave SMs idle: aim at ~4
  // blocks per SM, with partitions of at least kMinPartition positions of the longest
  // context the block tables can hold (the real lengths are only read on the device).
  int device = 0;
  if (gpuGetDevice(&device) != gpuSuccess) return gpuGetLastError();
  const DeviceState state = device_state(device);
  const int64_t base_blocks = b * kv * ((h / kv + kMaxGroup - 1) / kMaxGroup);
  const int64_t max_len = max_blocks * block_size;
  if (state.pool != nullptr && state.sms > 0 && base_blocks < 2 * state.sms && max_len > kMinPartition) {
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
