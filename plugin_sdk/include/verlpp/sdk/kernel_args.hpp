// Plugin SDK: the argument rules that plugin_abi.h states for kernel-table entries, checked the
// same way by every plugin (cpu_ref, cuda, a vendor's); one check_<kernel>_args per entry, here
// and in attention_args.hpp, sample_args.hpp and adamw_args.hpp. Only what the ABI itself says is checked
// here (shapes, dtypes, contiguity); where the tensors must live (host memory, one device) and a
// plugin's own limits stay with the plugin. Failures throw INVALID_ARGUMENT naming the operand.
#pragma once

#include <verlpp/sdk/dlpack_util.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace verlpp::sdk {

inline bool is_f32(DLDataType d) { return d.code == kDLFloat && d.bits == 32 && d.lanes == 1; }

// f32, f16 or bf16: the floating dtypes the kernel table's entries take.
inline bool is_float_dtype(DLDataType d) {
  return d.lanes == 1 &&
         ((d.code == kDLFloat && (d.bits == 32 || d.bits == 16)) || (d.code == kDLBfloat && d.bits == 16));
}

// `what`'s dtype is `ref_name`'s (one dtype across a call's float operands).
inline void require_dtype_of(const DLTensor& t, const char* what, const DLTensor& ref, const char* ref_name) {
  require(same_dtype(t.dtype, ref.dtype), std::string(what) + " dtype " + dtype_name(t.dtype) + " differs from " +
                                              ref_name + "'s " + dtype_name(ref.dtype));
}

inline void require_contiguous(const DLTensor& t, const std::string& what) {
  require(is_contiguous(t), what + " must be contiguous");
}

// rotary_embedding's operands once its rules hold.
struct RotaryArgs {
  const DLTensor* positions = nullptr;  // [N] int64
  const DLTensor* inv_freq = nullptr;   // [S/2] f32
  int64_t tokens = 0;                   // N
  int64_t half = 0;                     // S/2
  std::vector<DLTensor*> targets;       // q and/or k ([N, heads, S], one float dtype), in that order
};

// rotary_embedding's rules: positions [N] int64 and inv_freq [S/2] f32, both contiguous; q and k
// (either may be NULL) [N, heads, S] with S = 2 * inv_freq's length, f32/bf16/f16, contiguous,
// and one dtype between them.
// The RoPE tables both rotary entries take: positions [N] int64 and inv_freq [S/2] f32, contiguous.
// Fills a's positions, inv_freq, tokens and half.
inline void check_rope_tables(const DLTensor* positions, const DLTensor* inv_freq, RotaryArgs& a) {
  const DLTensor& pos = checked(positions, "positions");
  const DLTensor& freq = checked(inv_freq, "inv_freq");
  require(pos.ndim == 1 && pos.dtype.code == kDLInt && pos.dtype.bits == 64 && pos.dtype.lanes == 1,
          "positions must be [N] int64");
  require(freq.ndim == 1 && is_f32(freq.dtype), "inv_freq must be [S/2] float32");
  require(is_contiguous(pos) && is_contiguous(freq), "positions and inv_freq must be contiguous");
  a.positions = &pos;
  a.inv_freq = &freq;
  a.tokens = pos.shape[0];
  a.half = freq.shape[0];
}

inline RotaryArgs check_rotary_args(DLTensor* q, DLTensor* k, const DLTensor* positions, const DLTensor* inv_freq) {
  RotaryArgs a;
  check_rope_tables(positions, inv_freq, a);
  for (DLTensor* x : {q, k}) {
    if (x == nullptr) continue;
    const std::string what = x == q ? "q" : "k";
    checked(x, what.c_str());
    require(x->ndim == 3, what + " must be [N, heads, S], got ndim " + std::to_string(x->ndim));
    require(x->shape[0] == a.tokens,
            what + " has " + std::to_string(x->shape[0]) + " tokens, positions " + std::to_string(a.tokens));
    require(x->shape[2] == 2 * a.half,
            what + " head size " + std::to_string(x->shape[2]) + " is not twice inv_freq's " + std::to_string(a.half));
    require(is_float_dtype(x->dtype), what + " dtype " + dtype_name(x->dtype) + " is not f32/bf16/f16");
    require_contiguous(*x, what);
    a.targets.push_back(x);
  }
  require(a.targets.size() < 2 || same_dtype(q->dtype, k->dtype), "q and k must share one dtype");
  return a;
}

