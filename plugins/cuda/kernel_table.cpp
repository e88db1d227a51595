// cuda: ABI entry points of the kernel table, one per entry of the ABI's kernel list (the
// kernels the conformance suite checks). Each checks its DLPack arguments with the SDK's
// check_<kernel>_args (the rules every plugin applies, so cpu_ref and this plugin refuse the same
// input alike), then this plugin's own limits and that the tensors live in its device memory,
// then hands a launcher from a .cu file to launch_on(), the one place that picks the stream,
// makes the device current and, on the NULL stream, waits for the kernel as the ABI's
// synchronous default stream requires.
#include "kernel_table.hpp"
#include "cuda_check.hpp"
#include "kernels.hpp"
#include "stream_registry.hpp"

#include <verlpp/sdk/adamw_args.hpp>
#include <verlpp/sdk/attention_args.hpp>
#include <verlpp/sdk/dlpack_util.hpp>
#include <verlpp/sdk/kernel_args.hpp>
#include <verlpp/sdk/sample_args.hpp>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace verlpp::cuda {
namespace {

using sdk::require;

FloatType float_type(DLDataType d, const char* what) {
  if (d.lanes == 1 && d.code == kDLFloat && d.bits == 32) return FloatType::f32;
  if (d.lanes == 1 && d.code == kDLFloat && d.bits == 16) return FloatType::f16;
  if (d.lanes == 1 && d.code == kDLBfloat && d.bits == 16) return FloatType::bf16;
  sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT,
            std::string(what) + " dtype " + sdk::dtype_name(d) + " is not f32/bf16/f16");
}

// The tensor must be in this plugin's device memory on `device`.
void require_on_device(const DLTensor& t, int32_t device, const char* what) {
  require(t.device.device_type == VERLPP_GPU_DL_DEVICE,
          std::string(what) + " is not " VERLPP_GPU_PLATFORM " device memory (DLPack device type " +
              std::to_string(int(t.device.device_type)) + ")");
  require(t.device.device_id == device, std::string(what) + " is on device " + std::to_string(t.device.device_id) +
                                            ", the other tensors on device " + std::to_string(device));
}

// The device of the first operand, after checking that every given operand (NULL: an optional
// one left out) lives there.
int32_t common_device(std::initializer_list<std::pair<const DLTensor*, const char*>> operands) {
  const int32_t device = operands.begin()->first->device.device_id;
  for (const auto& [t, what] : operands)
    if (t != nullptr) require_on_device(*t, device, what);
  return device;
}

// Runs `launch(gpuStream_t)` (a launcher returning the runtime's error) for `kernel` over tensors
// on `device`: the stream must be on that device, the device is current for the launch, and on
// the NULL stream the call waits for the kernel. `describe()` gives the launch's shape for an
// error message, and is called only then.
template <class Launch, class Describe>
void launch_on(verlpp_stream stream, int32_t device, const char* kernel, Launch&& launch, Describe&& describe) {
  const StreamTarget target = resolve_stream(stream, device);
  require(target.device == device,
          "stream is on device " + std::to_string(target.device) + ", the tensors on device " + std::to_string(device));
  DeviceGuard device_guard(device);
  const gpuError_t error = launch(target.stream);
  if (error != gpuSuccess) cuda_check(error, std::string("launching ") + kernel + " (" + describe() + ")");
  finish_if_default(target, kernel);
}

std::string dims(std::initializer_list<std::pair<const char*, int64_t>> named) {
  std::string out;
  for (const auto& [name, value] : named)
    out += (out.empty() ? "" : ", ") + std::string(name) + "=" + std::to_string(value);
  return out;
}

[[noreturn]] void unsupported(const std::string& what) {
  sdk::fail(VERLPP_STATUS_UNSUPPORTED, what + " is not supported by the " VERLPP_GPU_PLUGIN_NAME " kernel");
}

const float* f32_or_null(const DLTensor* t) {
  return t != nullptr ? static_cast<const float*>(sdk::data_ptr(*t)) : nullptr;
}

