/*
 * verlpp hardware plugin ABI, major version 1.
 *
 * The whole contract between the verlpp host and a plugin shared object, in plain C (C99) so
 * that any toolchain can build a plugin. Rules (docs/plugin-abi.md says them at length):
 *  - two exported symbols carry the major in their names: verlpp_plugin_probe_v1 (cheap, no
 *    device context) and verlpp_plugin_get_api_v1 (the function table);
 *  - every struct starts with `size_t struct_size`; minor versions only append fields; a reader
 *    uses the first min(sender's, own) bytes and takes zero/NULL defaults for the rest;
 *  - every fallible function returns a verlpp_error* (NULL = success) that the plugin allocates
 *    and the host frees through api->error_free; no C++ exception crosses this boundary;
 *  - tensors cross as DLPack DLTensor, borrowed for the duration of the call; streams are
 *    explicit arguments (NULL = the device's default stream, which is synchronous);
 *  - a function added in minor N (marked below) is called only when the plugin's abi_minor >= N
 *    and the pointer is non-NULL;
 *  - any function pointer may be NULL: the host then uses its own fallback or reports the
 *    capability as absent. Optional means optional; the host checks before calling.
 */
#ifndef VERLPP_PLUGIN_ABI_H_
#define VERLPP_PLUGIN_ABI_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VERLPP_PLUGIN_ABI_MAJOR 1
#define VERLPP_PLUGIN_ABI_MINOR 6

/* Symbol names, for dlsym and for the SDK's export macro. */
#define VERLPP_PLUGIN_PROBE_SYMBOL "verlpp_plugin_probe_v1"
#define VERLPP_PLUGIN_GET_API_SYMBOL "verlpp_plugin_get_api_v1"

#if defined(_WIN32)
#define VERLPP_PLUGIN_EXPORT_ATTR __declspec(dllexport)
#else
#define VERLPP_PLUGIN_EXPORT_ATTR __attribute__((visibility("default")))
#endif

/* ---------------------------------------------------------------- errors */

/* Error codes. New codes may be added in later minors; a host treats unknown codes as INTERNAL. */
typedef enum verlpp_status {
  VERLPP_STATUS_OK = 0,
  VERLPP_STATUS_INVALID_ARGUMENT = 1, /* bad pointer, index, shape, dtype, size */
  VERLPP_STATUS_OUT_OF_MEMORY = 2,
  VERLPP_STATUS_UNSUPPORTED = 3,     /* the plugin does not offer this (on this device) */
  VERLPP_STATUS_DEVICE_ERROR = 4,    /* the device or its driver failed */
  VERLPP_STATUS_COMM_ERROR = 5,      /* a collective failed or a peer is gone */
  VERLPP_STATUS_TIMEOUT = 6,         /* a wait exceeded its limit */
  VERLPP_STATUS_NOT_INITIALIZED = 7, /* init was not called or failed */
  VERLPP_STATUS_INTERNAL = 8         /* a bug or an unexpected exception inside the plugin */
} verlpp_status;

/* An error value. Allocated by the plugin, read by the host, released with api->error_free. */
typedef struct verlpp_error {
  size_t struct_size;
  int32_t code;        /* verlpp_status */
  const char* message; /* UTF-8, NUL-terminated, owned by this error; never NULL */
} verlpp_error;

/* ---------------------------------------------------------------- host services */

/* Log levels for host_api->log. */
typedef enum verlpp_log_level {
  VERLPP_LOG_DEBUG = 0,
  VERLPP_LOG_INFO = 1,
  VERLPP_LOG_WARNING = 2,
  VERLPP_LOG_ERROR = 3
} verlpp_log_level;

/* What the host offers a plugin; passed to api->init and valid until api->shutdown returns. */
typedef struct verlpp_host_api {
  size_t struct_size;
  uint32_t host_abi_major;
  uint32_t host_abi_minor;
  void* ctx; /* passed back as the first argument of every callback below */
  /* Log a line through the host's logger (may be NULL: then the plugin stays quiet). */
  void (*log)(void* ctx, int32_t level, const char* plugin_name, const char* message);
} verlpp_host_api;

/* Receives a value read from the key-value store; `data` is valid only during the call. */
typedef void (*verlpp_kv_sink)(void* sink_ctx, const void* data, size_t size);

