// The SDK's bf16 / fp16 conversions (sdk/half_float.hpp) against LibTorch's c10::BFloat16 and
// c10::Half, an independent implementation: every 16-bit pattern widened, and fp32 values across
// the whole range (random bit patterns, exact ties, subnormal results, the overflow edge) rounded.
#include <catch2/catch.hpp>

#include <verlpp/sdk/half_float.hpp>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace {

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// fp32 inputs: random patterns over every exponent, halfway points between neighbouring 16-bit
// values (ties, to even) and just either side of them, and a few named edges.
std::vector<float> inputs() {
  std::vector<float> v;
  std::mt19937 rng(7);
  for (int i = 0; i < 1 << 20; ++i) v.push_back(from_bits(uint32_t(rng())));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint32_t tie = (h << 16) | 0x8000;  // halfway between bf16 h and h + 1
    for (uint32_t b : {tie - 1, tie, tie + 1}) v.push_back(from_bits(b));
    const float lo = verlpp::sdk::half_to_float(uint16_t(h)), hi = verlpp::sdk::half_to_float(uint16_t(h + 1));
    if (std::isfinite(lo) && std::isfinite(hi) && (h & 0x7fff) != 0x7bff) {
      const float mid = float((double(lo) + double(hi)) / 2);  // exact in fp32
      v.push_back(mid);
      v.push_back(std::nextafter(mid, 0.0f));
      v.push_back(std::nextafter(mid, INFINITY));
    }
  }
  for (float f : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 1e-45f, 3.4e38f,
                  INFINITY, -INFINITY, NAN, -NAN})
    v.push_back(f);
  return v;
}

}  // namespace

TEST_CASE("sdk half_float widens every bf16 and fp16 pattern as c10 does", "[sdk]") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    c10::BFloat16 b;
    b.x = uint16_t(h);
    c10::Half f;
    f.x = uint16_t(h);
    const float want_b = float(b), want_f = float(f);
    const float got_b = verlpp::sdk::bf16_to_float(uint16_t(h)), got_f = verlpp::sdk::half_to_float(uint16_t(h));
    INFO("pattern 0x" << std::hex << h);
    if (std::isnan(want_b))
      CHECK(std::isnan(got_b));
    else
      CHECK(bits_of(got_b) == bits_of(want_b));
    if (std::isnan(want_f))
      CHECK(std::isnan(got_f));
    else
      CHECK(bits_of(got_f) == bits_of(want_f));
  }
}

TEST_CASE("sdk half_float rounds fp32 to bf16 and fp16 to nearest even as c10 does", "[sdk]") {
  size_t bad_b = 0, bad_f = 0, nan_b = 0, nan_f = 0;
  for (float x : inputs()) {
    const uint16_t got_b = verlpp::sdk::float_to_bf16(x), got_f = verlpp::sdk::float_to_half(x);
    const uint16_t want_b = c10::BFloat16(x).x, want_f = c10::Half(x).x;
    if (std::isnan(x)) {
      // Any quiet NaN will do (c10 makes a positive one); the SDK keeps the sign.
      nan_b += !std::isnan(verlpp::sdk::bf16_to_float(got_b));
      nan_f += !std::isnan(verlpp::sdk::half_to_float(got_f));
      continue;
    }
    if (got_b != want_b && bad_b++ == 0)
      FAIL_CHECK("bf16 of " << x << ": 0x" << std::hex << got_b << " vs 0x" << want_b);
    if (got_f != want_f && bad_f++ == 0)
      FAIL_CHECK("fp16 of " << x << ": 0x" << std::hex << got_f << " vs 0x" << want_f);
  }
  CHECK(bad_b == 0);
  CHECK(bad_f == 0);
  CHECK(nan_b == 0);
  CHECK(nan_f == 0);
}

TEST_CASE("sdk half_float round_to_dtype, load_float and store_float follow the dtype", "[sdk]") {
  const DLDataType bf16{kDLBfloat, 16, 1}, f16{kDLFloat, 16, 1}, f32{kDLFloat, 32, 1};
  const float x = 1.0f + 1.0f / 256 + 1.0f / 1024;  // between bf16 steps, an fp16 value
  CHECK(verlpp::sdk::round_to_dtype(bf16, x) == float(c10::BFloat16(x)));
  CHECK(verlpp::sdk::round_to_dtype(f16, x) == x);
  CHECK(verlpp::sdk::round_to_dtype(f32, x) == x);
  uint16_t h[2] = {0, 0};
  verlpp::sdk::store_float(h, bf16, 1, x);
  CHECK(h[1] == c10::BFloat16(x).x);
  CHECK(verlpp::sdk::load_float(h, bf16, 1) == float(c10::BFloat16(x)));
  verlpp::sdk::store_float(h, f16, 0, x);
  CHECK(h[0] == c10::Half(x).x);
}
