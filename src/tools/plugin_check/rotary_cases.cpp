// verlpp-plugin-check, group "kernels": rotary_embedding (RoPE in place, HF's rotate_half layout)
// against an fp64 reference written here: angle = float(position) * inv_freq[j] in fp32 (the ABI
// fixes this rounding, so large positions are checked too), cos/sin of it in fp64, pairs (j, j + S/2).
// The tolerance allows the output dtype's rounding of cos/sin, products and sum; a wrong layout,
// position or frequency is off by O(1). Its own file: kernel_cases.cpp is near the size limit.
#include "check_context.hpp"

#include <cmath>
#include <cstring>
#include <random>

namespace verlpp::conformance {

// Inverse frequencies as a model would pass them: theta^(-2j/S), the long wavelengths divided
// by 8 (what llama3 / linear scaling do before the kernel sees them).
std::vector<float> inverse_frequencies(int64_t s, double theta) {
  std::vector<float> f(size_t(s / 2));
  for (int64_t j = 0; j < s / 2; ++j) {
    double v = std::pow(theta, -2.0 * double(j) / double(s));
    f[size_t(j)] = float(j >= s / 4 ? v / 8.0 : v);
  }
  return f;
}

// x [n, heads, s] after RoPE, against the reference from the values the kernel saw.
void check_rotated(const std::vector<float>& got, const std::vector<float>& seen, const std::vector<int64_t>& pos,
                   const std::vector<float>& inv_freq, int64_t heads, int64_t s, DLDataType dtype,
                   const std::string& what) {
  const int64_t half = s / 2;
  const double ulp = dtype.code == kDLBfloat ? 1.0 / 128 : dtype.bits == 16 ? 1.0 / 1024 : 0.0;
  Worst worst;
  for (size_t t = 0; t < pos.size(); ++t)
    for (int64_t j = 0; j < half; ++j) {
      const float angle = float(pos[t]) * inv_freq[size_t(j)];  // fp32, as the ABI says
      const double c = std::cos(double(angle)), sn = std::sin(double(angle));
      for (int64_t h = 0; h < heads; ++h) {
        const size_t lo = size_t((int64_t(t) * heads + h) * s + j), hi = lo + size_t(half);
        const double a = seen[lo], b = seen[hi], size = std::fabs(a) + std::fabs(b);
        const double tol = ulp > 0 ? 2 * ulp * size + 1e-6 : 1e-6 * size + 1e-6;
        worst.add(lo, got[lo], a * c - b * sn, tol);
        worst.add(hi, got[hi], b * c + a * sn, tol);
      }
    }
  worst.require(what);
}

namespace {

struct RotaryShape {
  int64_t n, h, kv, s;  // tokens, query heads, KV heads, head size
  DLDataType dtype;
  bool with_q, with_k;
  int64_t max_position;
};

// Values of `dtype` from fp32 (rounded): the raw bytes for the device and the values as seen.
std::vector<uint8_t> encode(const std::vector<float>& v, DLDataType dtype, std::vector<float>& seen) {
  seen = v;
  if (dtype.bits == 32) {
    std::vector<uint8_t> raw(v.size() * 4);
    std::memcpy(raw.data(), v.data(), raw.size());
    return raw;
  }
  std::vector<uint16_t> half(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    half[i] = dtype.code == kDLBfloat ? to_bf16(v[i]) : to_f16(v[i]);
    seen[i] = dtype.code == kDLBfloat ? from_bf16(half[i]) : from_f16(half[i]);
  }
  std::vector<uint8_t> raw(half.size() * 2);
  std::memcpy(raw.data(), half.data(), raw.size());
  return raw;
}

std::vector<float> decode(const DeviceTensor& t, DLDataType dtype) {
  if (dtype.bits == 32) return t.to_host<float>();
  auto raw = t.to_host<uint16_t>();
  std::vector<float> out(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) out[i] = dtype.code == kDLBfloat ? from_bf16(raw[i]) : from_f16(raw[i]);
  return out;
}

void rotary_case(CheckContext& ctx, const RotaryShape& sh) {
  const auto* table = ctx.api().kernels;
  CheckContext::need(table ? reinterpret_cast<const void*>(table->rotary_embedding) : nullptr,
                     "kernel rotary_embedding");
  hw::Device d = ctx.device();
  std::mt19937 rng(uint32_t(sh.n * 1009 + sh.h * 31 + sh.s));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> position(0, sh.max_position);
  std::vector<int64_t> pos(size_t(sh.n));
  for (auto& p : pos) p = position(rng);  // any order, repeats allowed
  pos[0] = 0;                             // the identity rotation
  const std::vector<float> inv_freq = inverse_frequencies(sh.s, 1e6);
  auto values = [&](int64_t heads) {
    std::vector<float> v(size_t(sh.n * heads * sh.s));
    for (auto& x : v) x = normal(rng);
    return v;
  };
  std::vector<float> q_seen, k_seen;
  DeviceTensor qt(d, {sh.n, sh.h, sh.s}, sh.dtype), kt(d, {sh.n, sh.kv, sh.s}, sh.dtype), pt(d, {sh.n}, dl_i64()),
      ft(d, {sh.s / 2}, dl_f32());
  qt.upload(encode(values(sh.h), sh.dtype, q_seen).data());
  kt.upload(encode(values(sh.kv), sh.dtype, k_seen).data());
  pt.upload(pos.data());
  ft.upload(inv_freq.data());
  ctx.expect_ok(table->rotary_embedding(sh.with_q ? &qt.dl() : nullptr, sh.with_k ? &kt.dl() : nullptr, &pt.dl(),
                                        &ft.dl(), nullptr),
                "rotary_embedding");
  std::vector<float> q_got = decode(qt, sh.dtype), k_got = decode(kt, sh.dtype);
  if (sh.with_q)
    check_rotated(q_got, q_seen, pos, inv_freq, sh.h, sh.s, sh.dtype, "q");
  else
    CHECK_THAT(q_got == q_seen, "q was not passed (NULL) but its buffer changed");
  if (sh.with_k)
    check_rotated(k_got, k_seen, pos, inv_freq, sh.kv, sh.s, sh.dtype, "k");
  else
    CHECK_THAT(k_got == k_seen, "k was not passed (NULL) but its buffer changed");
}

}  // namespace

void run_rotary_embedding_cases(CheckContext& ctx) {
  const RotaryShape shapes[] = {
      {1, 1, 1, 2, dl_f32(), true, true, 7},
      {7, 4, 2, 64, dl_f32(), true, true, 40000},     // positions far from 0: fp32 angles up to 4e4 rad
      {13, 14, 2, 128, dl_bf16(), true, true, 4096},  // a Qwen2.5 layer's heads
      {5, 3, 1, 96, dl_f16(), true, true, 2048},
      {9, 6, 3, 18, dl_f32(), true, false, 300},      // odd pair count, k NULL
      {3, 2, 5, 34, dl_bf16(), false, true, 131071},  // more KV heads than query heads, q NULL
  };
  for (const RotaryShape& sh : shapes) {
    std::string name = fmt::format("rotary_embedding N={} H={} K={} S={} {}{}{} max_position={}", sh.n, sh.h, sh.kv,
                                   sh.s, sdk::dtype_name(sh.dtype), sh.with_q ? "" : " (q NULL)",
                                   sh.with_k ? "" : " (k NULL)", sh.max_position);
    ctx.run("kernels", name, [&] { rotary_case(ctx, sh); });
  }
  ctx.run("kernels", "rotary_embedding rejects bad input", [&] {
    const auto* table = ctx.api().kernels;
    CheckContext::need(table ? reinterpret_cast<const void*>(table->rotary_embedding) : nullptr,
                       "kernel rotary_embedding");
    hw::Device d = ctx.device();
    DeviceTensor q(d, {2, 3, 8}, dl_f32()), k(d, {2, 1, 8}, dl_f32()), k_bf16(d, {2, 1, 8}, dl_bf16()),
        pos(d, {2}, dl_i64()), pos_i32(d, {2}, dl_i32()), freq(d, {4}, dl_f32()), freq_short(d, {3}, dl_f32()),
        q_three(d, {3, 3, 8}, dl_f32());
    ctx.expect_error(table->rotary_embedding(&q.dl(), &k.dl(), &pos.dl(), &freq_short.dl(), nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "rotary_embedding(S = 8, inv_freq [3])");
    ctx.expect_error(table->rotary_embedding(&q.dl(), &k.dl(), &pos_i32.dl(), &freq.dl(), nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "rotary_embedding(int32 positions)");
    ctx.expect_error(table->rotary_embedding(&q.dl(), &k_bf16.dl(), &pos.dl(), &freq.dl(), nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "rotary_embedding(f32 q, bf16 k)");
    ctx.expect_error(table->rotary_embedding(&q_three.dl(), &k.dl(), &pos.dl(), &freq.dl(), nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "rotary_embedding(q of 3 tokens, 2 positions)");
    ctx.expect_error(table->rotary_embedding(&q.dl(), &k.dl(), nullptr, &freq.dl(), nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "rotary_embedding(NULL positions)");
    // A strided view (every other head of a [2, 6, 8] buffer) is not the contiguous layout.
    DeviceTensor wide(d, {2, 6, 8}, dl_f32());
    std::vector<int64_t> shape = {2, 3, 8}, strides = {48, 16, 1};
    DLTensor view = wide.dl();
    view.shape = shape.data();
    view.strides = strides.data();
    ctx.expect_error(table->rotary_embedding(&view, nullptr, &pos.dl(), &freq.dl(), nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "rotary_embedding(non-contiguous q)");
  });
}

}  // namespace verlpp::conformance
