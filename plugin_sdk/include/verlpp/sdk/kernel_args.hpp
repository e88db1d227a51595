// Plugin SDK: the argument rules that plugin_abi.h states for kernel-table entries, checked the
// same way by every plugin (cpu_ref, cuda, a vendor's). Only what the ABI itself says is checked
// here (shapes, dtypes, contiguity); where the tensors must live (host memory, one device) and a
// plugin's own limits stay with the plugin. Failures throw INVALID_ARGUMENT naming the operand.
#pragma once

#include <verlpp/sdk/dlpack_util.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace verlpp::sdk {

inline bool is_f32(DLDataType d) { return d.code == kDLFloat && d.bits == 32 && d.lanes == 1; }

// f32, f16 or bf16: the floating dtypes the kernel table's entries take.
inline bool is_float_dtype(DLDataType d) {
  return d.lanes == 1 && ((d.code == kDLFloat && (d.bits == 32 || d.bits == 16)) || (d.code == kDLBfloat && d.bits == 16));
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
inline RotaryArgs check_rotary_args(DLTensor* q, DLTensor* k, const DLTensor* positions, const DLTensor* inv_freq) {
  RotaryArgs a;
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
    require(is_contiguous(*x), what + " must be contiguous");
    a.targets.push_back(x);
  }
  require(a.targets.size() < 2 || same_dtype(q->dtype, k->dtype), "q and k must share one dtype");
  return a;
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

// The row stride of a [N, V] tensor with dense columns (checked), in elements.
inline int64_t dense_row_stride(const DLTensor& t, const std::string& what) {
  const int64_t n = t.shape[0], v = t.shape[1];
  require(t.strides == nullptr || t.strides[1] == 1 || v == 1, what + " columns must be dense (stride 1)");
  const int64_t stride = t.strides != nullptr ? t.strides[0] : v;
  require(stride >= v || n <= 1, what + " row stride " + std::to_string(stride) + " < V = " + std::to_string(v));
  return stride;
}

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
  const DLTensor& logits = checked(logits_p, "logits");
  const DLTensor& out = checked(out_p, "out_grad");
  require(logits.ndim == 2, "logits must be [N, V], got ndim " + std::to_string(logits.ndim));
  require(is_float_dtype(logits.dtype), "logits dtype " + dtype_name(logits.dtype) + " is not f32/bf16/f16");
  a.n = logits.shape[0];
  a.v = logits.shape[1];
  require(a.v > 0 || a.n == 0, "vocabulary size is 0");
  a.row_stride = dense_row_stride(logits, "logits");
  require(out.ndim == 2 && out.shape[0] == a.n && out.shape[1] == a.v,
          "out_grad must be [N, V] = [" + std::to_string(a.n) + ", " + std::to_string(a.v) + "]");
  require(same_dtype(out.dtype, logits.dtype),
          "out_grad dtype " + dtype_name(out.dtype) + " is not logits' " + dtype_name(logits.dtype));
  a.out_row_stride = dense_row_stride(out, "out_grad");
  if (data_ptr(out) == data_ptr(logits))
    require(a.out_row_stride == a.row_stride || a.n <= 1, "out_grad aliases logits with another row stride");
  require(temperature > 0.0f && temperature < INFINITY, "temperature must be finite and > 0, got " + std::to_string(temperature));
  auto vector_of = [&](const DLTensor* t, const char* what, bool is_label) {
    const DLTensor& x = checked(t, what);
    const bool dtype_ok = is_label ? x.dtype.code == kDLInt && x.dtype.bits == 64 && x.dtype.lanes == 1 : is_f32(x.dtype);
    require(x.ndim == 1 && x.shape[0] == a.n && dtype_ok,
            std::string(what) + " must be [N] " + (is_label ? "int64" : "float32") + " with N = " + std::to_string(a.n));
    require(is_contiguous(x), std::string(what) + " must be contiguous");
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
  require(first.ndim == 2, std::string(operands.front().second) + " must be [N, F], got ndim " + std::to_string(first.ndim));
  require(is_float_dtype(first.dtype), std::string(operands.front().second) + " dtype " + dtype_name(first.dtype) +
                                           " is not f32/bf16/f16");
  a.n = first.shape[0];
  a.f = first.shape[1];
  for (const auto& [t, what] : operands) {
    const DLTensor& x = checked(t, what);
    require(x.ndim == 2 && x.shape[0] == a.n && x.shape[1] == a.f,
            std::string(what) + " must be [N, F] = [" + std::to_string(a.n) + ", " + std::to_string(a.f) + "]");
    require(same_dtype(x.dtype, first.dtype), std::string(what) + " dtype " + dtype_name(x.dtype) + " differs from " +
                                                  operands.front().second + "'s " + dtype_name(first.dtype));
    a.row_strides.push_back(dense_row_stride(x, what));
  }
  return a;
}

}  // namespace verlpp::sdk
