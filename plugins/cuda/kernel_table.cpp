// cuda: ABI entry points of the kernel table (logprob_entropy, rms_norm, rotary_embedding,
// paged_attention_decode, sample, 1.2's logprob_backward, silu_mul, silu_mul_backward, 1.3's
// add_rms_norm, rotary_kv_store, 1.4's adamw_update and 1.5's rotary_paged_attention_decode: the
// kernels the conformance suite checks). Each checks its DLPack arguments with the same rules as
// cpu_ref's reference kernels (through the SDK's kernel_args.hpp where it has them, so both
// plugins refuse the same input), checks that the tensors live in this plugin's device memory,
// then calls a launcher from a .cu file. On the NULL stream the call waits for the kernel, as the
// ABI's synchronous default stream requires.
#include "kernel_table.hpp"
#include "cuda_check.hpp"
#include "kernels.hpp"
#include "stream_registry.hpp"

#include <verlpp/sdk/dlpack_util.hpp>
#include <verlpp/sdk/adamw_args.hpp>
#include <verlpp/sdk/attention_args.hpp>
#include <verlpp/sdk/kernel_args.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace verlpp::cuda {
namespace {

using sdk::checked;
using sdk::is_f32;
using sdk::require;

FloatType float_type(DLDataType d, const char* what) {
  if (d.lanes == 1 && d.code == kDLFloat && d.bits == 32) return FloatType::f32;
  if (d.lanes == 1 && d.code == kDLFloat && d.bits == 16) return FloatType::f16;
  if (d.lanes == 1 && d.code == kDLBfloat && d.bits == 16) return FloatType::bf16;
  sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT, std::string(what) + " dtype " + sdk::dtype_name(d) + " is not f32/bf16/f16");
}


// The tensor must be in CUDA device memory on `device`.
void require_on_device(const DLTensor& t, int32_t device, const char* what) {
  require(t.device.device_type == VERLPP_GPU_DL_DEVICE, std::string(what) + " is not " VERLPP_GPU_PLATFORM " device memory (DLPack device type " +
                                               std::to_string(int(t.device.device_type)) + ")");
  require(t.device.device_id == device, std::string(what) + " is on device " + std::to_string(t.device.device_id) +
                                            ", the other tensors on device " + std::to_string(device));
}

verlpp_error* logprob_entropy(const DLTensor* logits_p, const DLTensor* labels_p, float temperature,
                              DLTensor* out_logprob_p, DLTensor* out_entropy_p, verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " logprob_entropy", [&] {
    const DLTensor& logits = checked(logits_p, "logits");
    const DLTensor& labels = checked(labels_p, "labels");
    DLTensor& out_lp = const_cast<DLTensor&>(checked(out_logprob_p, "out_logprob"));
    require(logits.ndim == 2, "logits must be [N, V], got ndim " + std::to_string(logits.ndim));
    FloatType type = float_type(logits.dtype, "logits");
    int64_t n = logits.shape[0], v = logits.shape[1];
    require(labels.ndim == 1 && labels.shape[0] == n, "labels must be [N] with N = " + std::to_string(n));
    require(labels.dtype.code == kDLInt && labels.dtype.bits == 64 && labels.dtype.lanes == 1, "labels must be int64");
    require(out_lp.ndim == 1 && out_lp.shape[0] == n && is_f32(out_lp.dtype), "out_logprob must be [N] float32");
    require(temperature > 0.0f && std::isfinite(temperature), "temperature must be > 0, got " + std::to_string(temperature));
    if (out_entropy_p != nullptr) {
      const DLTensor& ent = checked(out_entropy_p, "out_entropy");
      require(ent.ndim == 1 && ent.shape[0] == n && is_f32(ent.dtype), "out_entropy must be [N] float32");
      require(sdk::is_contiguous(ent), "out_entropy must be contiguous");
    }
    require(sdk::is_contiguous(labels) && sdk::is_contiguous(out_lp), "labels and out_logprob must be contiguous");
    require(v > 0 || n == 0, "vocabulary size is 0");
    int64_t row_stride = logits.strides ? logits.strides[0] : v;
    require(logits.strides == nullptr || logits.strides[1] == 1 || v == 1, "logits columns must be dense (stride 1)");
    require(row_stride >= v || n <= 1, "logits row stride " + std::to_string(row_stride) + " < V = " + std::to_string(v));
    const int32_t device = logits.device.device_id;
    require_on_device(logits, device, "logits");
    require_on_device(labels, device, "labels");
    require_on_device(out_lp, device, "out_logprob");
    if (out_entropy_p != nullptr) require_on_device(*out_entropy_p, device, "out_entropy");

    StreamTarget target = resolve_stream(stream, device);
    require(target.device == device, "stream is on device " + std::to_string(target.device) + ", the tensors on device " + std::to_string(device));
    DeviceGuard device_guard(device);
    float* ent = out_entropy_p ? static_cast<float*>(sdk::data_ptr(*out_entropy_p)) : nullptr;
    cuda_check(launch_logprob_entropy(sdk::data_ptr(logits), type, n, v, row_stride,
                                      static_cast<const int64_t*>(sdk::data_ptr(labels)), temperature,
                                      static_cast<float*>(sdk::data_ptr(out_lp)), ent, target.stream),
               "launching logprob_entropy (N=" + std::to_string(n) + ", V=" + std::to_string(v) + ")");
    finish_if_default(target, "logprob_entropy");
  });
}

