// EXPERIMENT, not part of the cuda plugin: y = x W^T (+ bias) on tensor cores for the few rows of
// a decode step (M <= 256), and the same GEMM with SwiGLU's product in its epilogue; timed beside
// cuBLAS by gemm_bench.cu (run_gpu_perf.sh stage `gemm`). Kept as the starting point of a plugin
// GEMM, with what it taught (README.md beside it; docs/benchmarks-log.md, 2026-12-01):
//
// The idea: cuBLAS kernels are launched without programmatic dependent launch and cannot fuse
// the layer's neighbours, so a GEMM of our own could (1) be placed while the previous kernel
// runs, hint its weight slice into L2 (prefetch_l2) and only then wait (griddepcontrol.wait);
// (2) compute SwiGLU's product in the gate/up epilogue (no [M, 2F] round trip, one kernel less a
// layer); (3) split a long K (the down projection) over a thread-block cluster whose CTAs add
// their partial tiles through distributed shared memory in rank order (no workspace, no reduce
// kernel, deterministic).
//
// What it measured (H200, M = 256, per layer call in a graph behind an RMSNorm): correct (70 of
// 70 shapes and row counts within the fp64 check's tolerance) but, in its best configuration per
// projection, 1.4-1.6x cuBLAS's time (7x in the worst); gate/up + SwiGLU 21.4 against cuBLAS +
// silu_mul 13.9 us. Nsight Compute: latency-bound, neither memory- nor tensor-bound (memory 33%,
// SM 30%, 12% achieved occupancy: one 8-warp CTA per SM, 6.8-7.4 cycles between a warp's
// instructions, stalls on ldmatrix results and on the mma chain). The L2 hint changed nothing
// measurable; PDL off cost 0.6-2.3 us in three of the four projections. A competitive version
// needs Hopper's own path: TMA loads (no address arithmetic; multicast of the operand CTAs of a
// cluster share, halving its L2 reads) and wgmma (asynchronous, 64-row warpgroup tiles) - days
// of work, not a tweak.
//
// Structure: a CTA computes a BM x BN tile of y (for SwiGLU: BN gate columns and the same BN up
// columns, i.e. 2 BN rows of W) over its K range in 64-wide chunks, through a STAGES-deep
// cp.async pipeline of swizzled shared rows (16-byte piece c of row r at c ^ (r & 7): ldmatrix
// and cp.async conflict-free). WM x WN warps each own a (BM / WM) x (BN / WN) sub-tile and issue
// ldmatrix + mma.sync m16n8k16 (fp32 accumulate). Fragment layouts as in the PTX ISA's
// "Matrix Fragments for mma.m16n8k16" (see attention_mma_kernel.cu's header).
//
// Numerics: products exact, fp32 accumulation in the tensor core's order, bias added in fp32,
// one rounding to the output type. SwiGLU: gate and up are rounded to the type first, then
// SwiGLU's product exactly as the plugin's silu_mul computes it (layer_ops.cuh's silu_product).
// Split K: the cluster adds the partial sums in rank order.
#include "dependent_launch.cuh"
#include "gemm_mma_experiment.hpp"
#include "layer_ops.cuh"
#include "workspace_pool.hpp"

#if !(defined(VERLPP_GPU_HIP) && VERLPP_GPU_HIP)

#include "mma_ptx.cuh"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdlib>
#include <cstdint>