// The launcher's view of rotary_kv_store's operands (also those of 1.5's fused attention, with
// q_out NULL there).
RotaryKvStoreOperands store_operands(const sdk::RotaryKvStoreArgs& a, const DLTensor* q_p, const DLTensor* k_p,
                                     const DLTensor* v_p, const DLTensor* pos_p, const DLTensor* inv_freq_p,
                                     const DLTensor* slots_p, DLTensor* q_out_p, DLTensor* k_cache_p,
                                     DLTensor* v_cache_p) {
  RotaryKvStoreOperands o;
  o.q = sdk::data_ptr(*q_p);
  o.k = sdk::data_ptr(*k_p);
  o.v = sdk::data_ptr(*v_p);
  o.q_row_stride = a.q_row_stride;
  o.k_row_stride = a.k_row_stride;
  o.v_row_stride = a.v_row_stride;
  o.positions = static_cast<const int64_t*>(sdk::data_ptr(*pos_p));
  o.inv_freq = static_cast<const float*>(sdk::data_ptr(*inv_freq_p));
  o.slot_mapping = static_cast<const int64_t*>(sdk::data_ptr(*slots_p));
  o.q_out = q_out_p != nullptr ? sdk::data_ptr(*q_out_p) : nullptr;
  o.k_cache = sdk::data_ptr(*k_cache_p);
  o.v_cache = sdk::data_ptr(*v_cache_p);
  o.tokens = a.rope.tokens;
  o.q_heads = a.q_heads;
  o.kv_heads = a.kv_heads;
  o.half = a.rope.half;
  o.slots = a.slots();
  return o;
}

// The limits of the RoPE + store kernels beyond the ABI's rules: UNSUPPORTED or INVALID_ARGUMENT.
void require_store_limits(const sdk::RotaryKvStoreArgs& a) {
  if (a.rope.half > kMaxRotaryHalf)
    unsupported("head size " + std::to_string(a.head_size) + " > " + std::to_string(2 * kMaxRotaryHalf));
  require(a.rope.tokens <= 0x7fffffff, "N = " + std::to_string(a.rope.tokens) + " tokens > 2^31 - 1 in one call");
  if ((a.q_heads + 2 * a.kv_heads) * a.head_size > 0x7fffffff) unsupported("more than 2^31 - 1 values per token");
}

// The limits of the attention kernels: head size, batch, 32-bit cache row and position indices.
void require_attention_limits(int64_t b, int64_t s, int64_t cache_rows, int64_t table_rows) {
  if (s > 256) unsupported("head size " + std::to_string(s) + " > 256");
  require(b <= 65535, "batch " + std::to_string(b) + " > 65535 sequences in one call");
  if (cache_rows > INT32_MAX || table_rows > INT32_MAX)
    unsupported("a KV cache or block table of more than 2^31 - 1 positions");
}

}  // namespace

verlpp_error* CudaKernels::logprob_entropy(const DLTensor* logits_p, const DLTensor* labels_p, float temperature,
                                           DLTensor* out_logprob_p, DLTensor* out_entropy_p, verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " logprob_entropy", [&] {
    const sdk::LogprobEntropyArgs a =
        sdk::check_logprob_entropy_args(logits_p, labels_p, temperature, out_logprob_p, out_entropy_p);
    const FloatType type = float_type(logits_p->dtype, "logits");
    const int32_t device = common_device(
        {{logits_p, "logits"}, {labels_p, "labels"}, {out_logprob_p, "out_logprob"}, {out_entropy_p, "out_entropy"}});
    float* ent = out_entropy_p ? static_cast<float*>(sdk::data_ptr(*out_entropy_p)) : nullptr;
    launch_on(
        stream, device, "logprob_entropy",
        [&](gpuStream_t s) {
          return launch_logprob_entropy(sdk::data_ptr(*logits_p), type, a.n, a.v, a.row_stride,
                                        static_cast<const int64_t*>(sdk::data_ptr(*labels_p)), temperature,
                                        static_cast<float*>(sdk::data_ptr(*out_logprob_p)), ent, s);
        },
        [&] {
          return dims({{"N", a.n}, {"V", a.v}});
        });
  });
}