// The device of the first operand, after checking that every given operand (NULL: an optional
// one left out) lives there.
int32_t common_device(std::initializer_list<std::pair<const DLTensor*, const char*>> operands) {
  const int32_t device = operands.begin()->first->device.device_id;
  for (const auto& [t, what] : operands)
    if (t != nullptr) require_on_device(*t, device, what);
  return device;
}

verlpp_error* logprob_backward(const DLTensor* logits_p, const DLTensor* labels_p, const DLTensor* lse_p,
                               const DLTensor* grad_logprob_p, const DLTensor* mean_z_p, const DLTensor* grad_entropy_p,
                               float temperature, DLTensor* out_p, verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " logprob_backward", [&] {
    const sdk::LogprobBackwardArgs a = sdk::check_logprob_backward_args(logits_p, labels_p, lse_p, grad_logprob_p, mean_z_p,
                                                                        grad_entropy_p, temperature, out_p);
    const FloatType type = float_type(logits_p->dtype, "logits");
    const int32_t device = common_device({{logits_p, "logits"}, {labels_p, "labels"}, {lse_p, "lse"}, {out_p, "out_grad"},
                                          {grad_logprob_p, "grad_logprob"}, {mean_z_p, "mean_z"},
                                          {grad_entropy_p, "grad_entropy"}});
    StreamTarget target = resolve_stream(stream, device);
    require(target.device == device, "stream is on device " + std::to_string(target.device) + ", the tensors on device " + std::to_string(device));
    DeviceGuard device_guard(device);
    auto f32 = [](const DLTensor* t) { return t != nullptr ? static_cast<const float*>(sdk::data_ptr(*t)) : nullptr; };
    cuda_check(launch_logprob_backward(sdk::data_ptr(*logits_p), type, a.n, a.v, a.row_stride,
                                       static_cast<const int64_t*>(sdk::data_ptr(*labels_p)), f32(lse_p), f32(grad_logprob_p),
                                       f32(mean_z_p), f32(grad_entropy_p), temperature, sdk::data_ptr(*out_p),
                                       a.out_row_stride, target.stream),
               "launching logprob_backward (N=" + std::to_string(a.n) + ", V=" + std::to_string(a.v) + ")");
    finish_if_default(target, "logprob_backward");
  });
}

