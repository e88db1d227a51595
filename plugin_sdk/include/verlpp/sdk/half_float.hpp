// Plugin SDK: fp32 <-> bf16 and fp32 <-> fp16 (IEEE binary16) conversions, round to nearest
// even, as LibTorch's at::BFloat16 and at::Half convert. Every kernel contract that says "rounded
// to the dtype" means these roundings (docs/plugin-abi.md, "Kernel contracts"); the conformance
// suite checks 16-bit outputs bit for bit where the contract fixes them, so a plugin computing on
// the host side should use these instead of writing its own. Header-only, no dependencies.
#pragma once

#include <verlpp/plugin_abi.h>

#include <cstdint>
#include <cstring>

namespace verlpp::sdk {

// bf16 bits -> fp32 (exact).
inline float bf16_to_float(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// fp32 -> bf16 bits, round to nearest even; a NaN stays a (quiet) NaN of the same sign, an
// overflow becomes infinity.
inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// fp16 bits -> fp32 (exact, subnormals included).
inline float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise the mantissa
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// fp32 -> fp16 bits, round to nearest even (subnormal results included); a NaN becomes a quiet
// NaN of the same sign, anything at or past 65520 infinity.
inline uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const int32_t exp = int32_t((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return uint16_t(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return uint16_t(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return uint16_t(sign);
    mant |= 0x800000;
    const uint32_t shift = uint32_t(14 - exp);
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = sign | (uint32_t(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // a carry into the exponent is right
  return uint16_t(half);
}

// `v` rounded to float dtype `d` (f32, bf16 or f16) and widened back: a kernel's intermediate
// rounding where its contract has one.
inline float round_to_dtype(DLDataType d, float v) {
  if (d.code == kDLBfloat && d.bits == 16) return bf16_to_float(float_to_bf16(v));
  if (d.code == kDLFloat && d.bits == 16) return half_to_float(float_to_half(v));
  return v;
}

// Element i of an f32 / f16 / bf16 array at `base`, widened exactly to fp32.
inline float load_float(const void* base, DLDataType d, int64_t i) {
  if (d.code == kDLBfloat && d.bits == 16) return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
  if (d.code == kDLFloat && d.bits == 16) return half_to_float(static_cast<const uint16_t*>(base)[i]);
  return static_cast<const float*>(base)[i];
}

// Stores `v` as element i of such an array, rounded to nearest even.
inline void store_float(void* base, DLDataType d, int64_t i, float v) {
  if (d.code == kDLBfloat && d.bits == 16)
    static_cast<uint16_t*>(base)[i] = float_to_bf16(v);
  else if (d.code == kDLFloat && d.bits == 16)
    static_cast<uint16_t*>(base)[i] = float_to_half(v);
  else
    static_cast<float*>(base)[i] = v;
}

}  // namespace verlpp::sdk