verlpp_error* CudaKernels::logprob_backward(const DLTensor* logits_p, const DLTensor* labels_p, const DLTensor* lse_p,
                                            const DLTensor* grad_logprob_p, const DLTensor* mean_z_p,
                                            const DLTensor* grad_entropy_p, float temperature, DLTensor* out_p,
                                            verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " logprob_backward", [&] {
    const sdk::LogprobBackwardArgs a = sdk::check_logprob_backward_args(logits_p, labels_p, lse_p, grad_logprob_p,
                                                                        mean_z_p, grad_entropy_p, temperature, out_p);
    const FloatType type = float_type(logits_p->dtype, "logits");
    const int32_t device = common_device({{logits_p, "logits"},
                                          {labels_p, "labels"},
                                          {lse_p, "lse"},
                                          {out_p, "out_grad"},
                                          {grad_logprob_p, "grad_logprob"},
                                          {mean_z_p, "mean_z"},
                                          {grad_entropy_p, "grad_entropy"}});
    launch_on(
        stream, device, "logprob_backward",
        [&](gpuStream_t s) {
          return launch_logprob_backward(sdk::data_ptr(*logits_p), type, a.n, a.v, a.row_stride,
                                         static_cast<const int64_t*>(sdk::data_ptr(*labels_p)), f32_or_null(lse_p),
                                         f32_or_null(grad_logprob_p), f32_or_null(mean_z_p),
                                         f32_or_null(grad_entropy_p), temperature, sdk::data_ptr(*out_p),
                                         a.out_row_stride, s);
        },
        [&] {
          return dims({{"N", a.n}, {"V", a.v}});
        });
  });
}

verlpp_error* CudaKernels::silu_mul(const DLTensor* gate_p, const DLTensor* up_p, DLTensor* out_p,
                                    verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " silu_mul", [&] {
    const sdk::SiluMulArgs a = sdk::check_silu_mul_args({{gate_p, "gate"}, {up_p, "up"}, {out_p, "out"}});
    const FloatType type = float_type(gate_p->dtype, "gate");
    const int32_t device = common_device({{gate_p, "gate"}, {up_p, "up"}, {out_p, "out"}});
    launch_on(
        stream, device, "silu_mul",
        [&](gpuStream_t s) {
          return launch_silu_mul(sdk::data_ptr(*gate_p), a.row_strides[0], sdk::data_ptr(*up_p), a.row_strides[1],
                                 sdk::data_ptr(*out_p), a.row_strides[2], type, a.n, a.f, s);
        },
        [&] {
          return dims({{"N", a.n}, {"F", a.f}});
        });
  });
}

verlpp_error* CudaKernels::silu_mul_backward(const DLTensor* gate_p, const DLTensor* up_p, const DLTensor* grad_p,
                                             DLTensor* grad_gate_p, DLTensor* grad_up_p, verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " silu_mul_backward", [&] {
    const sdk::SiluMulArgs a = sdk::check_silu_mul_args(
        {{gate_p, "gate"}, {up_p, "up"}, {grad_p, "grad_out"}, {grad_gate_p, "grad_gate"}, {grad_up_p, "grad_up"}});
    const FloatType type = float_type(gate_p->dtype, "gate");
    const int32_t device = common_device(
        {{gate_p, "gate"}, {up_p, "up"}, {grad_p, "grad_out"}, {grad_gate_p, "grad_gate"}, {grad_up_p, "grad_up"}});
    launch_on(
        stream, device, "silu_mul_backward",
        [&](gpuStream_t s) {
          return launch_silu_mul_backward(sdk::data_ptr(*gate_p), a.row_strides[0], sdk::data_ptr(*up_p),
                                          a.row_strides[1], sdk::data_ptr(*grad_p), a.row_strides[2],
                                          sdk::data_ptr(*grad_gate_p), a.row_strides[3], sdk::data_ptr(*grad_up_p),
                                          a.row_strides[4], type, a.n, a.f, s);
        },
        [&] {
          return dims({{"N", a.n}, {"F", a.f}});
        });
  });
}

verlpp_error* CudaKernels::rms_norm(const DLTensor* x_p, const DLTensor* w_p, float eps, DLTensor* out_p,
                                    verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " rms_norm", [&] {
    const sdk::RmsNormArgs a = sdk::check_rms_norm_args(x_p, w_p, eps, out_p);
    const FloatType type = float_type(x_p->dtype, "x");
    const int32_t device = common_device({{x_p, "x"}, {w_p, "weight"}, {out_p, "out"}});
    launch_on(
        stream, device, "rms_norm",
        [&](gpuStream_t s) {
          return launch_rms_norm(sdk::data_ptr(*x_p), sdk::data_ptr(*w_p), type, a.n, a.d, eps, sdk::data_ptr(*out_p),
                                 s);
        },
        [&] {
          return dims({{"N", a.n}, {"D", a.d}});
        });
  });
}