// The row stride of a [N, V] tensor with dense columns (checked), in elements.
inline int64_t dense_row_stride(const DLTensor& t, const std::string& what) {
  const int64_t n = t.shape[0], v = t.shape[1];
  require(t.strides == nullptr || t.strides[1] == 1 || v == 1, what + " columns must be dense (stride 1)");
  const int64_t stride = t.strides != nullptr ? t.strides[0] : v;
  require(stride >= v || n <= 1, what + " row stride " + std::to_string(stride) + " < V = " + std::to_string(v));
  return stride;
}

// A [N, V] logits operand of the log-prob entries: f32/bf16/f16, dense columns, rows at any
// stride >= V.
struct LogitsRows {
  int64_t n = 0, v = 0;    // rows, vocabulary
  int64_t row_stride = 0;  // in elements
};
inline LogitsRows check_logits_rows(const DLTensor* logits_p) {
  const DLTensor& logits = checked(logits_p, "logits");
  require(logits.ndim == 2, "logits must be [N, V], got ndim " + std::to_string(logits.ndim));
  require(is_float_dtype(logits.dtype), "logits dtype " + dtype_name(logits.dtype) + " is not f32/bf16/f16");
  LogitsRows r;
  r.n = logits.shape[0];
  r.v = logits.shape[1];
  require(r.v > 0 || r.n == 0, "vocabulary size is 0");
  r.row_stride = dense_row_stride(logits, "logits");
  return r;
}

// logprob_entropy's operands once its rules hold.
struct LogprobEntropyArgs {
  int64_t n = 0, v = 0;    // rows, vocabulary
  int64_t row_stride = 0;  // of logits, in elements
  bool with_entropy = false;
};

// logprob_entropy's rules: logits [N, V] f32/bf16/f16 with dense columns (rows at any stride
// >= V); labels [N] int64; out_logprob [N] f32; out_entropy [N] f32 or NULL; the vectors
// contiguous; temperature finite and > 0. Label values are the plugin's to check.
inline LogprobEntropyArgs check_logprob_entropy_args(const DLTensor* logits_p, const DLTensor* labels_p,
                                                     float temperature, const DLTensor* out_logprob_p,
                                                     const DLTensor* out_entropy_p) {
  LogprobEntropyArgs a;
  const LogitsRows rows = check_logits_rows(logits_p);
  a.n = rows.n;
  a.v = rows.v;
  a.row_stride = rows.row_stride;
  const DLTensor& labels = checked(labels_p, "labels");
  require(labels.ndim == 1 && labels.shape[0] == a.n, "labels must be [N] with N = " + std::to_string(a.n));
  require(labels.dtype.code == kDLInt && labels.dtype.bits == 64 && labels.dtype.lanes == 1, "labels must be int64");
  const DLTensor& out_lp = checked(out_logprob_p, "out_logprob");
  require(out_lp.ndim == 1 && out_lp.shape[0] == a.n && is_f32(out_lp.dtype), "out_logprob must be [N] float32");
  require(temperature > 0.0f && std::isfinite(temperature),
          "temperature must be > 0, got " + std::to_string(temperature));
  if (out_entropy_p != nullptr) {
    const DLTensor& ent = checked(out_entropy_p, "out_entropy");
    require(ent.ndim == 1 && ent.shape[0] == a.n && is_f32(ent.dtype), "out_entropy must be [N] float32");
    require_contiguous(ent, "out_entropy");
  }
  require(is_contiguous(labels) && is_contiguous(out_lp), "labels and out_logprob must be contiguous");
  a.with_entropy = out_entropy_p != nullptr;
  return a;
}