verlpp_error* silu_mul(const DLTensor* gate_p, const DLTensor* up_p, DLTensor* out_p, verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " silu_mul", [&] {
    const sdk::SiluMulArgs a = sdk::check_silu_mul_args({{gate_p, "gate"}, {up_p, "up"}, {out_p, "out"}});
    const FloatType type = float_type(gate_p->dtype, "gate");
    const int32_t device = common_device({{gate_p, "gate"}, {up_p, "up"}, {out_p, "out"}});
    StreamTarget target = resolve_stream(stream, device);
    require(target.device == device, "stream is on device " + std::to_string(target.device) + ", the tensors on device " + std::to_string(device));
    DeviceGuard device_guard(device);
    cuda_check(launch_silu_mul(sdk::data_ptr(*gate_p), a.row_strides[0], sdk::data_ptr(*up_p), a.row_strides[1],
                               sdk::data_ptr(*out_p), a.row_strides[2], type, a.n, a.f, target.stream),
               "launching silu_mul (N=" + std::to_string(a.n) + ", F=" + std::to_string(a.f) + ")");
    finish_if_default(target, "silu_mul");
  });
}

verlpp_error* silu_mul_backward(const DLTensor* gate_p, const DLTensor* up_p, const DLTensor* grad_p, DLTensor* grad_gate_p,
                                DLTensor* grad_up_p, verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " silu_mul_backward", [&] {
    const sdk::SiluMulArgs a = sdk::check_silu_mul_args(
        {{gate_p, "gate"}, {up_p, "up"}, {grad_p, "grad_out"}, {grad_gate_p, "grad_gate"}, {grad_up_p, "grad_up"}});
    const FloatType type = float_type(gate_p->dtype, "gate");
    const int32_t device = common_device(
        {{gate_p, "gate"}, {up_p, "up"}, {grad_p, "grad_out"}, {grad_gate_p, "grad_gate"}, {grad_up_p, "grad_up"}});
    StreamTarget target = resolve_stream(stream, device);
    require(target.device == device, "stream is on device " + std::to_string(target.device) + ", the tensors on device " + std::to_string(device));
    DeviceGuard device_guard(device);
    cuda_check(launch_silu_mul_backward(sdk::data_ptr(*gate_p), a.row_strides[0], sdk::data_ptr(*up_p), a.row_strides[1],
                                        sdk::data_ptr(*grad_p), a.row_strides[2], sdk::data_ptr(*grad_gate_p),
                                        a.row_strides[3], sdk::data_ptr(*grad_up_p), a.row_strides[4], type, a.n, a.f,
                                        target.stream),
               "launching silu_mul_backward (N=" + std::to_string(a.n) + ", F=" + std::to_string(a.f) + ")");
    finish_if_default(target, "silu_mul_backward");
  });
}

verlpp_error* rms_norm(const DLTensor* x_p, const DLTensor* w_p, float eps, DLTensor* out_p, verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " rms_norm", [&] {
    const DLTensor& x = checked(x_p, "x");
    const DLTensor& w = checked(w_p, "weight");
    DLTensor& out = const_cast<DLTensor&>(checked(out_p, "out"));
    require(x.ndim == 2, "x must be [N, D], got ndim " + std::to_string(x.ndim));
    int64_t n = x.shape[0], d = x.shape[1];
    require(w.ndim == 1 && w.shape[0] == d, "weight must be [D] with D = " + std::to_string(d));
    require(out.ndim == 2 && out.shape[0] == n && out.shape[1] == d, "out must have x's shape");
    FloatType type = float_type(x.dtype, "x");
    require(sdk::same_dtype(x.dtype, w.dtype) && sdk::same_dtype(x.dtype, out.dtype), "x, weight and out must share one float dtype");
    require(sdk::is_contiguous(x) && sdk::is_contiguous(w) && sdk::is_contiguous(out), "rms_norm needs contiguous tensors");
    require(eps >= 0.0f, "eps must be >= 0");
    const int32_t device = x.device.device_id;
    require_on_device(x, device, "x");
    require_on_device(w, device, "weight");
    require_on_device(out, device, "out");

    StreamTarget target = resolve_stream(stream, device);
    require(target.device == device, "stream is on device " + std::to_string(target.device) + ", the tensors on device " + std::to_string(device));
    DeviceGuard device_guard(device);
    cuda_check(launch_rms_norm(sdk::data_ptr(x), sdk::data_ptr(w), type, n, d, eps, sdk::data_ptr(out), target.stream),
               "launching rms_norm (N=" + std::to_string(n) + ", D=" + std::to_string(d) + ")");
    finish_if_default(target, "rms_norm");
  });
}