/* A rendezvous key-value store provided by the host (a c10d TCPStore in verlpp), shared by all
 * ranks of a communicator. Callbacks return 0 on success, a verlpp_status otherwise; they may be
 * called from any thread of the plugin. Keys are NUL-terminated; the host may prefix them. */
typedef struct verlpp_kv_store {
  size_t struct_size;
  void* ctx;
  int32_t (*set)(void* ctx, const char* key, const void* data, size_t size);
  /* Blocks until `key` exists or timeout_ms passes (VERLPP_STATUS_TIMEOUT); then calls sink. */
  int32_t (*get)(void* ctx, const char* key, int64_t timeout_ms, verlpp_kv_sink sink, void* sink_ctx);
  /* Atomically adds `delta` to the integer stored at `key` (0 if absent); returns the new value. */
  int32_t (*add)(void* ctx, const char* key, int64_t delta, int64_t* out_value);
} verlpp_kv_store;

/* ---------------------------------------------------------------- devices */

/* Capability bits of a device (verlpp_device_properties.capabilities). */
#define VERLPP_DEVICE_CAP_PINNED_HOST_MEMORY (1ull << 0) /* host_alloc_pinned gives real pinned memory */
#define VERLPP_DEVICE_CAP_ASYNC_STREAMS (1ull << 1)      /* streams run asynchronously to the host */
#define VERLPP_DEVICE_CAP_EVENT_TIMING (1ull << 2)       /* event_elapsed_ms is supported */
#define VERLPP_DEVICE_CAP_COMMUNICATOR (1ull << 3)       /* comm_create is supported */
#define VERLPP_DEVICE_CAP_BF16 (1ull << 4)               /* bf16 arithmetic is native */
#define VERLPP_DEVICE_CAP_FP16 (1ull << 5)               /* fp16 arithmetic is native */
#define VERLPP_DEVICE_CAP_HOST_ADDRESSABLE (1ull << 6)   /* device memory is host-addressable */
#define VERLPP_DEVICE_CAP_PEER_ACCESS (1ull << 7)        /* direct device-to-device access */
/* (1.5) The device's kernels are a correctness reference (plain loops, slower than LibTorch's own
 * path): the conformance suite runs them, a run does not call them. Without it, a run on the
 * device calls every kernel the plugin offers. */
#define VERLPP_DEVICE_CAP_REFERENCE_KERNELS (1ull << 8)

/* Properties of one device. The host sets struct_size before the call; the plugin writes at
 * most that many bytes. Strings are NUL-terminated and truncated to fit. */
typedef struct verlpp_device_properties {
  size_t struct_size;
  char name[128];             /* e.g. "NVIDIA H200" */
  char torch_device_type[32]; /* "cpu", "cuda" or "privateuseone" */
  int32_t torch_device_index; /* index within that torch device type */
  int32_t dl_device_type;     /* DLDeviceType of memory this device allocates */
  uint64_t total_memory_bytes;
  uint64_t free_memory_bytes; /* at the time of the query */
  uint64_t capabilities;      /* VERLPP_DEVICE_CAP_* bits */
  int32_t compute_major;      /* vendor compute capability, 0 where meaningless */
  int32_t compute_minor;
  int32_t multiprocessor_count; /* SMs / CUs / cores */
  int32_t reserved0;
} verlpp_device_properties;

/* Opaque handles, owned by the plugin. */
typedef struct verlpp_stream_s* verlpp_stream; /* NULL = the default (synchronous) stream */
typedef struct verlpp_event_s* verlpp_event;
typedef struct verlpp_comm_s* verlpp_comm;

/* Direction of a raw copy. */
typedef enum verlpp_copy_kind {
  VERLPP_COPY_HOST_TO_DEVICE = 0,
  VERLPP_COPY_DEVICE_TO_HOST = 1,
  VERLPP_COPY_DEVICE_TO_DEVICE = 2,
  VERLPP_COPY_HOST_TO_HOST = 3
} verlpp_copy_kind;

/* ---------------------------------------------------------------- communicator */

typedef enum verlpp_reduce_op { VERLPP_REDUCE_SUM = 0, VERLPP_REDUCE_MAX = 1, VERLPP_REDUCE_MIN = 2 } verlpp_reduce_op;

