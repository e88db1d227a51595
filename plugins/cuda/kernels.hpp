// cuda: launchers of the plugin's CUDA kernels. Raw pointers, element strides and a stream in,
// a cudaError_t out: no DLPack and no plugin types, so the .cu files (the only ones nvcc compiles)
// stay small and the argument checks live in kernel_table.cpp.
#pragma once

#include "gpu_runtime.hpp"

#include <cstdint>

namespace verlpp::cuda {

// Element type of a floating-point input.
enum class FloatType { f32, f16, bf16 };

// Per row r < n: z = logits[r, :] / temperature (fp32 math), lse = log(sum(exp(z)));
// out_logprob[r] = z[labels[r]] - lse; out_entropy[r] = lse - sum(softmax(z) * z) if not NULL.
// A label outside [0, v) gives NaN in out_logprob (checking it on the host would need a sync).
// logits [n, v] with row stride `row_stride` elements, columns dense; labels [n] int64;
// out_logprob, out_entropy [n] f32.
gpuError_t launch_logprob_entropy(const void* logits, FloatType type, int64_t n, int64_t v, int64_t row_stride,
                                  const int64_t* labels, float temperature, float* out_logprob, float* out_entropy,
                                  gpuStream_t stream);

// The backward of launch_logprob_entropy (plugin_abi.h's logprob_backward): per row r < n and
// column j < v, with z = logits[r, j] / temperature and p = exp(z - lse[r]),
// out[r, j] = (g_lp[r] ([j == labels[r]] - p) - g_ent[r] p (z - mean_z[r])) / temperature, fp32
// math rounded once to the type. grad_logprob, mean_z and grad_entropy may be NULL (zero);
// a label outside [0, v) gives NaN in its row. `out` may be `logits` with the same row stride.
gpuError_t launch_logprob_backward(const void* logits, FloatType type, int64_t n, int64_t v, int64_t row_stride,
                                   const int64_t* labels, const float* lse, const float* grad_logprob,
                                   const float* mean_z, const float* grad_entropy, float temperature, void* out,
                                   int64_t out_row_stride, gpuStream_t stream);

// SwiGLU (plugin_abi.h's silu_mul / silu_mul_backward): [n, f] operands of one type with dense
// columns, row strides in elements. Forward: out = T(T(silu(gate)) * up). Backward: grad_up =
// T(grad * T(silu(gate))), grad_gate = T(T(grad * up) * sig (1 + gate (1 - sig))), fp32 inside.
gpuError_t launch_silu_mul(const void* gate, int64_t gate_stride, const void* up, int64_t up_stride, void* out,
                           int64_t out_stride, FloatType type, int64_t n, int64_t f, gpuStream_t stream);
gpuError_t launch_silu_mul_backward(const void* gate, int64_t gate_stride, const void* up, int64_t up_stride,
                                    const void* grad, int64_t grad_stride, void* grad_gate, int64_t grad_gate_stride,
                                    void* grad_up, int64_t grad_up_stride, FloatType type, int64_t n, int64_t f,
                                    gpuStream_t stream);

// ABI 1.4's adamw_update (adamw_kernels.cu): one tensor's operands, contiguous, `numel`
// elements each; grad in the call's grad type, copy NULL or in its copy type.
struct AdamwTensors {
  float* param = nullptr;
  const void* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  void* copy = nullptr;
  int64_t numel = 0;
};
// The update's fp32 scalars (the SDK's AdamwArgs, computed in double and rounded once).
struct AdamwScalars {
  float weight_decay_factor, one_minus_beta1, beta2, one_minus_beta2, step_size, bias_correction2_sqrt, eps;
};
// plugin_abi.h's update for every tensor; grad_scale NULL (1) or a device f32 read by the kernel
// (not finite: nothing written). A few launches: up to 64 tensors each.
gpuError_t launch_adamw_update(const AdamwTensors* tensors, int32_t count, FloatType grad_type, bool has_copies,
                               FloatType copy_type, const AdamwScalars& scalars, const float* grad_scale,
                               gpuStream_t stream);
// out[r, :] = weight * round_to_type(x[r, :] / sqrt(mean(x[r, :]^2) + eps)), as HF's RMSNorm
// (normalise in fp32, round to the input type, then scale). x, out [n, d]; weight [d]; one type.
gpuError_t launch_rms_norm(const void* x, const void* weight, FloatType type, int64_t n, int64_t d, float eps,
                           void* out, gpuStream_t stream);

// RoPE in place, HF's rotate_half layout (dims j and j + half of a head form a pair), with the
// host model's rounding in type T: angle = float(positions[t]) * inv_freq[j] (fp32), cos/sin
// of it (fp64, rounded to fp32, then to T), x_j' = T(T(x_j c) - T(x_{j+half} s)) and
// x_{j+half}' = T(T(x_{j+half} c) + T(x_j s)), no fused multiply-add. q [n, hq, 2 half],
// k [n, hk, 2 half], contiguous, one type; either may be NULL (its head count is then ignored);
// positions [n] int64; inv_freq [half] f32. half <= 4096.
gpuError_t launch_rotary_embedding(void* q, int64_t hq, void* k, int64_t hk, FloatType type, int64_t n, int64_t half,
                                   const int64_t* positions, const float* inv_freq, gpuStream_t stream);

// ABI 1.3, decode-step fusions (decode_fusion_kernels.cu). Each rounds exactly where the
// kernels it fuses round, through the same device functions (layer_ops.cuh).
//
// add_rms_norm: residual = T(residual + x) in place (one fp32 add), then out = launch_rms_norm's
// result for the updated residual, bit for bit. x, residual, out [n, d]; weight [d]; one type,
// contiguous; residual may be x, out overlaps nothing.
gpuError_t launch_add_rms_norm(const void* x, void* residual, const void* weight, FloatType type, int64_t n, int64_t d,
                               float eps, void* out, gpuStream_t stream);

// rotary_kv_store's operands. q [n, H, S], k and v [n, K, S], heads and head dims dense, rows at
// the given strides (elements; views of one fused projection are fine); q_out [n, H, S]
// contiguous; k_cache, v_cache [slots, K, S] contiguous (= [num_blocks, block_size, K, S]);
// positions, slot_mapping [n] int64; inv_freq [half] f32. Outputs overlap nothing.
struct RotaryKvStoreOperands {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t q_row_stride = 0, k_row_stride = 0, v_row_stride = 0;
  const int64_t* positions = nullptr;
  const float* inv_freq = nullptr;
  const int64_t* slot_mapping = nullptr;
  void* q_out = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int64_t tokens = 0, q_heads = 0, kv_heads = 0, half = 0;
  int64_t slots = 0;  // num_blocks * block_size
};
// The largest S/2 the RoPE kernels take (their cos/sin live in shared memory).
constexpr int64_t kMaxRotaryHalf = 4096;
// q_out = rope(q), k_cache[slot_mapping[t]] = rope(k[t]), v_cache[slot_mapping[t]] = v[t], with
// launch_rotary_embedding's angle, cos/sin and roundings, bit for bit; one launch. A slot outside
// [0, slots) skips that token's k and v stores (the values live on the device; refusing them
// would need a sync); its q is still rotated. half <= kMaxRotaryHalf.
gpuError_t launch_rotary_kv_store(const RotaryKvStoreOperands& operands, FloatType type, gpuStream_t stream);

// Decode attention, one query token per sequence, GQA (query head h reads KV head h / (H / K)):
// out[b, h] = softmax(q[b, h] . k[t] * scale over t < context_lens[b]) . v[t], where position t
// lives in block block_tables[b, t / block_size], slot t % block_size. fp32 math.
// q, out [b, H, S]; k_cache, v_cache [num_blocks, block_size, K, S]; one float type;
// block_tables [b, max_blocks] int32; context_lens [b] int32 (read on the device only: lengths
// are clamped to [0, max_blocks * block_size]). S <= 256, b <= 65535, fewer than 2^31 cache
// positions. When the (sequence, KV head) grid is too small for the GPU, the context is split
// over several blocks whose partial results live in a workspace allocated and freed in stream
// order on `stream`; nothing waits for the stream. bf16/f16 with head size 64 or 128 and blocks of
// a multiple of 16 positions run on tensor cores (attention_mma_kernel.cu, sm_80+); the rest on
// CUDA cores (attention_kernel.cu).
gpuError_t launch_paged_attention_decode(const void* q, const void* k_cache, const void* v_cache, FloatType type,
                                         const int32_t* block_tables, const int32_t* context_lens, int64_t b, int64_t h,
                                         int64_t kv, int64_t s, int64_t block_size, int64_t max_blocks, float scale,
                                         void* out, gpuStream_t stream);
// ABI 1.5: launch_rotary_kv_store then launch_paged_attention_decode over the rotated q, bit for
// bit, with b = operands.tokens sequences whose new token is the last position of its context
// (its slot the cache row of position context_lens[b] - 1). bf16/f16 at head 64/128 whose q rows
// lie on the 4-byte grid run as one tensor-core kernel that rotates q in registers and takes the
// new K/V row from shared memory (attention_mma_kernel.cu); the rest through
// launch_rotary_then_attention.
gpuError_t launch_rotary_paged_attention_decode(const RotaryKvStoreOperands& operands, FloatType type,
                                                const int32_t* block_tables, const int32_t* context_lens,
                                                int64_t block_size, int64_t max_blocks, float scale, void* out,
                                                gpuStream_t stream);
// The two launches, the rotated q in a workspace of the stream-ordered pool (decode_fusion_kernels.cu).
gpuError_t launch_rotary_then_attention(const RotaryKvStoreOperands& operands, FloatType type,
                                        const int32_t* block_tables, const int32_t* context_lens, int64_t block_size,
                                        int64_t max_blocks, float scale, void* out, gpuStream_t stream);
// The CUDA-core kernel alone (same contract; launch_paged_attention_decode falls back to it).
gpuError_t launch_paged_attention_decode_simt(const void* q, const void* k_cache, const void* v_cache, FloatType type,
                                              const int32_t* block_tables, const int32_t* context_lens, int64_t b,
                                              int64_t h, int64_t kv, int64_t s, int64_t block_size, int64_t max_blocks,
                                              float scale, void* out, gpuStream_t stream);

// One token per row r < b from softmax(logits[r] / temperature[r]) restricted to the top_k[r]
// largest (<= 0 or >= v: all) and then to the shortest most-likely-first prefix whose mass
// reaches top_p[r] of theirs (>= 1: all; ties at a boundary are kept); temperature <= 0 means
// greedy (first argmax). The draw is uniform_draw(seeds[r], step) (splitmix64, as cpu_ref).
// out_logprobs[r] = log_softmax(logits[r] / t)[token] (t = 1 when greedy).
// logits [b, v] of `type` (f32, or bf16 / f16 from ABI 1.3: read as their exact fp32 values, with
// the same tokens and log-probs, bit for bit, as fp32 logits at the same element offset from a
// 16-byte aligned allocation), contiguous, aligned to their element size; temperature, top_p
// [b] f32; top_k [b] i32; seeds [b] u64; out_tokens [b] i64; out_logprobs [b] f32.
// v <= 2^31 - 2^20. Rows may be split over several blocks whose partials live in a workspace
// allocated and freed in stream order on `stream` (sample_kernel.cu); nothing waits for the stream.
gpuError_t launch_sample(const void* logits, FloatType type, int64_t b, int64_t v, const float* temperature,
                         const int32_t* top_k, const float* top_p, const uint64_t* seeds, uint64_t step,
                         int64_t* out_tokens, float* out_logprobs, gpuStream_t stream);

// Element-wise copy between two device views of the same shape: dst[i...] = src[i...].
// Strides in elements (any sign-free layout, e.g. transposed); at most kMaxCopyDims dims;
// element_size 1, 2, 4, 8 or 16 bytes.
constexpr int kMaxCopyDims = 8;
struct StridedLayout {
  int32_t ndim = 0;
  int64_t shape[kMaxCopyDims] = {};
  int64_t src_strides[kMaxCopyDims] = {};
  int64_t dst_strides[kMaxCopyDims] = {};
};
gpuError_t launch_strided_copy(const void* src, void* dst, const StridedLayout& layout, int64_t numel,
                               int32_t element_size, gpuStream_t stream);

}  // namespace verlpp::cuda