verlpp_error* CudaKernels::rotary_embedding(DLTensor* q_p, DLTensor* k_p, const DLTensor* pos_p,
                                            const DLTensor* inv_freq_p, verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " rotary_embedding", [&] {
    const sdk::RotaryArgs args = sdk::check_rotary_args(q_p, k_p, pos_p, inv_freq_p);
    const int64_t n = args.tokens, half = args.half;
    const int32_t device =
        common_device({{args.positions, "positions"}, {args.inv_freq, "inv_freq"}, {q_p, "q"}, {k_p, "k"}});
    const FloatType type = args.targets.empty()
                               ? FloatType::f32
                               : float_type(args.targets.front()->dtype, args.targets.front() == q_p ? "q" : "k");
    if (half > 4096) unsupported("head size " + std::to_string(2 * half) + " > 8192");
    require(n <= 0x7fffffff, "N = " + std::to_string(n) + " tokens > 2^31 - 1 in one call");
    launch_on(
        stream, device, "rotary_embedding",
        [&](gpuStream_t s) {
          return launch_rotary_embedding(q_p ? sdk::data_ptr(*q_p) : nullptr, q_p ? q_p->shape[1] : 0,
                                         k_p ? sdk::data_ptr(*k_p) : nullptr, k_p ? k_p->shape[1] : 0, type, n, half,
                                         static_cast<const int64_t*>(sdk::data_ptr(*args.positions)),
                                         static_cast<const float*>(sdk::data_ptr(*args.inv_freq)), s);
        },
        [&] {
          return dims({{"N", n}, {"S", 2 * half}});
        });
  });
}

// ABI 1.3: the residual add and the next RMSNorm in one launch (decode_fusion_kernels.cu).
verlpp_error* CudaKernels::add_rms_norm(const DLTensor* x_p, DLTensor* residual_p, const DLTensor* w_p, float eps,
                                        DLTensor* out_p, verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " add_rms_norm", [&] {
    const sdk::AddRmsNormArgs a = sdk::check_add_rms_norm_args(x_p, residual_p, w_p, eps, out_p);
    const FloatType type = float_type(x_p->dtype, "x");
    const int32_t device = common_device({{x_p, "x"}, {residual_p, "residual"}, {w_p, "weight"}, {out_p, "out"}});
    require(a.n <= 0x7fffffff, "N = " + std::to_string(a.n) + " rows > 2^31 - 1 in one call");
    launch_on(
        stream, device, "add_rms_norm",
        [&](gpuStream_t s) {
          return launch_add_rms_norm(sdk::data_ptr(*x_p), sdk::data_ptr(*residual_p), sdk::data_ptr(*w_p), type, a.n,
                                     a.d, eps, sdk::data_ptr(*out_p), s);
        },
        [&] {
          return dims({{"N", a.n}, {"D", a.d}});
        });
  });
}

// ABI 1.3: RoPE on q and k plus the paged-cache stores of k and v in one launch. Slot values
// live on the device and are not checked here: an out-of-range one skips its token's stores
// (kernels.hpp), which keeps the call free of a sync.
verlpp_error* CudaKernels::rotary_kv_store(const DLTensor* q_p, const DLTensor* k_p, const DLTensor* v_p,
                                           const DLTensor* pos_p, const DLTensor* inv_freq_p, const DLTensor* slots_p,
                                           DLTensor* q_out_p, DLTensor* k_cache_p, DLTensor* v_cache_p,
                                           verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " rotary_kv_store", [&] {
    const sdk::RotaryKvStoreArgs a =
        sdk::check_rotary_kv_store_args(q_p, k_p, v_p, pos_p, inv_freq_p, slots_p, q_out_p, k_cache_p, v_cache_p);
    const FloatType type = float_type(q_p->dtype, "q");
    const int32_t device = common_device({{q_p, "q"},
                                          {k_p, "k"},
                                          {v_p, "v"},
                                          {pos_p, "positions"},
                                          {inv_freq_p, "inv_freq"},
                                          {slots_p, "slot_mapping"},
                                          {q_out_p, "q_out"},
                                          {k_cache_p, "k_cache"},
                                          {v_cache_p, "v_cache"}});
    require_store_limits(a);
    const RotaryKvStoreOperands o =
        store_operands(a, q_p, k_p, v_p, pos_p, inv_freq_p, slots_p, q_out_p, k_cache_p, v_cache_p);
    launch_on(
        stream, device, "rotary_kv_store", [&](gpuStream_t s) { return launch_rotary_kv_store(o, type, s); },
        [&] {
          return dims({{"N", a.rope.tokens}, {"H", a.q_heads}, {"K", a.kv_heads}, {"S", a.head_size}});
        });
  });
}

