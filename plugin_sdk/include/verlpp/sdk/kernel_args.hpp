// Plugin SDK: the argument rules that plugin_abi.h states for kernel-table entries, checked the
// same way by every plugin (cpu_ref, cuda, a vendor's). Only what the ABI itself says is checked
// here (shapes, dtypes, contiguity); where the tensors must live (host memory, one device) and a
// plugin's own limits stay with the plugin. Failures throw INVALID_ARGUMENT naming the operand.
#pragma once

#include <verlpp/sdk/dlpack_util.hpp>

#include <cstdint>
#include <string>
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

}  // namespace verlpp::sdk