namespace verlpp::cuda {
namespace {

namespace cg = cooperative_groups;

// Hints that the 128-byte line holding `p` be brought into L2 (no register written, no fault:
// an address no kernel writes meanwhile is the only safe use of the data, the hint itself always is).
__device__ __forceinline__ void prefetch_l2(const void* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
#endif
}

constexpr int kBK = 64;  // K per pipeline stage: one 128-byte shared row per tile row
constexpr int kRowBytes = kBK * 2;

struct GemmParams {
  const __nv_bfloat16* a;     // [m, k], row stride lda
  const __nv_bfloat16* b;     // [rows, k] (W), row stride ldb
  const __nv_bfloat16* bias;  // [rows] or NULL
  __nv_bfloat16* out;         // [m, n], row stride ldo
  int64_t lda, ldb, ldo;
  int m, n, k;    // n: output columns
  int up_offset;  // SwiGLU: W's row of up column 0 (F)
  int prefetch;   // hint the weights into L2 before the wait (1) or not (0)
};

// Byte offset of 16-byte piece `chunk` of shared row `row` (swizzled).
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  return uint32_t(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// W's row for B-tile row j of the tile at column n0 (SwiGLU: rows [0, BN) gate, [BN, 2 BN) up).
template <int BN, bool SILU>
__device__ __forceinline__ int weight_row(const GemmParams& p, int n0, int j) {
  if constexpr (SILU) return j < BN ? n0 + j : p.up_offset + n0 + (j - BN);
  return n0 + j;
}

template <int BM, int BN, int WM, int WN, int STAGES, bool SILU, int SPLITS>
__global__ void __launch_bounds__(WM* WN * 32) gemm_kernel(GemmParams p) {
  constexpr int kThreads = WM * WN * 32;
  constexpr int BNB = SILU ? 2 * BN : BN;      // rows of W per tile
  constexpr int TM = BM / WM, TN = BN / WN;    // warp sub-tile (output columns)
  constexpr int MT = TM / 16;                  // m16 tiles per warp
  constexpr int NT = (SILU ? 2 : 1) * TN / 8;  // n8 tiles per warp (SwiGLU: gate ones, then up ones)
  constexpr int kStageBytes = (BM + BNB) * kRowBytes;
  static_assert(TM % 16 == 0 && TN % 8 == 0 && NT % 2 == 0, "warp tile");
  static_assert(SPLITS == 1 || !SILU, "SwiGLU needs the whole K");
  extern __shared__ __align__(128) unsigned char smem[];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WN, wn = warp % WN;
  const int n0 = blockIdx.y * BN, m0 = blockIdx.z * BM;
  const int split = SPLITS > 1 ? int(blockIdx.x) : 0;
  const int k_tiles_all = (p.k + kBK - 1) / kBK;
  const int kt_begin = split * k_tiles_all / SPLITS, kt_end = (split + 1) * k_tiles_all / SPLITS;
  const int k_tiles = kt_end - kt_begin;

  // Before the wait: hint this CTA's weight rows of its K range into L2 (a hint reads nothing
  // into registers, so it cannot see a stale value of memory the previous kernel writes).
  for (int i = tid; p.prefetch && i < BNB * k_tiles; i += kThreads) {
    const int j = i / k_tiles, kt = kt_begin + i % k_tiles;
    const int col = (SILU ? (j < BN ? j : j - BN) : j);
    if (n0 + col < p.n) prefetch_l2(p.b + int64_t(weight_row<BN, SILU>(p, n0, j)) * p.ldb + int64_t(kt) * kBK);
  }
  wait_for_prior_grids();

  // Each thread copies the same 16-byte pieces of every stage: kAChunks of the A tile and
  // kBChunks of the B tile, whose source pointers (at this CTA's first K chunk) and swizzled
  // destinations are computed once here; a stage then only adds its K offset (the loop is
  // otherwise bound by address arithmetic, not by the tensor cores).
  constexpr int kAChunks = BM * 8 / kThreads, kBChunks = BNB * 8 / kThreads;
  static_assert(BM * 8 % kThreads == 0 && BNB * 8 % kThreads == 0, "whole chunks per thread");
  const uint32_t base = smem_addr(smem);
  const int chunk = tid & 7;  // the same K piece in every row a thread copies
  const int k_first = kt_begin * kBK + chunk * 8;
  const __nv_bfloat16* a_src[kAChunks];
  const __nv_bfloat16* b_src[kBChunks];
  uint32_t a_dst[kAChunks], b_dst[kBChunks];
  bool a_ok[kAChunks], b_ok[kBChunks];
#pragma unroll
  for (int c = 0; c < kAChunks; ++c) {
    const int row = (tid + c * kThreads) >> 3;
    a_ok[c] = m0 + row < p.m;
    a_src[c] = p.a + (a_ok[c] ? int64_t(m0 + row) * p.lda + k_first : 0);
    a_dst[c] = swizzled(row, chunk);
  }
#pragma unroll
  for (int c = 0; c < kBChunks; ++c) {
    const int j = (tid + c * kThreads) >> 3, col = SILU ? (j < BN ? j : j - BN) : j;
    b_ok[c] = n0 + col < p.n;
    b_src[c] = p.b + (b_ok[c] ? int64_t(weight_row<BN, SILU>(p, n0, j)) * p.ldb + k_first : 0);
    b_dst[c] = BM * kRowBytes + swizzled(j, chunk);
  }
  auto load_stage = [&](int stage, int kt) {
    const uint32_t sa = base + stage * kStageBytes;
    const int k_offset = kt * kBK;
    const bool k_ok = k_first + k_offset < p.k;  // k % 8 == 0: a piece is wholly in or out
#pragma unroll
    for (int c = 0; c < kAChunks; ++c) {
      const bool ok = a_ok[c] && k_ok;
      cp_async_16(sa + a_dst[c], ok ? a_src[c] + k_offset : p.a, ok);
    }
#pragma unroll
    for (int c = 0; c < kBChunks; ++c) {
      const bool ok = b_ok[c] && k_ok;
      cp_async_16(sa + b_dst[c], ok ? b_src[c] + k_offset : p.b, ok);
    }
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][t][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  // B-tile row of n8 tile t of this warp (SwiGLU: tiles [0, NT/2) gate, [NT/2, NT) up).
  auto b_row = [&](int t) {
    if constexpr (SILU) return t < NT / 2 ? wn * TN + t * 8 : BN + wn * TN + (t - NT / 2) * 8;
    return wn * TN + t * 8;
  };
  // ldmatrix addresses at kk = 0; step kk reads piece 2 kk + c, which with the swizzle is the
  // kk = 0 address XOR (kk << 5) (the pieces' low bit c never carries into 2 kk).
  uint32_t a_frag[MT], b_frag[NT / 2];
#pragma unroll
  for (int i = 0; i < MT; ++i) a_frag[i] = swizzled(wm * TM + i * 16 + (lane & 15), lane >> 4);
#pragma unroll
  for (int t = 0; t < NT; t += 2)  // lanes 0-15: tile t (k 0-7, then 8-15); lanes 16-31: tile t + 1
    b_frag[t / 2] = BM * kRowBytes + swizzled(b_row(t + (lane >> 4)) + (lane & 7), (lane >> 3) & 1);
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (kt + STAGES - 1 < k_tiles) load_stage((kt + STAGES - 1) % STAGES, kt + STAGES - 1);
    cp_async_commit();
    const uint32_t sa = base + (kt % STAGES) * kStageBytes;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t af[MT][4], bf[NT][2];
#pragma unroll
      for (int i = 0; i < MT; ++i) ldsm_x4(sa + (a_frag[i] ^ uint32_t(kk << 5)), af[i]);
#pragma unroll
      for (int t = 0; t < NT; t += 2) {
        uint32_t r[4];
        ldsm_x4(sa + (b_frag[t / 2] ^ uint32_t(kk << 5)), r);
        bf[t][0] = r[0], bf[t][1] = r[1], bf[t + 1][0] = r[2], bf[t + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int t = 0; t < NT; ++t) mma_16816<__nv_bfloat16>(acc[i][t], af[i], bf[t][0], bf[t][1]);
    }
  }
  cp_async_wait<0>();
  allow_dependents();  // the next kernel's CTAs may be placed as ours retire

  const int g = lane >> 2, q2 = (lane & 3) * 2;
  auto bias_at = [&](int row_of_w) { return p.bias != nullptr ? __bfloat162float(p.bias[row_of_w]) : 0.0f; };
  if constexpr (SPLITS == 1) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int t = 0; t < (SILU ? NT / 2 : NT); ++t) {
        const int col = n0 + wn * TN + t * 8 + q2;
        if (col >= p.n) continue;  // n % 8 == 0: col + 1 < n too
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = m0 + wm * TM + i * 16 + g + h * 8;
          if (row >= p.m) continue;
          float y0, y1;
          if constexpr (SILU) {
            const float g0 = round_to<__nv_bfloat16>(acc[i][t][2 * h] + bias_at(col));
            const float g1 = round_to<__nv_bfloat16>(acc[i][t][2 * h + 1] + bias_at(col + 1));
            const float u0 = round_to<__nv_bfloat16>(acc[i][t + NT / 2][2 * h] + bias_at(p.up_offset + col));
            const float u1 = round_to<__nv_bfloat16>(acc[i][t + NT / 2][2 * h + 1] + bias_at(p.up_offset + col + 1));
            y0 = silu_product<__nv_bfloat16>(g0, u0), y1 = silu_product<__nv_bfloat16>(g1, u1);
          } else {
            y0 = acc[i][t][2 * h] + bias_at(col), y1 = acc[i][t][2 * h + 1] + bias_at(col + 1);
          }
          *reinterpret_cast<__nv_bfloat162*>(p.out + int64_t(row) * p.ldo + col) = __floats2bfloat162_rn(y0, y1);
        }
      }
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // clusters: sm_90+ (the launcher asks for them only there)
    // Each CTA of the cluster leaves its fp32 partial tile in its own shared memory (the
    // pipeline's, now idle); rank r then sums rows [r BM / SPLITS, (r + 1) BM / SPLITS) of all
    // ranks' tiles in rank order and stores them.
    constexpr int kLd = BN + 4;  // padded fp32 row: the fragment stores spread over the banks
    static_assert(BM * kLd * 4 <= STAGES * kStageBytes, "partial tile fits the pipeline's memory");
    __syncthreads();
    float* tile = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wm * TM + i * 16 + g + h * 8, c = wn * TN + t * 8 + q2;
          *reinterpret_cast<float2*>(tile + r * kLd + c) = make_float2(acc[i][t][2 * h], acc[i][t][2 * h + 1]);
        }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    constexpr int kRows = BM / SPLITS;
    static_assert(BM % SPLITS == 0 && BN % 2 == 0, "rows per rank");
    const float* peers[SPLITS];
#pragma unroll
    for (int r = 0; r < SPLITS; ++r) peers[r] = cluster.map_shared_rank(tile, r);
    for (int i = tid; i < kRows * (BN / 2); i += kThreads) {
      const int r = split * kRows + i / (BN / 2), c = (i % (BN / 2)) * 2;
      const int row = m0 + r, col = n0 + c;
      float2 sum = make_float2(0.0f, 0.0f);
#pragma unroll
      for (int q = 0; q < SPLITS; ++q) {
        const float2 v = *reinterpret_cast<const float2*>(peers[q] + r * kLd + c);
        sum.x += v.x, sum.y += v.y;
      }
      if (row < p.m && col < p.n)
        *reinterpret_cast<__nv_bfloat162*>(p.out + int64_t(row) * p.ldo + col) =
            __floats2bfloat162_rn(sum.x + bias_at(col), sum.y + bias_at(col + 1));
    }
    cluster.sync();  // no rank leaves while another still reads its tile
#endif
  }
}

