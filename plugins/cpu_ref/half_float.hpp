// cpu_ref: fp32 <-> bf16 / fp16 conversions (round to nearest even), shared by the reference
// kernels and the Gloo communicator (which reduces bf16 through fp32). The conformance suite
// has its own, independent converters on purpose.
#pragma once

#include <verlpp/plugin_abi.h>

#include <cstdint>

namespace verlpp::cpu_ref {

float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);

// Element i of an f32 / f16 / bf16 array at `base` of dtype `d`, widened exactly to fp32.
float load(const void* base, DLDataType d, int64_t i);
// Stores `v` as element i of such an array, rounded to nearest even.
void store(void* base, DLDataType d, int64_t i, float v);

}  // namespace verlpp::cpu_ref
