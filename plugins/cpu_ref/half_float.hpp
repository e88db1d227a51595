// cpu_ref: the SDK's fp32 <-> bf16 / fp16 conversions (sdk/half_float.hpp, round to nearest
// even) under the names the reference kernels and the Gloo communicator (which reduces bf16
// through fp32) use. The conformance suite has its own, independent converters on purpose.
#pragma once

#include <verlpp/plugin_abi.h>
#include <verlpp/sdk/half_float.hpp>

#include <cstdint>

namespace verlpp::cpu_ref {

using sdk::bf16_to_float;
using sdk::float_to_bf16;
using sdk::float_to_half;
using sdk::half_to_float;

// Element i of an f32 / f16 / bf16 array at `base` of dtype `d`, widened exactly to fp32.
inline float load(const void* base, DLDataType d, int64_t i) { return sdk::load_float(base, d, i); }
// Stores `v` as element i of such an array, rounded to nearest even.
inline void store(void* base, DLDataType d, int64_t i, float v) { sdk::store_float(base, d, i, v); }

}  // namespace verlpp::cpu_ref