verlpp_error* rotary_embedding(DLTensor* q_p, DLTensor* k_p, const DLTensor* pos_p, const DLTensor* inv_freq_p,
                               verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " rotary_embedding", [&] {
    const sdk::RotaryArgs args = sdk::check_rotary_args(q_p, k_p, pos_p, inv_freq_p);
    const DLTensor& pos = *args.positions;
    const DLTensor& inv_freq = *args.inv_freq;
    const int64_t n = args.tokens, half = args.half;
    const int32_t device = pos.device.device_id;
    require_on_device(pos, device, "positions");
    require_on_device(inv_freq, device, "inv_freq");
    for (DLTensor* x : args.targets) require_on_device(*x, device, x == q_p ? "q" : "k");
    const FloatType type = args.targets.empty() ? FloatType::f32 : float_type(args.targets.front()->dtype, args.targets.front() == q_p ? "q" : "k");
    if (half > 4096) sdk::fail(VERLPP_STATUS_UNSUPPORTED, "head size " + std::to_string(2 * half) + " > 8192 is not supported by the " VERLPP_GPU_PLUGIN_NAME " kernel");
    require(n <= 0x7fffffff, "N = " + std::to_string(n) + " tokens > 2^31 - 1 in one call");

    StreamTarget target = resolve_stream(stream, device);
    require(target.device == device, "stream is on device " + std::to_string(target.device) + ", the tensors on device " + std::to_string(device));
    DeviceGuard device_guard(device);
    cuda_check(launch_rotary_embedding(q_p ? sdk::data_ptr(*q_p) : nullptr, q_p ? q_p->shape[1] : 0,
                                       k_p ? sdk::data_ptr(*k_p) : nullptr, k_p ? k_p->shape[1] : 0, type, n, half,
                                       static_cast<const int64_t*>(sdk::data_ptr(pos)),
                                       static_cast<const float*>(sdk::data_ptr(inv_freq)), target.stream),
               "launching rotary_embedding (N=" + std::to_string(n) + ", S=" + std::to_string(2 * half) + ")");
    finish_if_default(target, "rotary_embedding");
  });
}

// ABI 1.3: the residual add and the next RMSNorm in one launch (decode_fusion_kernels.cu).
verlpp_error* add_rms_norm(const DLTensor* x_p, DLTensor* residual_p, const DLTensor* w_p, float eps, DLTensor* out_p,
                           verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " add_rms_norm", [&] {
    const sdk::AddRmsNormArgs a = sdk::check_add_rms_norm_args(x_p, residual_p, w_p, eps, out_p);
    const FloatType type = float_type(x_p->dtype, "x");
    const int32_t device = common_device({{x_p, "x"}, {residual_p, "residual"}, {w_p, "weight"}, {out_p, "out"}});
    require(a.n <= 0x7fffffff, "N = " + std::to_string(a.n) + " rows > 2^31 - 1 in one call");
    StreamTarget target = resolve_stream(stream, device);
    require(target.device == device, "stream is on device " + std::to_string(target.device) + ", the tensors on device " + std::to_string(device));
    DeviceGuard device_guard(device);
    cuda_check(launch_add_rms_norm(sdk::data_ptr(*x_p), sdk::data_ptr(*residual_p), sdk::data_ptr(*w_p), type, a.n, a.d, eps,
                                   sdk::data_ptr(*out_p), target.stream),
               "launching add_rms_norm (N=" + std::to_string(a.n) + ", D=" + std::to_string(a.d) + ")");
    finish_if_default(target, "add_rms_norm");
  });
}

// The launcher's view of rotary_kv_store's operands (also those of 1.5's fused attention, with
// q_out NULL there).
RotaryKvStoreOperands store_operands(const sdk::RotaryKvStoreArgs& a, const DLTensor* q_p, const DLTensor* k_p,
                                     const DLTensor* v_p, const DLTensor* pos_p, const DLTensor* inv_freq_p,
                                     const DLTensor* slots_p, DLTensor* q_out_p, DLTensor* k_cache_p, DLTensor* v_cache_p) {
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
    sdk::fail(VERLPP_STATUS_UNSUPPORTED, "head size " + std::to_string(a.head_size) + " > " + std::to_string(2 * kMaxRotaryHalf) +
                                             " is not supported by the " VERLPP_GPU_PLUGIN_NAME " kernel");
  require(a.rope.tokens <= 0x7fffffff, "N = " + std::to_string(a.rope.tokens) + " tokens > 2^31 - 1 in one call");
  if ((a.q_heads + 2 * a.kv_heads) * a.head_size > 0x7fffffff)
    sdk::fail(VERLPP_STATUS_UNSUPPORTED, "more than 2^31 - 1 values per token is not supported by the " VERLPP_GPU_PLUGIN_NAME " kernel");
}