/* How to build a communicator. Every rank of the group calls comm_create with the same
 * world_size and key_prefix and its own rank; the plugin exchanges what it needs (addresses,
 * NCCL unique ids) through `store`, which stays valid until comm_destroy. */
typedef struct verlpp_comm_config {
  size_t struct_size;
  int32_t rank;
  int32_t world_size;
  int32_t device; /* the plugin's device index used by this rank */
  int32_t reserved0;
  int64_t timeout_ms;     /* any single operation longer than this fails with TIMEOUT */
  const char* key_prefix; /* distinguishes several communicators on one store */
  const verlpp_kv_store* store;
} verlpp_comm_config;

/* ---------------------------------------------------------------- kernels */

/* Optional fast kernels. Every entry may be NULL (the host then runs its LibTorch reference).
 * Shapes are given as [dims] with B = batch, N = rows (tokens), V = vocab, D = hidden size,
 * H = query heads, K = KV heads, S = head size. All tensors are borrowed, contiguous unless a
 * stride is stated, and on the plugin's device. */
/* AdamW's settings for the kernel table's adamw_update (added in 1.4): torch.optim.AdamW's
 * (decoupled weight decay, no amsgrad). step: the number of the update being made, from 1 (the
 * bias corrections are 1 - beta1^step and 1 - beta2^step). Minors may append fields. */
typedef struct verlpp_adamw_options {
  size_t struct_size;
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;
} verlpp_adamw_options;