// ---- configurations ------------------------------------------------------------------------

template <int BM, int BN, int WM, int WN, int STAGES, bool SILU, int SPLITS>
gpuError_t launch_config(const GemmParams& p, gpuStream_t stream) {
  constexpr int BNB = SILU ? 2 * BN : BN;
  constexpr size_t kSmem = size_t(STAGES) * (BM + BNB) * kRowBytes;
  auto kernel = gemm_kernel<BM, BN, WM, WN, STAGES, SILU, SPLITS>;
  // Once per configuration and device (the attribute is per function and device); a failure
  // shows again at the launch.
  static thread_local int configured_device = -1;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return cudaGetLastError();
  if (configured_device != device) {
    const cudaError_t set = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem));
    if (set != cudaSuccess) return set;
    configured_device = device;
  }
  const dim3 grid{unsigned(SPLITS), unsigned((p.n + BN - 1) / BN), unsigned((p.m + BM - 1) / BM)};
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(WM * WN * 32);
  config.dynamicSmemBytes = kSmem;
  config.stream = stream;
  cudaLaunchAttribute attributes[2];
  int count = 0;
  if (SPLITS > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = SPLITS;
    attributes[count].val.clusterDim.y = 1;
    attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  if (dependent_launch_enabled()) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  config.attrs = attributes;
  config.numAttrs = count;
  return cudaLaunchKernelEx(&config, kernel, p);
}

}  // namespace