// ABI 1.3: RoPE on q and k plus the paged-cache stores of k and v in one launch. Slot values
// live on the device and are not checked here: an out-of-range one skips its token's stores
// (kernels.hpp), which keeps the call free of a sync.
verlpp_error* rotary_kv_store(const DLTensor* q_p, const DLTensor* k_p, const DLTensor* v_p, const DLTensor* pos_p,
                              const DLTensor* inv_freq_p, const DLTensor* slots_p, DLTensor* q_out_p, DLTensor* k_cache_p,
                              DLTensor* v_cache_p, verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " rotary_kv_store", [&] {
    const sdk::RotaryKvStoreArgs a = sdk::check_rotary_kv_store_args(q_p, k_p, v_p, pos_p, inv_freq_p, slots_p, q_out_p,
                                                                     k_cache_p, v_cache_p);
    const FloatType type = float_type(q_p->dtype, "q");
    const int32_t device = common_device({{q_p, "q"}, {k_p, "k"}, {v_p, "v"}, {pos_p, "positions"}, {inv_freq_p, "inv_freq"},
                                          {slots_p, "slot_mapping"}, {q_out_p, "q_out"}, {k_cache_p, "k_cache"},
                                          {v_cache_p, "v_cache"}});
    require_store_limits(a);
    const RotaryKvStoreOperands o = store_operands(a, q_p, k_p, v_p, pos_p, inv_freq_p, slots_p, q_out_p, k_cache_p, v_cache_p);
    StreamTarget target = resolve_stream(stream, device);
    require(target.device == device, "stream is on device " + std::to_string(target.device) + ", the tensors on device " + std::to_string(device));
    DeviceGuard device_guard(device);
    cuda_check(launch_rotary_kv_store(o, type, target.stream),
               "launching rotary_kv_store (N=" + std::to_string(a.rope.tokens) + ", H=" + std::to_string(a.q_heads) +
                   ", K=" + std::to_string(a.kv_heads) + ", S=" + std::to_string(a.head_size) + ")");
    finish_if_default(target, "rotary_kv_store");
  });
}

