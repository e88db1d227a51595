// Plugin SDK: the argument rules of the kernel table's `sample` entry (plugin_abi.h), checked the
// same way by every plugin, and the counter-based draw the reference samplers share. The per-row settings may live in
// device memory, so their values are checked apart (check_sample_row_values) by a plugin that can read them; a plugin
// that cannot documents what out-of-range values do.
#pragma once

#include <verlpp/sdk/kernel_args.hpp>

#include <cmath>
#include <cstdint>
#include <string>

namespace verlpp::sdk {

// splitmix64's finaliser: the hash of the samplers' seed derivations and draws.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The uniform draw in [0, 1) of row seed `seed` at `step`: 53 bits of splitmix64 of both
// (counter-based: a row's draw depends on nothing else). A plugin may draw otherwise; the host's
// reference sampler and cpu_ref draw this way.
inline double uniform_draw(uint64_t seed, uint64_t step) {
  const uint64_t bits = splitmix64(splitmix64(seed) + step * 0x9E3779B97F4A7C15ull);
  return double(bits >> 11) * (1.0 / 9007199254740992.0);
}

// sample's operands once its rules hold.
struct SampleArgs {
  int64_t batch = 0, vocab = 0;  // B, V
};

// `t` is [n] of `dtype`, contiguous.
inline void require_vector(const DLTensor& t, int64_t n, DLDataType dtype, const char* what) {
  require(t.ndim == 1 && t.shape[0] == n && same_dtype(t.dtype, dtype) && is_contiguous(t),
          std::string(what) + " must be [B] " + dtype_name(dtype) + " with B = " + std::to_string(n));
}

// sample's rules: logits [B, V] contiguous, f32 or (from 1.3) bf16 / f16; temperature, top_p [B]
// f32; top_k [B] int32; seeds [B] uint64 (int64 carries the same bits and is accepted too);
// out_tokens [B] int64; out_logprobs [B] f32; all contiguous.
inline SampleArgs check_sample_args(const DLTensor* logits_p, const DLTensor* temperature_p, const DLTensor* top_k_p,
                                    const DLTensor* top_p_p, const DLTensor* seeds_p, const DLTensor* out_tokens_p,
                                    const DLTensor* out_logprobs_p) {
  SampleArgs a;
  const DLTensor& logits = checked(logits_p, "logits");
  require(logits.ndim == 2, "logits must be [B, V], got ndim " + std::to_string(logits.ndim));
  require(is_float_dtype(logits.dtype), "logits dtype " + dtype_name(logits.dtype) + " is not f32/bf16/f16");
  require(is_contiguous(logits), "logits must be contiguous");
  a.batch = logits.shape[0];
  a.vocab = logits.shape[1];
  require(a.vocab > 0 || a.batch == 0, "vocabulary size is 0");
  const DLTensor& seeds = checked(seeds_p, "seeds");
  require_vector(checked(temperature_p, "temperature"), a.batch, {kDLFloat, 32, 1}, "temperature");
  require_vector(checked(top_k_p, "top_k"), a.batch, {kDLInt, 32, 1}, "top_k");
  require_vector(checked(top_p_p, "top_p"), a.batch, {kDLFloat, 32, 1}, "top_p");
  const DLDataType seed_type = seeds.dtype.code == kDLInt ? DLDataType{kDLInt, 64, 1} : DLDataType{kDLUInt, 64, 1};
  require_vector(seeds, a.batch, seed_type, "seeds");
  require_vector(checked(out_tokens_p, "out_tokens"), a.batch, {kDLInt, 64, 1}, "out_tokens");
  require_vector(checked(out_logprobs_p, "out_logprobs"), a.batch, {kDLFloat, 32, 1}, "out_logprobs");
  return a;
}

// The settings of row `r` where the plugin can read them: temperature finite and >= 0 (0 =
// greedy), top_k >= 0 (0 = all), top_p in (0, 1].
inline void check_sample_row_values(int64_t r, float temperature, int32_t top_k, float top_p) {
  const std::string row = " at row " + std::to_string(r);
  require(temperature >= 0.0f && std::isfinite(temperature),
          "temperature " + std::to_string(temperature) + row + " must be finite and >= 0");
  require(top_k >= 0, "top_k " + std::to_string(top_k) + row + " must be >= 0 (0 = all)");
  require(top_p > 0.0f && top_p <= 1.0f, "top_p " + std::to_string(top_p) + row + " must be in (0, 1]");
}

}  // namespace verlpp::sdk