typedef struct verlpp_kernel_table {
  size_t struct_size;
  /* Log-probability of `labels` under softmax(logits / temperature), and optionally the entropy
   * of that distribution, per row. logits [N, V] f32/bf16/f16 (rows may be strided);
   * labels [N] int64; out_logprob [N] f32; out_entropy [N] f32 or NULL. */
  verlpp_error* (*logprob_entropy)(const DLTensor* logits, const DLTensor* labels, float temperature,
                                   DLTensor* out_logprob, DLTensor* out_entropy, verlpp_stream stream);
  /* RMSNorm: out = x / sqrt(mean(x^2) + eps) * weight. x, out [N, D]; weight [D]; same dtype. */
  verlpp_error* (*rms_norm)(const DLTensor* x, const DLTensor* weight, float eps, DLTensor* out, verlpp_stream stream);
  /* Rotary embedding in place, HF "rotate_half" layout. q [N, H, S], k [N, K, S] (either may be
   * NULL; same dtype, f32/bf16/f16); positions [N] int64; inv_freq [S/2] f32 (any rope scaling
   * already applied). angle = (float)position * inv_freq[j] in fp32; pairs (j, j + S/2) rotate
   * by it; cos/sin and the result in q's dtype (docs/plugin-abi.md, "Kernel contracts"). */
  verlpp_error* (*rotary_embedding)(DLTensor* q, DLTensor* k, const DLTensor* positions, const DLTensor* inv_freq,
                                    verlpp_stream stream);
  /* Decode attention over a paged KV cache, one query token per sequence.
   * q [B, H, S]; k_cache, v_cache [num_blocks, block_size, K, S]; block_tables [B, max_blocks]
   * int32; context_lens [B] int32; out [B, H, S]. H must be a multiple of K (GQA). */
  verlpp_error* (*paged_attention_decode)(const DLTensor* q, const DLTensor* k_cache, const DLTensor* v_cache,
                                          const DLTensor* block_tables, const DLTensor* context_lens, float scale,
                                          DLTensor* out, verlpp_stream stream);
  /* Sample one token per row from softmax(logits / temperature) restricted by top_k (0 = all)
   * and top_p (1 = all); temperature 0 means greedy. logits [B, V] contiguous, f32 or (from
   * 1.3) bf16 / f16: 16-bit logits must give exactly what their fp32 conversion (exact) gives,
   * the same tokens and log-prob bits; the host passes them only when abi_minor >= 3, fp32
   * otherwise. temperature, top_p [B] f32; top_k [B] int32; seeds [B] uint64 (row r's draw
   * depends only on seeds[r] and step); out_tokens [B] int64; out_logprobs [B] f32 (log-prob
   * after temperature, before filtering). */
  verlpp_error* (*sample)(const DLTensor* logits, const DLTensor* temperature, const DLTensor* top_k,
                          const DLTensor* top_p, const DLTensor* seeds, uint64_t step, DLTensor* out_tokens,
                          DLTensor* out_logprobs, verlpp_stream stream);

  /* ---- added in 1.2 (the host calls it only when abi_minor >= 2 and it is non-NULL) */
  /* The backward of logprob_entropy: the gradient of a loss with respect to the logits, given
   * the loss's gradients with respect to each row's log-prob and entropy. With z = logits / T
   * and p = exp(z - lse), per row i and column j, in fp32, rounded once to the output dtype:
   *   out_grad[i, j] = (g_lp[i] * ([j == labels[i]] - p_ij) - g_ent[i] * p_ij * (z_ij - mean_z[i])) / T
   * logits [N, V] f32/bf16/f16 (rows may be strided, columns dense); labels [N] int64 in [0, V);
   * lse [N] f32 = logsumexp_j z_ij; grad_logprob [N] f32 (g_lp) or NULL (zero); mean_z [N] f32
   * = sum_j p_ij z_ij and grad_entropy [N] f32 (g_ent): both or neither (zero); out_grad [N, V]
   * in logits' dtype, columns dense, any row stride, and it may be logits itself (in place: the
   * training backward recomputes a chunk's logits and overwrites them with their gradient). */
  verlpp_error* (*logprob_backward)(const DLTensor* logits, const DLTensor* labels, const DLTensor* lse,
                                    const DLTensor* grad_logprob, const DLTensor* mean_z, const DLTensor* grad_entropy,
                                    float temperature, DLTensor* out_grad, verlpp_stream stream);
  /* SwiGLU's product as HF computes act_fn(gate) * up, rounding where it rounds: with s =
   * round(silu(gate)) (silu = x / (1 + exp(-x)) in fp32), out = round(s * up). gate, up, out
   * [N, F] f32/bf16/f16, one dtype, columns dense, any row stride (gate and up may be the two
   * halves of one [N, 2F] tensor). */
  verlpp_error* (*silu_mul)(const DLTensor* gate, const DLTensor* up, DLTensor* out, verlpp_stream stream);
  /* Its backward, as autograd through that product computes it: grad_up = round(grad_out * s);
   * grad_gate = round(round(grad_out * up) * sig * (1 + gate * (1 - sig))) with sig = 1 / (1 +
   * exp(-gate)), in fp32. Shapes and dtype as silu_mul's; grad_gate and grad_up may be the two
   * halves of one [N, 2F] tensor. */
  verlpp_error* (*silu_mul_backward)(const DLTensor* gate, const DLTensor* up, const DLTensor* grad_out,
                                     DLTensor* grad_gate, DLTensor* grad_up, verlpp_stream stream);

  /* ---- added in 1.3 (the host calls it only when abi_minor >= 3 and it is non-NULL) */
  /* A residual add and the next RMSNorm in one pass, rounding where the separate ops round:
   * residual = round(residual + x) in place, then out = rms_norm(residual, weight, eps) exactly
   * as the rms_norm entry computes it from the rounded sum. x, residual, out [N, D] one dtype
   * f32/bf16/f16, contiguous; weight [D] same dtype; out must not overlap x or residual. */
  verlpp_error* (*add_rms_norm)(const DLTensor* x, DLTensor* residual, const DLTensor* weight, float eps, DLTensor* out,
                                verlpp_stream stream);
  /* A decode step's attention prologue in one pass: q and k rotated as rotary_embedding rotates
   * them (same angle, roundings and positions rules), rotated q written to q_out, rotated k and
   * v stored into the paged cache: k_cache[slot / bs, slot % bs] = k', v_cache[...] = v for
   * slot = slot_mapping[i]. q [N, H, S], k, v [N, K, S] (read only; rows may be strided, heads
   * and S dense: they may be views of one fused projection); positions, slot_mapping [N] int64
   * (slots in [0, num_blocks * bs), distinct); inv_freq [S/2] f32; q_out [N, H, S] contiguous;
   * k_cache, v_cache [num_blocks, bs, K, S] contiguous; every float tensor one dtype. */
  verlpp_error* (*rotary_kv_store)(const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* positions,
                                   const DLTensor* inv_freq, const DLTensor* slot_mapping, DLTensor* q_out,
                                   DLTensor* k_cache, DLTensor* v_cache, verlpp_stream stream);

  /* ---- added in 1.4 (the host calls it only when abi_minor >= 4 and it is non-NULL) */
  /* One AdamW update of `count` tensors in one call (a multi-tensor kernel: a model's few hundred
   * parameters in a few launches, the trainer's mixed-precision casts folded in). Per element of
   * tensor t, in fp32, with the scalars computed in double and rounded to fp32:
   *   g = float(grads[t]) * s          (s = *grad_scale, or 1 when grad_scale is NULL)
   *   p = p - lr * weight_decay * p
   *   m = m + (1 - beta1) * (g - m);   v = beta2 * v + (1 - beta2) * g * g
   *   p = p - (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
   *   copies[t] = round(p)             (when copies is not NULL)
   * params[t], exp_avg[t], exp_avg_sq[t]: f32, contiguous, one shape, updated in place; grads[t]:
   * that shape, contiguous, f32/bf16/f16 (one dtype across the call); copies: NULL or `count`
   * contiguous tensors of that shape, f32/bf16/f16 (one dtype). No two written tensors share a
   * byte, nor a written tensor and a grad. grad_scale: NULL or f32 [1] on the tensors' device,
   * read there (so a host need not wait for a gradient norm): if it is not finite, nothing at all
   * is written (the step is skipped). Results may differ from an exact evaluation of the above by
   * fp32 rounding (fused multiply-adds allowed); docs/plugin-abi.md states the tolerance. */
  verlpp_error* (*adamw_update)(int32_t count, DLTensor* const* params, const DLTensor* const* grads,
                                DLTensor* const* exp_avg, DLTensor* const* exp_avg_sq, DLTensor* const* copies,
                                const verlpp_adamw_options* options, const DLTensor* grad_scale, verlpp_stream stream);

  /* ---- added in 1.5 (the host calls it only when abi_minor >= 5 and it is non-NULL) */
  /* A decode step's attention in one pass: exactly rotary_kv_store followed by
   * paged_attention_decode over the rotated q (same roundings, the same output bits), without q's
   * rotated copy. q [B, H, S], k, v [B, K, S] (one new token per sequence; rows may be strided,
   * heads and S dense), positions, slot_mapping [B] int64, inv_freq [S/2] f32, k_cache, v_cache
   * [num_blocks, bs, K, S] (the rotated k and v are stored at slot_mapping), block_tables
   * [B, max_blocks] int32, context_lens [B] int32, out [B, H, S] contiguous. The new token is its
   * sequence's last position: slot_mapping[b] must be the cache row of position context_lens[b] - 1
   * under block_tables[b] (docs/plugin-abi.md). */
  verlpp_error* (*rotary_paged_attention_decode)(const DLTensor* q, const DLTensor* k, const DLTensor* v,
                                                 const DLTensor* positions, const DLTensor* inv_freq,
                                                 const DLTensor* slot_mapping, DLTensor* k_cache, DLTensor* v_cache,
                                                 const DLTensor* block_tables, const DLTensor* context_lens,
                                                 float scale, DLTensor* out, verlpp_stream stream);
} verlpp_kernel_table;