// ABI 1.5: a decode step's RoPE, cache stores and attention in one launch where the tensor-core
// kernel takes the call (kernels.hpp). Lengths, tables and slots live on the device and are not
// checked here (the attention clamps lengths to the table; a slot outside the cache is stored
// nowhere), which keeps the call free of a sync.
verlpp_error* rotary_paged_attention_decode(const DLTensor* q_p, const DLTensor* k_p, const DLTensor* v_p, const DLTensor* pos_p,
                                            const DLTensor* inv_freq_p, const DLTensor* slots_p, DLTensor* k_cache_p,
                                            DLTensor* v_cache_p, const DLTensor* bt_p, const DLTensor* lens_p, float scale,
                                            DLTensor* out_p, verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " rotary_paged_attention_decode", [&] {
    const sdk::RotaryAttentionArgs a = sdk::check_rotary_paged_attention_args(q_p, k_p, v_p, pos_p, inv_freq_p, slots_p, k_cache_p,
                                                                              v_cache_p, bt_p, lens_p, out_p);
    const FloatType type = float_type(q_p->dtype, "q");
    const int32_t device = common_device({{q_p, "q"}, {k_p, "k"}, {v_p, "v"}, {pos_p, "positions"}, {inv_freq_p, "inv_freq"},
                                          {slots_p, "slot_mapping"}, {k_cache_p, "k_cache"}, {v_cache_p, "v_cache"},
                                          {bt_p, "block_tables"}, {lens_p, "context_lens"}, {out_p, "out"}});
    require_store_limits(a.store);
    const int64_t b = a.store.rope.tokens, s = a.store.head_size, block_size = a.store.block_size;
    if (s > 256) sdk::fail(VERLPP_STATUS_UNSUPPORTED, "head size " + std::to_string(s) + " > 256 is not supported by the " VERLPP_GPU_PLUGIN_NAME " kernel");
    require(b <= 65535, "batch " + std::to_string(b) + " > 65535 sequences in one call");
    if (a.store.slots() > INT32_MAX || a.max_blocks * block_size > INT32_MAX)
      sdk::fail(VERLPP_STATUS_UNSUPPORTED, "a KV cache or block table of more than 2^31 - 1 positions is not supported by the " VERLPP_GPU_PLUGIN_NAME " kernel");
    const RotaryKvStoreOperands o = store_operands(a.store, q_p, k_p, v_p, pos_p, inv_freq_p, slots_p, nullptr, k_cache_p, v_cache_p);
    StreamTarget target = resolve_stream(stream, device);
    require(target.device == device, "stream is on device " + std::to_string(target.device) + ", the tensors on device " + std::to_string(device));
    DeviceGuard device_guard(device);
    cuda_check(launch_rotary_paged_attention_decode(o, type, static_cast<const int32_t*>(sdk::data_ptr(*bt_p)),
                                                    static_cast<const int32_t*>(sdk::data_ptr(*lens_p)), block_size, a.max_blocks,
                                                    scale, sdk::data_ptr(*out_p), target.stream),
               "launching rotary_paged_attention_decode (B=" + std::to_string(b) + ", H=" + std::to_string(a.store.q_heads) +
                   ", K=" + std::to_string(a.store.kv_heads) + ", S=" + std::to_string(s) + ")");
    finish_if_default(target, "rotary_paged_attention_decode");
  });
}

verlpp_error* paged_attention_decode(const DLTensor* q_p, const DLTensor* k_p, const DLTensor* v_p, const DLTensor* bt_p,
                                     const DLTensor* lens_p, float scale, DLTensor* out_p, verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " paged_attention_decode", [&] {
    const DLTensor& q = checked(q_p, "q");
    const DLTensor& kc = checked(k_p, "k_cache");
    const DLTensor& vc = checked(v_p, "v_cache");
    const DLTensor& bt = checked(bt_p, "block_tables");
    const DLTensor& lens = checked(lens_p, "context_lens");
    DLTensor& out = const_cast<DLTensor&>(checked(out_p, "out"));
    require(q.ndim == 3, "q must be [B, H, S], got ndim " + std::to_string(q.ndim));
    require(kc.ndim == 4, "k_cache must be [num_blocks, block_size, K, S], got ndim " + std::to_string(kc.ndim));
    const int64_t b = q.shape[0], h = q.shape[1], s = q.shape[2];
    const int64_t block_size = kc.shape[1], kv = kc.shape[2];
    require(vc.ndim == 4 && std::equal(kc.shape, kc.shape + 4, vc.shape), "v_cache must have k_cache's shape");
    require(kc.shape[3] == s, "k_cache head size " + std::to_string(kc.shape[3]) + " != q's " + std::to_string(s));
    require(kv > 0 && h % kv == 0, "query heads H = " + std::to_string(h) + " must be a multiple of KV heads K = " + std::to_string(kv));
    FloatType type = float_type(q.dtype, "q");
    require(sdk::same_dtype(q.dtype, kc.dtype) && sdk::same_dtype(q.dtype, vc.dtype) && sdk::same_dtype(q.dtype, out.dtype),
            "q, k_cache, v_cache and out must share one float dtype");
    require(out.ndim == 3 && std::equal(q.shape, q.shape + 3, out.shape), "out must have q's shape");
    require(bt.ndim == 2 && bt.shape[0] == b && bt.dtype.code == kDLInt && bt.dtype.bits == 32, "block_tables must be [B, max_blocks] int32");
    require(lens.ndim == 1 && lens.shape[0] == b && lens.dtype.code == kDLInt && lens.dtype.bits == 32, "context_lens must be [B] int32");
    for (const DLTensor* t : {&q, &kc, &vc, &bt, &lens, static_cast<const DLTensor*>(&out)})
      require(sdk::is_contiguous(*t), "paged_attention_decode needs contiguous tensors");
    if (s > 256) sdk::fail(VERLPP_STATUS_UNSUPPORTED, "head size " + std::to_string(s) + " > 256 is not supported by the " VERLPP_GPU_PLUGIN_NAME " kernel");
    require(b <= 65535, "batch " + std::to_string(b) + " > 65535 sequences in one call");
    // The kernel indexes cache rows (block * block_size + slot) and positions with 32-bit ints.
    if (kc.shape[0] * block_size > INT32_MAX || bt.shape[1] * block_size > INT32_MAX)
      sdk::fail(VERLPP_STATUS_UNSUPPORTED, "a KV cache or block table of more than 2^31 - 1 positions is not supported by the " VERLPP_GPU_PLUGIN_NAME " kernel");
    const int32_t device = q.device.device_id;
    require_on_device(q, device, "q");
    require_on_device(kc, device, "k_cache");
    require_on_device(vc, device, "v_cache");
    require_on_device(bt, device, "block_tables");
    require_on_device(lens, device, "context_lens");
    require_on_device(out, device, "out");

    StreamTarget target = resolve_stream(stream, device);
    require(target.device == device, "stream is on device " + std::to_string(target.device) + ", the tensors on device " + std::to_string(device));
    DeviceGuard device_guard(device);
    cuda_check(launch_paged_attention_decode(sdk::data_ptr(q), sdk::data_ptr(kc), sdk::data_ptr(vc), type,
                                             static_cast<const int32_t*>(sdk::data_ptr(bt)),
                                             static_cast<const int32_t*>(sdk::data_ptr(lens)), b, h, kv, s, block_size, bt.shape[1],
                                             scale, sdk::data_ptr(out), target.stream),
               "launching paged_attention_decode (B=" + std::to_string(b) + ", H=" + std::to_string(h) + ", S=" + std::to_string(s) + ")");
    finish_if_default(target, "paged_attention_decode");
  });
}