// ABI 1.5: a decode step's RoPE, cache stores and attention in one launch where the tensor-core
// kernel takes the call (kernels.hpp). Lengths, tables and slots live on the device and are not
// checked here (the attention clamps lengths to the table; a slot outside the cache is stored
// nowhere), which keeps the call free of a sync.
verlpp_error* CudaKernels::rotary_paged_attention_decode(const DLTensor* q_p, const DLTensor* k_p, const DLTensor* v_p,
                                                         const DLTensor* pos_p, const DLTensor* inv_freq_p,
                                                         const DLTensor* slots_p, DLTensor* k_cache_p,
                                                         DLTensor* v_cache_p, const DLTensor* bt_p,
                                                         const DLTensor* lens_p, float scale, DLTensor* out_p,
                                                         verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " rotary_paged_attention_decode", [&] {
    const sdk::RotaryAttentionArgs a = sdk::check_rotary_paged_attention_args(
        q_p, k_p, v_p, pos_p, inv_freq_p, slots_p, k_cache_p, v_cache_p, bt_p, lens_p, out_p);
    const FloatType type = float_type(q_p->dtype, "q");
    const int32_t device = common_device({{q_p, "q"},
                                          {k_p, "k"},
                                          {v_p, "v"},
                                          {pos_p, "positions"},
                                          {inv_freq_p, "inv_freq"},
                                          {slots_p, "slot_mapping"},
                                          {k_cache_p, "k_cache"},
                                          {v_cache_p, "v_cache"},
                                          {bt_p, "block_tables"},
                                          {lens_p, "context_lens"},
                                          {out_p, "out"}});
    require_store_limits(a.store);
    const int64_t b = a.store.rope.tokens, s = a.store.head_size, block_size = a.store.block_size;
    require_attention_limits(b, s, a.store.slots(), a.max_blocks * block_size);
    const RotaryKvStoreOperands o =
        store_operands(a.store, q_p, k_p, v_p, pos_p, inv_freq_p, slots_p, nullptr, k_cache_p, v_cache_p);
    launch_on(
        stream, device, "rotary_paged_attention_decode",
        [&](gpuStream_t st) {
          return launch_rotary_paged_attention_decode(o, type, static_cast<const int32_t*>(sdk::data_ptr(*bt_p)),
                                                      static_cast<const int32_t*>(sdk::data_ptr(*lens_p)), block_size,
                                                      a.max_blocks, scale, sdk::data_ptr(*out_p), st);
        },
        [&] {
          return dims({{"B", b}, {"H", a.store.q_heads}, {"K", a.store.kv_heads}, {"S", s}});
        });
  });
}

verlpp_error* CudaKernels::paged_attention_decode(const DLTensor* q_p, const DLTensor* k_p, const DLTensor* v_p,
                                                  const DLTensor* bt_p, const DLTensor* lens_p, float scale,
                                                  DLTensor* out_p, verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " paged_attention_decode", [&] {
    const sdk::PagedAttentionArgs a = sdk::check_paged_attention_decode_args(q_p, k_p, v_p, bt_p, lens_p, out_p);
    const FloatType type = float_type(q_p->dtype, "q");
    require_attention_limits(a.batch, a.head_size, a.num_blocks * a.block_size, a.max_blocks * a.block_size);
    const int32_t device = common_device({{q_p, "q"},
                                          {k_p, "k_cache"},
                                          {v_p, "v_cache"},
                                          {bt_p, "block_tables"},
                                          {lens_p, "context_lens"},
                                          {out_p, "out"}});
    launch_on(
        stream, device, "paged_attention_decode",
        [&](gpuStream_t s) {
          return launch_paged_attention_decode(
              sdk::data_ptr(*q_p), sdk::data_ptr(*k_p), sdk::data_ptr(*v_p), type,
              static_cast<const int32_t*>(sdk::data_ptr(*bt_p)), static_cast<const int32_t*>(sdk::data_ptr(*lens_p)),
              a.batch, a.q_heads, a.kv_heads, a.head_size, a.block_size, a.max_blocks, scale, sdk::data_ptr(*out_p), s);
        },
        [&] {
          return dims({{"B", a.batch}, {"H", a.q_heads}, {"S", a.head_size}});
        });
  });
}