// The label values where the plugin can read them: each in [0, V), naming the first bad row.
inline void check_label_values(const int64_t* labels, int64_t n, int64_t v) {
  for (int64_t r = 0; r < n; ++r)
    require(labels[r] >= 0 && labels[r] < v, "label " + std::to_string(labels[r]) + " at row " + std::to_string(r) +
                                                 " is outside [0, " + std::to_string(v) + ")");
}

// logprob_backward's operands once its rules hold (plugin_abi.h, ABI 1.2).
struct LogprobBackwardArgs {
  int64_t n = 0, v = 0;                    // rows, vocabulary
  int64_t row_stride = 0;                  // of logits, in elements
  int64_t out_row_stride = 0;              // of out_grad, in elements
  const DLTensor* grad_logprob = nullptr;  // [N] f32, or NULL
  const DLTensor* mean_z = nullptr;        // [N] f32 with grad_entropy, or both NULL
  const DLTensor* grad_entropy = nullptr;
};

// logprob_backward's rules: logits [N, V] f32/bf16/f16 with dense columns; labels [N] int64;
// lse [N] f32; grad_logprob [N] f32 or NULL; mean_z and grad_entropy [N] f32, both or neither;
// the vectors contiguous; out_grad [N, V] of logits' dtype with dense columns, and, when it is
// logits' own memory, the same row stride (in place); temperature finite and > 0. Label values
// are the plugin's to check (they may live in device memory).
inline LogprobBackwardArgs check_logprob_backward_args(const DLTensor* logits_p, const DLTensor* labels_p,
                                                       const DLTensor* lse_p, const DLTensor* grad_logprob,
                                                       const DLTensor* mean_z, const DLTensor* grad_entropy,
                                                       float temperature, const DLTensor* out_p) {
  LogprobBackwardArgs a;
  const LogitsRows rows = check_logits_rows(logits_p);
  const DLTensor& logits = *logits_p;
  const DLTensor& out = checked(out_p, "out_grad");
  a.n = rows.n;
  a.v = rows.v;
  a.row_stride = rows.row_stride;
  require(out.ndim == 2 && out.shape[0] == a.n && out.shape[1] == a.v,
          "out_grad must be [N, V] = [" + std::to_string(a.n) + ", " + std::to_string(a.v) + "]");
  require(same_dtype(out.dtype, logits.dtype),
          "out_grad dtype " + dtype_name(out.dtype) + " is not logits' " + dtype_name(logits.dtype));
  a.out_row_stride = dense_row_stride(out, "out_grad");
  if (data_ptr(out) == data_ptr(logits))
    require(a.out_row_stride == a.row_stride || a.n <= 1, "out_grad aliases logits with another row stride");
  require(temperature > 0.0f && temperature < INFINITY,
          "temperature must be finite and > 0, got " + std::to_string(temperature));
  auto vector_of = [&](const DLTensor* t, const char* what, bool is_label) {
    const DLTensor& x = checked(t, what);
    const bool dtype_ok =
        is_label ? x.dtype.code == kDLInt && x.dtype.bits == 64 && x.dtype.lanes == 1 : is_f32(x.dtype);
    require(
        x.ndim == 1 && x.shape[0] == a.n && dtype_ok,
        std::string(what) + " must be [N] " + (is_label ? "int64" : "float32") + " with N = " + std::to_string(a.n));
    require_contiguous(x, what);
  };
  vector_of(labels_p, "labels", true);
  vector_of(lse_p, "lse", false);
  if (grad_logprob != nullptr) vector_of(grad_logprob, "grad_logprob", false);
  require((mean_z == nullptr) == (grad_entropy == nullptr), "mean_z and grad_entropy must be given together");
  if (mean_z != nullptr) {
    vector_of(mean_z, "mean_z", false);
    vector_of(grad_entropy, "grad_entropy", false);
  }
  a.grad_logprob = grad_logprob;
  a.mean_z = mean_z;
  a.grad_entropy = grad_entropy;
  return a;
}