// [n] contiguous tensor of `dtype` on `device`.
void require_vector(const DLTensor& t, int64_t n, DLDataType dtype, int32_t device, const char* what) {
  require(t.ndim == 1 && t.shape[0] == n && sdk::same_dtype(t.dtype, dtype) && sdk::is_contiguous(t),
          std::string(what) + " must be [B] " + sdk::dtype_name(dtype) + " with B = " + std::to_string(n));
  require_on_device(t, device, what);
}

// Argument checks as cpu_ref's; the per-row values (temperature, top_k, top_p) live on the
// device and are not checked here: out-of-range values act as the kernel says (kernels.hpp).
verlpp_error* sample(const DLTensor* logits_p, const DLTensor* temperature_p, const DLTensor* top_k_p, const DLTensor* top_p_p,
                     const DLTensor* seeds_p, uint64_t step, DLTensor* out_tokens_p, DLTensor* out_logprobs_p,
                     verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " sample", [&] {
    const DLTensor& logits = checked(logits_p, "logits");
    require(logits.ndim == 2, "logits must be [B, V], got ndim " + std::to_string(logits.ndim));
    // f32, or from ABI 1.3 bf16 / f16 (read as their exact fp32 values).
    const FloatType type = float_type(logits.dtype, "logits");
    require(sdk::is_contiguous(logits), "logits must be contiguous");
    const int64_t b = logits.shape[0], v = logits.shape[1];
    require(v > 0 || b == 0, "vocabulary size is 0");
    const int32_t device = logits.device.device_id;
    require_on_device(logits, device, "logits");
    const DLTensor& temperature = checked(temperature_p, "temperature");
    const DLTensor& top_k = checked(top_k_p, "top_k");
    const DLTensor& top_p = checked(top_p_p, "top_p");
    const DLTensor& seeds = checked(seeds_p, "seeds");
    DLTensor& out_tokens = const_cast<DLTensor&>(checked(out_tokens_p, "out_tokens"));
    DLTensor& out_logprobs = const_cast<DLTensor&>(checked(out_logprobs_p, "out_logprobs"));
    require_vector(temperature, b, {kDLFloat, 32, 1}, device, "temperature");
    require_vector(top_k, b, {kDLInt, 32, 1}, device, "top_k");
    require_vector(top_p, b, {kDLFloat, 32, 1}, device, "top_p");
    // Seeds are uint64 by the ABI; int64 carries the same bits and is accepted too.
    DLDataType seed_type = seeds.dtype.code == kDLInt ? DLDataType{kDLInt, 64, 1} : DLDataType{kDLUInt, 64, 1};
    require_vector(seeds, b, seed_type, device, "seeds");
    require_vector(out_tokens, b, {kDLInt, 64, 1}, device, "out_tokens");
    require_vector(out_logprobs, b, {kDLFloat, 32, 1}, device, "out_logprobs");

    StreamTarget target = resolve_stream(stream, device);
    require(target.device == device, "stream is on device " + std::to_string(target.device) + ", the tensors on device " + std::to_string(device));
    DeviceGuard device_guard(device);
    cuda_check(launch_sample(sdk::data_ptr(logits), type, b, v,
                             static_cast<const float*>(sdk::data_ptr(temperature)),
                             static_cast<const int32_t*>(sdk::data_ptr(top_k)), static_cast<const float*>(sdk::data_ptr(top_p)),
                             static_cast<const uint64_t*>(sdk::data_ptr(seeds)), step,
                             static_cast<int64_t*>(sdk::data_ptr(out_tokens)), static_cast<float*>(sdk::data_ptr(out_logprobs)),
                             target.stream),
               "launching sample (B=" + std::to_string(b) + ", V=" + std::to_string(v) + ")");
    finish_if_default(target, "sample");
  });
}