/* The kernel table's entries, in table order, each with the minor that appended it: X(name, minor).
 * The one list of kernels: the host's minor gating and availability, the SDK's table filling, the
 * conformance suite's registration and `verlpp plugins` all expand it (the SDK checks at compile
 * time that it names every field of verlpp_kernel_table in order). A new kernel is a field
 * appended above and an entry appended here. */
#define VERLPP_KERNEL_LIST(X)  \
  X(logprob_entropy, 0)        \
  X(rms_norm, 0)               \
  X(rotary_embedding, 0)       \
  X(paged_attention_decode, 0) \
  X(sample, 0)                 \
  X(logprob_backward, 2)       \
  X(silu_mul, 2)               \
  X(silu_mul_backward, 2)      \
  X(add_rms_norm, 3)           \
  X(rotary_kv_store, 3)        \
  X(adamw_update, 4)           \
  X(rotary_paged_attention_decode, 5)

/* ---------------------------------------------------------------- overrides (reserved) */

/* Rollout-engine and trainer overrides. Their tables are defined by a later minor; in 1.0 a
 * plugin sets the pointers to NULL and the host runs its built-in engine and trainer. */
typedef struct verlpp_rollout_override verlpp_rollout_override;
typedef struct verlpp_trainer_override verlpp_trainer_override;