// silu_mul / silu_mul_backward operands once their rules hold: every tensor [N, F] of one
// float dtype with dense columns; row strides in elements, in argument order.
struct SiluMulArgs {
  int64_t n = 0, f = 0;
  std::vector<int64_t> row_strides;
};

// silu_mul's (and, with grad_* given, silu_mul_backward's) rules: gate, up and every output
// [N, F] f32/bf16/f16, one dtype, columns dense, rows at any stride >= F.
inline SiluMulArgs check_silu_mul_args(const std::vector<std::pair<const DLTensor*, const char*>>& operands) {
  SiluMulArgs a;
  const DLTensor& first = checked(operands.front().first, operands.front().second);
  require(first.ndim == 2,
          std::string(operands.front().second) + " must be [N, F], got ndim " + std::to_string(first.ndim));
  require(is_float_dtype(first.dtype),
          std::string(operands.front().second) + " dtype " + dtype_name(first.dtype) + " is not f32/bf16/f16");
  a.n = first.shape[0];
  a.f = first.shape[1];
  for (const auto& [t, what] : operands) {
    const DLTensor& x = checked(t, what);
    require(x.ndim == 2 && x.shape[0] == a.n && x.shape[1] == a.f,
            std::string(what) + " must be [N, F] = [" + std::to_string(a.n) + ", " + std::to_string(a.f) + "]");
    require_dtype_of(x, what, first, operands.front().second);
    a.row_strides.push_back(dense_row_stride(x, what));
  }
  return a;
}

// ---- ABI 1.3: the decode-step fusions

// The bytes a tensor's elements occupy, [begin, end) (strides of either sign); empty (begin ==
// end) when it has none. For the no-overlap rules of the fused entries.
struct ByteSpan {
  uintptr_t begin = 0, end = 0;
};
inline ByteSpan byte_span(const DLTensor& t) {
  ByteSpan span;
  if (numel(t) == 0) return span;
  int64_t low = 0, high = 0, compact = 1;  // element offsets of the first and last element
  for (int i = t.ndim - 1; i >= 0; --i) {
    const int64_t stride = t.strides != nullptr ? t.strides[i] : compact;
    const int64_t reach = (t.shape[i] - 1) * stride;
    (reach < 0 ? low : high) += reach;
    compact *= t.shape[i];
  }
  const int64_t elem = int64_t(dtype_size(t.dtype));
  span.begin = reinterpret_cast<uintptr_t>(data_ptr(t)) + uintptr_t(low * elem);
  span.end = reinterpret_cast<uintptr_t>(data_ptr(t)) + uintptr_t((high + 1) * elem);
  return span;
}

// Whether two tensors on one device share a byte (addresses on different devices never do).
inline bool overlaps(const DLTensor& a, const DLTensor& b) {
  if (a.device.device_type != b.device.device_type || a.device.device_id != b.device.device_id) return false;
  const ByteSpan x = byte_span(a), y = byte_span(b);
  return x.begin < x.end && y.begin < y.end && x.begin < y.end && y.begin < x.end;
}

// rms_norm's operands once its rules hold: [n, d] rows, all contiguous.
struct RmsNormArgs {
  int64_t n = 0, d = 0;
};