// The configurations, by index (gemm_bench.cu sweeps them).
int gemm_config_count() { return 6; }

const char* gemm_config_name(int config) {
  static const char* const names[] = {"128x64 w4x2 s4",    "128x64 w4x2 s4 k2",   "128x64 w4x2 s4 k4",
                                      "256x64 w4x2 s3 k8", "silu 128x80 w4x2 s4", "silu 128x64 w4x2 s4"};
  return config >= 0 && config < 6 ? names[config] : "?";
}

bool gemm_config_silu(int config) { return config >= 4; }

gpuError_t launch_gemm_config(int config, const void* a, int64_t lda, const void* b, int64_t ldb, const void* bias,
                              void* out, int64_t ldo, int64_t m, int64_t n, int64_t k, int64_t up_offset,
                              gpuStream_t stream) {
  GemmParams p{};
  p.a = static_cast<const __nv_bfloat16*>(a), p.b = static_cast<const __nv_bfloat16*>(b);
  p.bias = static_cast<const __nv_bfloat16*>(bias), p.out = static_cast<__nv_bfloat16*>(out);
  p.lda = lda, p.ldb = ldb, p.ldo = ldo;
  p.m = int(m), p.n = int(n), p.k = int(k), p.up_offset = int(up_offset);
  static const bool prefetch = [] {
    const char* env = std::getenv("VERLPP_GEMM_PREFETCH");
    return env == nullptr || env[0] != '0';
  }();
  p.prefetch = prefetch ? 1 : 0;
  switch (config) {
    case 0:
      return launch_config<128, 64, 4, 2, 4, false, 1>(p, stream);
    case 1:
      return launch_config<128, 64, 4, 2, 4, false, 2>(p, stream);
    case 2:
      return launch_config<128, 64, 4, 2, 4, false, 4>(p, stream);
    case 3:
      return launch_config<256, 64, 4, 2, 3, false, 8>(p, stream);
    case 4:
      return launch_config<128, 80, 4, 2, 4, true, 1>(p, stream);
    case 5:
      return launch_config<128, 64, 4, 2, 4, true, 1>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace verlpp::cuda

#endif