/* ---------------------------------------------------------------- the function table */

typedef struct verlpp_plugin_api {
  size_t struct_size;
  uint32_t abi_major;            /* VERLPP_PLUGIN_ABI_MAJOR the plugin was built for */
  uint32_t abi_minor;            /* VERLPP_PLUGIN_ABI_MINOR the plugin was built for */
  const char* name;              /* short name, e.g. "cpu_ref"; [a-z0-9_]+ */
  const char* variant;           /* build variant, e.g. "sm90"; "" when none */
  const char* version;           /* the plugin's own version string */
  const char* torch_device_type; /* "cpu", "cuda" or "privateuseone" */

  /* lifecycle: init is called once after loading, shutdown never before process end */
  verlpp_error* (*init)(const verlpp_host_api* host);
  void (*shutdown)(void);
  void (*error_free)(verlpp_error* error);

  /* devices */
  verlpp_error* (*device_count)(int32_t* out_count);
  verlpp_error* (*device_get_properties)(int32_t device, verlpp_device_properties* out);
  verlpp_error* (*device_memory_info)(int32_t device, uint64_t* out_free, uint64_t* out_total);
  verlpp_error* (*device_health_check)(int32_t device);
  verlpp_error* (*device_synchronize)(int32_t device);

  /* memory; alignment 0 means the plugin's default (at least 64 bytes); a zero-byte request
   * returns a unique non-NULL pointer that may be freed */
  verlpp_error* (*mem_alloc)(int32_t device, size_t bytes, size_t alignment, void** out_ptr);
  verlpp_error* (*mem_free)(int32_t device, void* ptr);
  verlpp_error* (*host_alloc_pinned)(size_t bytes, void** out_ptr);
  verlpp_error* (*host_free_pinned)(void* ptr);
  verlpp_error* (*memcpy_async)(void* dst, const void* src, size_t bytes, int32_t kind, verlpp_stream stream);
  verlpp_error* (*memset_async)(void* dst, int32_t byte_value, size_t bytes, verlpp_stream stream);

  /* streams and events; all on one device */
  verlpp_error* (*stream_create)(int32_t device, verlpp_stream* out_stream);
  verlpp_error* (*stream_destroy)(verlpp_stream stream);
  verlpp_error* (*stream_synchronize)(verlpp_stream stream);
  verlpp_error* (*stream_wait_event)(verlpp_stream stream, verlpp_event event);
  verlpp_error* (*event_create)(int32_t device, verlpp_event* out_event);
  verlpp_error* (*event_destroy)(verlpp_event event);
  verlpp_error* (*event_record)(verlpp_event event, verlpp_stream stream);
  verlpp_error* (*event_synchronize)(verlpp_event event);
  verlpp_error* (*event_query)(verlpp_event event, int32_t* out_is_complete);
  verlpp_error* (*event_elapsed_ms)(verlpp_event start, verlpp_event end, float* out_ms);

  /* data movement: copy between two tensors of equal shape and dtype, host<->device or
   * device<->device (strides honoured); the host uses it for batches */
  verlpp_error* (*tensor_copy)(const DLTensor* src, DLTensor* dst, verlpp_stream stream);

  /* communicator; send and recv buffers may alias only where stated */
  verlpp_error* (*comm_create)(const verlpp_comm_config* config, verlpp_comm* out_comm);
  verlpp_error* (*comm_destroy)(verlpp_comm comm);
  /* recv = op over ranks of send; send and recv same shape/dtype; may alias (in place) */
  verlpp_error* (*comm_all_reduce)(verlpp_comm comm, const DLTensor* send, DLTensor* recv, int32_t op,
                                   verlpp_stream stream);
  /* recv [world * n] = concat over ranks (rank order) of send [n] (flattened) */
  verlpp_error* (*comm_all_gather)(verlpp_comm comm, const DLTensor* send, DLTensor* recv, verlpp_stream stream);
  /* recv [n] = op over ranks of chunk `rank` of send [world * n] (flattened) */
  verlpp_error* (*comm_reduce_scatter)(verlpp_comm comm, const DLTensor* send, DLTensor* recv, int32_t op,
                                       verlpp_stream stream);
  /* buffer on every rank = buffer on root */
  verlpp_error* (*comm_broadcast)(verlpp_comm comm, DLTensor* buffer, int32_t root, verlpp_stream stream);
  verlpp_error* (*comm_send)(verlpp_comm comm, const DLTensor* buffer, int32_t peer, verlpp_stream stream);
  verlpp_error* (*comm_recv)(verlpp_comm comm, DLTensor* buffer, int32_t peer, verlpp_stream stream);
  verlpp_error* (*comm_barrier)(verlpp_comm comm, verlpp_stream stream);

  /* kernels (NULL or a table whose entries may each be NULL) */
  const verlpp_kernel_table* kernels;

  /* overrides: NULL in 1.0 */
  const verlpp_rollout_override* rollout_override;
  const verlpp_trainer_override* trainer_override;

  /* ---- added in 1.1: native stream interop (optional, both or neither; needs the stream group).
   * The host calls them only when abi_minor >= 1 and the pointer is non-NULL. */
  /* Wraps a native stream the caller owns (cudaStream_t, hipStream_t, ...) of `device` as a
   * verlpp_stream. Work on the wrapper is queued on that native stream and is asynchronous to the
   * host like work on any non-NULL stream (only the NULL stream is synchronous). The wrapper
   * refers to the native stream by its handle alone (no state tied to that stream's lifetime);
   * stream_destroy on it forgets the wrapper and never destroys the native stream, which the
   * caller keeps alive while it queues work through the wrapper. native_handle NULL is accepted
   * where the native API gives NULL a meaning (CUDA, HIP: the legacy default stream of `device`,
   * then without the NULL verlpp_stream's implicit wait); otherwise INVALID_ARGUMENT. Each call
   * returns a new wrapper. */
  verlpp_error* (*stream_from_native)(int32_t device, void* native_handle, verlpp_stream* out_stream);
  /* The native handle behind `stream` (one from stream_create or stream_from_native; NULL is
   * INVALID_ARGUMENT), for interop with other libraries on the same stream. */
  verlpp_error* (*stream_native_handle)(verlpp_stream stream, void** out_native_handle);

  /* ---- added in 1.6: the LibTorch backend of an out-of-tree device (optional). The host reads
   * it only when abi_minor >= 6 and torch_device_type is "privateuseone". It names the vendor's
   * LibTorch extension: a shared library, built against the same LibTorch as the host, whose
   * static initialisers register the PrivateUse1 backend (device guard, allocator, operator
   * kernels). An absolute path, or a file name resolved in the plugin file's own folder. Before
   * placing any tensor on the plugin's devices the host loads it (RTLD_GLOBAL) unless a
   * PrivateUse1 backend is registered already, then checks that LibTorch can create a tensor on
   * the device and copy it back; when any step fails the run is refused with the reason. NULL or
   * "" = none: the program itself must load the extension. */
  const char* torch_backend_library;
} verlpp_plugin_api;

/* The smallest table a host accepts: everything up to and including `version`. Fields past it
 * that an older (smaller) table lacks read as NULL. */
#define VERLPP_PLUGIN_API_MIN_SIZE (offsetof(verlpp_plugin_api, version) + sizeof(((verlpp_plugin_api*)0)->version))

/* ---------------------------------------------------------------- exported entry points */

/* Cheap check that the plugin can run here: no device context, no lasting side effects.
 * Returns a score (higher = better fit, 0 = unusable on this machine). When it returns 0 it
 * writes the reason (NUL-terminated, truncated to reason_capacity) to `reason`, if not NULL. */
typedef int32_t (*verlpp_plugin_probe_fn)(char* reason, size_t reason_capacity);

/* Returns the plugin's function table for a host built against minor `host_minor`, or NULL if
 * the plugin cannot serve that host. The table stays valid for the life of the process. */
typedef const verlpp_plugin_api* (*verlpp_plugin_get_api_fn)(uint32_t host_minor);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* VERLPP_PLUGIN_ABI_H_ */