// rms_norm's rules: x and out [N, D], weight [D], one f32/bf16/f16 dtype, all contiguous; eps >= 0.
inline RmsNormArgs check_rms_norm_args(const DLTensor* x_p, const DLTensor* weight_p, float eps,
                                       const DLTensor* out_p) {
  RmsNormArgs a;
  const DLTensor& x = checked(x_p, "x");
  const DLTensor& w = checked(weight_p, "weight");
  const DLTensor& out = checked(out_p, "out");
  require(x.ndim == 2, "x must be [N, D], got ndim " + std::to_string(x.ndim));
  a.n = x.shape[0];
  a.d = x.shape[1];
  require(w.ndim == 1 && w.shape[0] == a.d, "weight must be [D] with D = " + std::to_string(a.d));
  require(out.ndim == 2 && out.shape[0] == a.n && out.shape[1] == a.d, "out must have x's shape");
  require(is_float_dtype(x.dtype) && same_dtype(x.dtype, w.dtype) && same_dtype(x.dtype, out.dtype),
          "x, weight and out must share one float dtype");
  require(is_contiguous(x) && is_contiguous(w) && is_contiguous(out), "rms_norm needs contiguous tensors");
  require(eps >= 0.0f, "eps must be >= 0");
  return a;
}

// add_rms_norm's operands once its rules hold: [n, d] rows, all contiguous.
struct AddRmsNormArgs {
  int64_t n = 0, d = 0;
};

// add_rms_norm's rules: x, residual and out [N, D], weight [D], one f32/bf16/f16 dtype, all
// contiguous; eps >= 0; out shares no byte with x, residual or weight. x may be residual itself
// (then residual doubles) but not a shifted view of it, whose result would depend on the order
// of the writes.
inline AddRmsNormArgs check_add_rms_norm_args(const DLTensor* x_p, const DLTensor* residual_p, const DLTensor* weight_p,
                                              float eps, const DLTensor* out_p) {
  AddRmsNormArgs a;
  const DLTensor& x = checked(x_p, "x");
  const DLTensor& residual = checked(residual_p, "residual");
  const DLTensor& weight = checked(weight_p, "weight");
  const DLTensor& out = checked(out_p, "out");
  require(x.ndim == 2, "x must be [N, D], got ndim " + std::to_string(x.ndim));
  require(is_float_dtype(x.dtype), "x dtype " + dtype_name(x.dtype) + " is not f32/bf16/f16");
  a.n = x.shape[0];
  a.d = x.shape[1];
  const std::string nd = "[N, D] = [" + std::to_string(a.n) + ", " + std::to_string(a.d) + "]";
  require(residual.ndim == 2 && residual.shape[0] == a.n && residual.shape[1] == a.d, "residual must be " + nd);
  require(out.ndim == 2 && out.shape[0] == a.n && out.shape[1] == a.d, "out must be " + nd);
  require(weight.ndim == 1 && weight.shape[0] == a.d, "weight must be [D] with D = " + std::to_string(a.d));
  for (const auto& [t, what] :
       {std::pair<const DLTensor*, const char*>{&residual, "residual"}, {&weight, "weight"}, {&out, "out"}})
    require_dtype_of(*t, what, x, "x");
  for (const auto& [t, what] :
       {std::pair<const DLTensor*, const char*>{&x, "x"}, {&residual, "residual"}, {&weight, "weight"}, {&out, "out"}})
    require_contiguous(*t, what);
  require(eps >= 0.0f, "eps must be >= 0, got " + std::to_string(eps));
  for (const auto& [t, what] :
       {std::pair<const DLTensor*, const char*>{&x, "x"}, {&residual, "residual"}, {&weight, "weight"}})
    require(!overlaps(out, *t), std::string("out overlaps ") + what + " (out must be a tensor of its own)");
  require(!overlaps(x, residual) || data_ptr(x) == data_ptr(residual), "x partly overlaps residual");
  return a;
}

// rotary_kv_store's operands once its rules hold. Row strides in elements.
struct RotaryKvStoreArgs {
  RotaryArgs rope;  // positions, inv_freq, tokens N, half S/2 (targets unused)
  int64_t q_heads = 0, kv_heads = 0, head_size = 0;
  int64_t q_row_stride = 0, k_row_stride = 0, v_row_stride = 0;
  int64_t num_blocks = 0, block_size = 0;
  int64_t slots() const { return num_blocks * block_size; }  // slot values must be in [0, slots())
};