// The per-row values (temperature, top_k, top_p) live on the device and are not checked here:
// out-of-range values act as the kernel says (kernels.hpp).
verlpp_error* CudaKernels::sample(const DLTensor* logits_p, const DLTensor* temperature_p, const DLTensor* top_k_p,
                                  const DLTensor* top_p_p, const DLTensor* seeds_p, uint64_t step,
                                  DLTensor* out_tokens_p, DLTensor* out_logprobs_p, verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " sample", [&] {
    const sdk::SampleArgs a =
        sdk::check_sample_args(logits_p, temperature_p, top_k_p, top_p_p, seeds_p, out_tokens_p, out_logprobs_p);
    // f32, or from ABI 1.3 bf16 / f16 (read as their exact fp32 values).
    const FloatType type = float_type(logits_p->dtype, "logits");
    const int32_t device = common_device({{logits_p, "logits"},
                                          {temperature_p, "temperature"},
                                          {top_k_p, "top_k"},
                                          {top_p_p, "top_p"},
                                          {seeds_p, "seeds"},
                                          {out_tokens_p, "out_tokens"},
                                          {out_logprobs_p, "out_logprobs"}});
    launch_on(
        stream, device, "sample",
        [&](gpuStream_t s) {
          return launch_sample(sdk::data_ptr(*logits_p), type, a.batch, a.vocab,
                               static_cast<const float*>(sdk::data_ptr(*temperature_p)),
                               static_cast<const int32_t*>(sdk::data_ptr(*top_k_p)),
                               static_cast<const float*>(sdk::data_ptr(*top_p_p)),
                               static_cast<const uint64_t*>(sdk::data_ptr(*seeds_p)), step,
                               static_cast<int64_t*>(sdk::data_ptr(*out_tokens_p)),
                               static_cast<float*>(sdk::data_ptr(*out_logprobs_p)), s);
        },
        [&] {
          return dims({{"B", a.batch}, {"V", a.vocab}});
        });
  });
}

verlpp_error* CudaKernels::adamw_update(int32_t count, DLTensor* const* params, const DLTensor* const* grads,
                                        DLTensor* const* exp_avg, DLTensor* const* exp_avg_sq, DLTensor* const* copies,
                                        const verlpp_adamw_options* options, const DLTensor* grad_scale,
                                        verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " adamw_update", [&] {
    const sdk::AdamwArgs a =
        sdk::check_adamw_update_args(count, params, grads, exp_avg, exp_avg_sq, copies, options, grad_scale);
    if (count == 0) return;
    const int32_t device = params[0]->device.device_id;
    std::vector<AdamwTensors> tensors(static_cast<size_t>(count));
    for (int32_t t = 0; t < count; ++t) {
      const std::string index = "[" + std::to_string(t) + "]";
      require_on_device(*params[t], device, ("params" + index).c_str());
      require_on_device(*grads[t], device, ("grads" + index).c_str());
      require_on_device(*exp_avg[t], device, ("exp_avg" + index).c_str());
      require_on_device(*exp_avg_sq[t], device, ("exp_avg_sq" + index).c_str());
      if (copies != nullptr) require_on_device(*copies[t], device, ("copies" + index).c_str());
      AdamwTensors& x = tensors[size_t(t)];
      x.param = static_cast<float*>(sdk::data_ptr(*params[t]));
      x.grad = sdk::data_ptr(*grads[t]);
      x.exp_avg = static_cast<float*>(sdk::data_ptr(*exp_avg[t]));
      x.exp_avg_sq = static_cast<float*>(sdk::data_ptr(*exp_avg_sq[t]));
      x.copy = copies != nullptr ? sdk::data_ptr(*copies[t]) : nullptr;
      x.numel = a.numels[size_t(t)];
    }
    if (grad_scale != nullptr) require_on_device(*grad_scale, device, "grad_scale");
    const AdamwScalars scalars{a.weight_decay_factor, a.one_minus_beta1,       a.beta2, a.one_minus_beta2,
                               a.step_size,           a.bias_correction2_sqrt, a.eps};
    launch_on(
        stream, device, "adamw_update",
        [&](gpuStream_t s) {
          return launch_adamw_update(
              tensors.data(), count, float_type(a.grad_dtype, "grads"), a.has_copies,
              a.has_copies ? float_type(a.copy_dtype, "copies") : FloatType::f32, scalars,
              grad_scale != nullptr ? static_cast<const float*>(sdk::data_ptr(*grad_scale)) : nullptr, s);
        },
        [&] { return std::to_string(count) + " tensors"; });
  });
}

const verlpp_kernel_table* cuda_kernels() { return sdk::kernel_table<CudaKernels>(); }

}  // namespace verlpp::cuda
