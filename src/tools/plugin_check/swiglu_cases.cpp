// verlpp-plugin-check, group "kernels": silu_mul and silu_mul_backward (ABI 1.2), SwiGLU's
// product and its gradient, against the formulas of plugin_abi.h written here with the same
// roundings to the dtype (in fp64 between them). Shapes: tiny, odd (scalar paths), Qwen's 4864
// columns, and gate/up as the two halves of one [N, 2F] tensor (strided rows). 16-bit out and
// grad_up are checked bit for bit (a product of two 16-bit values rounded once: a plugin that
// skips round(silu) is one step off in about a quarter of them); f32 outputs and grad_gate get an
// ulp and a half of the dtype per rounding the value passes through; a wrong formula is far off.
#include "check_context.hpp"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>

namespace verlpp::conformance {
namespace {

struct SwigluShape {
  int64_t n, f;
  DLDataType dtype;
  bool halves;  // gate, up (and grad_gate, grad_up) as the halves of one [N, 2F] buffer
};

double half_ulp(DLDataType d) { return d.bits == 32 ? 6e-8 : d.code == kDLBfloat ? 1.0 / 512.0 : 1.0 / 4096.0; }
double floor_of(DLDataType d) { return d.bits == 16 && d.code == kDLFloat ? std::ldexp(1.0, -24) : 1e-30; }

// A [N, F] view at column offset `column` of a buffer whose rows are `stride` long.
DLTensor view_of(DeviceTensor& t, std::vector<int64_t>& shape, std::vector<int64_t>& strides, int64_t column) {
  DLTensor v = t.dl();
  v.ndim = 2;
  v.shape = shape.data();
  v.strides = strides.data();
  v.byte_offset += uint64_t(column) * (t.dl().dtype.bits / 8);
  return v;
}

void need_slots(const CheckContext& ctx) {
  const auto& table =
      ctx.appended_kernels("silu_mul", 2, offsetof(verlpp_kernel_table, silu_mul_backward) + sizeof(void*));
  CheckContext::need(reinterpret_cast<const void*>(table.silu_mul), "kernel silu_mul");
  CheckContext::need(reinterpret_cast<const void*>(table.silu_mul_backward), "kernel silu_mul_backward");
}

void check_shape(CheckContext& ctx, const SwigluShape& s) {
  hw::Device d = ctx.device();
  const auto* table = ctx.api().kernels;
  const int64_t stride = s.halves ? 2 * s.f : s.f;  // gate and up share one buffer when halves
  std::mt19937 rng(uint32_t(s.n * 31 + s.f));
  std::normal_distribution<float> normal(0.0f, 2.5f);
  auto draw = [&](int64_t count) {
    std::vector<float> v(static_cast<size_t>(count));
    for (auto& x : v) x = normal(rng);
    return v;
  };
  std::vector<double> gu_seen, up_seen, dy_seen;
  const std::vector<uint8_t> gu_raw = encode_as(draw(s.n * stride), s.dtype, gu_seen);  // gate (and up, when halves)
  const std::vector<uint8_t> up_raw = encode_as(draw(s.n * s.f), s.dtype, up_seen);
  const std::vector<uint8_t> dy_raw = encode_as(draw(s.n * s.f), s.dtype, dy_seen);
  DeviceTensor gu(d, {s.n * stride}, s.dtype), upt(d, {s.n * s.f}, s.dtype), dyt(d, {s.n * s.f}, s.dtype);
  DeviceTensor out(d, {s.n * s.f}, s.dtype), grads(d, {s.n * stride}, s.dtype), grad_up_t(d, {s.n * s.f}, s.dtype);
  gu.upload(gu_raw.data());
  upt.upload(up_raw.data());
  dyt.upload(dy_raw.data());
  std::vector<int64_t> shape = {s.n, s.f}, wide = {stride, 1}, dense = {s.f, 1};
  DLTensor gate = view_of(gu, shape, wide, 0);
  DLTensor up = s.halves ? view_of(gu, shape, wide, s.f) : view_of(upt, shape, dense, 0);
  DLTensor o = view_of(out, shape, dense, 0), dy = view_of(dyt, shape, dense, 0);
  DLTensor dg = view_of(grads, shape, wide, 0);
  DLTensor du = s.halves ? view_of(grads, shape, wide, s.f) : view_of(grad_up_t, shape, dense, 0);
  ctx.expect_ok(table->silu_mul(&gate, &up, &o, nullptr), "silu_mul");
  ctx.expect_ok(table->silu_mul_backward(&gate, &up, &dy, &dg, &du, nullptr), "silu_mul_backward");
  const std::vector<uint8_t> got_out = out.to_host<uint8_t>(), got_grads = grads.to_host<uint8_t>(),
                             got_du = grad_up_t.to_host<uint8_t>();
  Worst w_out, w_dg, w_du;
  // 16-bit out and grad_up are products of two 16-bit values (exact in fp32) rounded once, so
  // the contract fixes their bits: the only freedom is silu's fp32 math (a few fp32 ulps), which
  // may move round(silu) to its neighbour right at a rounding boundary.
  Exact e_out, e_du;
  const bool half = s.dtype.bits == 16;
  const double u = half_ulp(s.dtype), fl = floor_of(s.dtype), fp32_slack = 6e-7;
  for (int64_t r = 0; r < s.n; ++r)
    for (int64_t j = 0; j < s.f; ++j) {
      const double x = gu_seen[size_t(r * stride + j)];
      const double up_v = s.halves ? gu_seen[size_t(r * stride + s.f + j)] : up_seen[size_t(r * s.f + j)];
      const double g = dy_seen[size_t(r * s.f + j)];
      const double sig = 1.0 / (1.0 + std::exp(-x));
      const double silu = round_as(s.dtype, x * sig);
      const double want_out = silu * up_v;
      const double grad_s = round_as(s.dtype, g * up_v);
      const double want_dg = grad_s * sig * (1.0 + x * (1.0 - sig));
      const double want_du = g * silu;
      const size_t i = size_t(r * s.f + j), iw = size_t(r * stride + j), iu = size_t(r * stride + s.f + j);
      const double du_value = s.halves ? decode_as(got_grads, s.dtype, iu) : decode_as(got_du, s.dtype, i);
      if (half) {
        const double silu_lo = round_as(s.dtype, x * sig * (1 - fp32_slack));
        const double silu_hi = round_as(s.dtype, x * sig * (1 + fp32_slack));
        e_out.add(i, decode_as(got_out, s.dtype, i), round_as(s.dtype, silu * up_v),
                  round_as(s.dtype, (silu == silu_lo ? silu_hi : silu_lo) * up_v));
        e_du.add(i, du_value, round_as(s.dtype, silu * g),
                 round_as(s.dtype, (silu == silu_lo ? silu_hi : silu_lo) * g));
      }
      // Roundings passed through: silu then the product (forward, grad_up); grad_s then the product (grad_gate).
      if (!half)
        w_out.add(i, decode_as(got_out, s.dtype, i), want_out,
                  3 * u * (std::fabs(want_out) + std::fabs(silu * up_v)) + fl);
      // Plus the fp32 math inside: 1 - sig cancels for large x, so sig's own rounding (~6e-8)
      // reaches the result as |grad_s| sig |x| 6e-8 (the formula autograd uses, cancellation included).
      const double fp32_math = 4 * 6e-8 * std::fabs(grad_s) * sig * (std::fabs(x) + 1.0);
      w_dg.add(i, decode_as(got_grads, s.dtype, iw), want_dg, 3 * u * 2 * std::fabs(want_dg) + fp32_math + 2 * fl);
      if (!half) w_du.add(i, du_value, want_du, 3 * u * 2 * std::fabs(want_du) + 2 * fl);
    }
  e_out.require("silu_mul out", "round(round(silu(gate)) * up)");
  w_out.require("silu_mul out");
  w_dg.require("silu_mul_backward grad_gate");
  e_du.require("silu_mul_backward grad_up", "round(grad_out * round(silu(gate)))");
  w_du.require("silu_mul_backward grad_up");
}

}  // namespace

// The shapes check both kernels (the backward's inputs are the forward's); they count as
// silu_mul's cases, and silu_mul_backward has its refusals of its own.
void run_silu_mul_cases(CheckContext& ctx) {
  const SwigluShape shapes[] = {{1, 1, dl_f32(), false},    {7, 13, dl_f32(), false},   {33, 4864, dl_bf16(), false},
                                {12, 896, dl_bf16(), true}, {5, 257, dl_f16(), true},   {9, 100, dl_f32(), true},
                                {3, 4864, dl_f16(), false}, {64, 4864, dl_bf16(), true}};
  for (const SwigluShape& s : shapes) {
    ctx.run("kernels",
            fmt::format("silu_mul (+ backward) N={} F={} {}{}", s.n, s.f, sdk::dtype_name(s.dtype),
                        s.halves ? " (halves of [N, 2F])" : ""),
            [&] {
              need_slots(ctx);
              check_shape(ctx, s);
            });
  }
  ctx.run("kernels", "silu_mul rejects bad input", [&] {
    need_slots(ctx);
    const auto* table = ctx.api().kernels;
    hw::Device d = ctx.device();
    DeviceTensor a(d, {4, 8}, dl_f32()), b(d, {4, 8}, dl_f32()), half(d, {4, 8}, dl_f16()), wrong(d, {4, 7}, dl_f32());
    ctx.expect_error(table->silu_mul(&a.dl(), &half.dl(), &b.dl(), nullptr), VERLPP_STATUS_INVALID_ARGUMENT,
                     "silu_mul(f32 gate, f16 up)");
    ctx.expect_error(table->silu_mul(&a.dl(), &b.dl(), &wrong.dl(), nullptr), VERLPP_STATUS_INVALID_ARGUMENT,
                     "silu_mul(out [4, 7] for [4, 8])");
  });
}

void run_silu_mul_backward_cases(CheckContext& ctx) {
  ctx.run("kernels", "silu_mul_backward rejects bad input", [&] {
    need_slots(ctx);
    const auto* table = ctx.api().kernels;
    hw::Device d = ctx.device();
    DeviceTensor a(d, {4, 8}, dl_f32()), b(d, {4, 8}, dl_f32()), half(d, {4, 8}, dl_f16());
    ctx.expect_error(table->silu_mul_backward(&a.dl(), &b.dl(), nullptr, &a.dl(), &b.dl(), nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "silu_mul_backward(NULL grad_out)");
    ctx.expect_error(table->silu_mul_backward(&a.dl(), &b.dl(), &half.dl(), &a.dl(), &b.dl(), nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "silu_mul_backward(f16 grad_out for f32 gate)");
  });
}

}  // namespace verlpp::conformance