// Row stride (elements) of a [N, heads, S] operand whose heads and head dims are dense (strides
// [any >= heads * S, S, 1]): the layout of q, k, v as views of one fused [N, (H + 2K) S] projection.
inline int64_t dense_heads_row_stride(const DLTensor& t, const std::string& what) {
  const int64_t n = t.shape[0], heads = t.shape[1], s = t.shape[2];
  if (t.strides == nullptr) return heads * s;
  require((t.strides[2] == 1 || s <= 1) && (t.strides[1] == s || heads <= 1),
          what + " heads and head dims must be dense (strides [*, " + std::to_string(s) + ", 1]), got strides [" +
              std::to_string(t.strides[0]) + ", " + std::to_string(t.strides[1]) + ", " + std::to_string(t.strides[2]) +
              "]");
  const int64_t stride = n <= 1 ? heads * s : t.strides[0];
  require(stride >= heads * s,
          what + " row stride " + std::to_string(stride) + " < heads * S = " + std::to_string(heads * s));
  return stride;
}

// rotary_kv_store's rules: positions [N] int64 and inv_freq [S/2] f32 contiguous, S even; q
// [N, H, S], k and v [N, K, S] with dense heads and head dims (any row stride); slot_mapping [N]
// int64 contiguous; q_out [N, H, S] contiguous; k_cache and v_cache [num_blocks, bs, K, S]
// contiguous, one shape; every float tensor one f32/bf16/f16 dtype; no output shares a byte
// with another output or with any input. Slot values are the plugin's to check (they may live
// in device memory): check_slot_values where they can be read.
inline RotaryKvStoreArgs check_rotary_kv_store_args(const DLTensor* q_p, const DLTensor* k_p, const DLTensor* v_p,
                                                    const DLTensor* positions, const DLTensor* inv_freq,
                                                    const DLTensor* slot_mapping_p, const DLTensor* q_out_p,
                                                    const DLTensor* k_cache_p, const DLTensor* v_cache_p) {
  RotaryKvStoreArgs a;
  check_rope_tables(positions, inv_freq, a.rope);
  const int64_t n = a.rope.tokens;
  const DLTensor& q = checked(q_p, "q");
  const DLTensor& k = checked(k_p, "k");
  const DLTensor& v = checked(v_p, "v");
  const DLTensor& slots = checked(slot_mapping_p, "slot_mapping");
  const DLTensor& q_out = checked(q_out_p, "q_out");
  const DLTensor& k_cache = checked(k_cache_p, "k_cache");
  const DLTensor& v_cache = checked(v_cache_p, "v_cache");
  require(q.ndim == 3, "q must be [N, H, S], got ndim " + std::to_string(q.ndim));
  require(is_float_dtype(q.dtype), "q dtype " + dtype_name(q.dtype) + " is not f32/bf16/f16");
  a.q_heads = q.shape[1];
  a.head_size = q.shape[2];
  require(a.head_size % 2 == 0,
          "head size S = " + std::to_string(a.head_size) + " is odd (RoPE pairs dims j and j + S/2)");
  require(a.head_size == 2 * a.rope.half,
          "head size " + std::to_string(a.head_size) + " is not twice inv_freq's " + std::to_string(a.rope.half));
  require(q.shape[0] == n, "q has " + std::to_string(q.shape[0]) + " tokens, positions " + std::to_string(n));
  require(k.ndim == 3, "k must be [N, K, S], got ndim " + std::to_string(k.ndim));
  a.kv_heads = k.shape[1];
  const std::string nks = "[N, K, S] = [" + std::to_string(n) + ", " + std::to_string(a.kv_heads) + ", " +
                          std::to_string(a.head_size) + "]";
  require(k.shape[0] == n && k.shape[2] == a.head_size, "k must be " + nks);
  require(v.ndim == 3 && v.shape[0] == n && v.shape[1] == a.kv_heads && v.shape[2] == a.head_size, "v must be " + nks);
  require(q_out.ndim == 3 && q_out.shape[0] == n && q_out.shape[1] == a.q_heads && q_out.shape[2] == a.head_size,
          "q_out must have q's shape [N, H, S]");
  require(k_cache.ndim == 4 && k_cache.shape[2] == a.kv_heads && k_cache.shape[3] == a.head_size,
          "k_cache must be [num_blocks, block_size, K, S] with K = " + std::to_string(a.kv_heads) +
              ", S = " + std::to_string(a.head_size));
  require(v_cache.ndim == 4 && std::equal(k_cache.shape, k_cache.shape + 4, v_cache.shape),
          "v_cache must have k_cache's shape");
  a.num_blocks = k_cache.shape[0];
  a.block_size = k_cache.shape[1];
  require(slots.ndim == 1 && slots.shape[0] == n && slots.dtype.code == kDLInt && slots.dtype.bits == 64 &&
              slots.dtype.lanes == 1,
          "slot_mapping must be [N] int64 with N = " + std::to_string(n));
  require_contiguous(slots, "slot_mapping");
  for (const auto& [t, what] : {std::pair<const DLTensor*, const char*>{&k, "k"},
                                {&v, "v"},
                                {&q_out, "q_out"},
                                {&k_cache, "k_cache"},
                                {&v_cache, "v_cache"}})
    require_dtype_of(*t, what, q, "q");
  a.q_row_stride = dense_heads_row_stride(q, "q");
  a.k_row_stride = dense_heads_row_stride(k, "k");
  a.v_row_stride = dense_heads_row_stride(v, "v");
  for (const auto& [t, what] :
       {std::pair<const DLTensor*, const char*>{&q_out, "q_out"}, {&k_cache, "k_cache"}, {&v_cache, "v_cache"}})
    require_contiguous(*t, what);
  // Outputs against every other operand: q, k, v are often views of one buffer, which is fine
  // for inputs; an output inside it (or inside the other outputs) would be read after a write.
  const std::pair<const DLTensor*, const char*> operands[] = {{&q, "q"},
                                                              {&k, "k"},
                                                              {&v, "v"},
                                                              {a.rope.positions, "positions"},
                                                              {a.rope.inv_freq, "inv_freq"},
                                                              {&slots, "slot_mapping"},
                                                              {&q_out, "q_out"},
                                                              {&k_cache, "k_cache"},
                                                              {&v_cache, "v_cache"}};
  for (size_t o = 6; o < 9; ++o)
    for (size_t i = 0; i < 9; ++i)
      if (i != o)
        require(!overlaps(*operands[o].first, *operands[i].first), std::string(operands[o].second) + " overlaps " +
                                                                       operands[i].second +
                                                                       " (outputs must not overlap any operand)");
  return a;
}

// The slot values of rotary_kv_store where the plugin can read them: each in [0, capacity) and
// no two alike (two tokens stored into one cache row would race). Names the first bad token.
inline void check_slot_values(const int64_t* slots, int64_t n, int64_t capacity) {
  for (int64_t i = 0; i < n; ++i)
    require(slots[i] >= 0 && slots[i] < capacity,
            "slot_mapping[" + std::to_string(i) + "] = " + std::to_string(slots[i]) +
                " is outside [0, num_blocks * block_size = " + std::to_string(capacity) + ")");
  std::vector<std::pair<int64_t, int64_t>> sorted;  // (slot, token)
  sorted.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) sorted.emplace_back(slots[i], i);
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i)
    require(sorted[i].first != sorted[i - 1].first,
            "slot_mapping[" + std::to_string(sorted[i].second) + "] = " + std::to_string(sorted[i].first) +
                " repeats slot_mapping[" + std::to_string(sorted[i - 1].second) + "]");
}

}  // namespace verlpp::sdk