verlpp_error* adamw_update(int32_t count, DLTensor* const* params, const DLTensor* const* grads, DLTensor* const* exp_avg,
                           DLTensor* const* exp_avg_sq, DLTensor* const* copies, const verlpp_adamw_options* options,
                           const DLTensor* grad_scale, verlpp_stream stream) {
  return sdk::guard(VERLPP_GPU_PLUGIN_NAME " adamw_update", [&] {
    const sdk::AdamwArgs a = sdk::check_adamw_update_args(count, params, grads, exp_avg, exp_avg_sq, copies, options, grad_scale);
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
    StreamTarget target = resolve_stream(stream, device);
    require(target.device == device, "stream is on device " + std::to_string(target.device) + ", the tensors on device " + std::to_string(device));
    DeviceGuard device_guard(device);
    const AdamwScalars scalars{a.weight_decay_factor, a.one_minus_beta1, a.beta2, a.one_minus_beta2,
                               a.step_size,           a.bias_correction2_sqrt, a.eps};
    cuda_check(launch_adamw_update(tensors.data(), count, float_type(a.grad_dtype, "grads"), a.has_copies,
                                   a.has_copies ? float_type(a.copy_dtype, "copies") : FloatType::f32, scalars,
                                   grad_scale != nullptr ? static_cast<const float*>(sdk::data_ptr(*grad_scale)) : nullptr,
                                   target.stream),
               "launching adamw_update (" + std::to_string(count) + " tensors)");
    finish_if_default(target, "adamw_update");
  });
}

}  // namespace

const verlpp_kernel_table* cuda_kernels() {
  static const verlpp_kernel_table table = [] {
    verlpp_kernel_table t{};
    t.struct_size = sizeof(t);
    t.logprob_entropy = &logprob_entropy;
    t.rms_norm = &rms_norm;
    t.rotary_embedding = &rotary_embedding;
    t.paged_attention_decode = &paged_attention_decode;
    t.sample = &sample;
    t.logprob_backward = &logprob_backward;
    t.silu_mul = &silu_mul;
    t.silu_mul_backward = &silu_mul_backward;
    t.add_rms_norm = &add_rms_norm;
    t.rotary_kv_store = &rotary_kv_store;
    t.adamw_update = &adamw_update;
    t.rotary_paged_attention_decode = &rotary_paged_attention_decode;
    return t;
  }();
  return &table;
}

}  // namespace verlpp::cuda
