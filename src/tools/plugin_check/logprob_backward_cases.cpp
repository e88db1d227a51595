// verlpp-plugin-check, group "kernels": logprob_backward (ABI 1.2) against the formula of
// plugin_abi.h in fp64 loops written here: the log-prob term alone, the entropy term alone and
// both; temperatures 1 and not 1; strided rows; in place (out_grad = logits) and into a
// separate tensor; f32, bf16, f16. lse and mean_z are computed here in fp64 and passed as f32,
// as a trainer passes what its forward saved. The tolerance is the output dtype's rounding of
// the value plus fp32's error in p = exp(z - lse); a wrong sign, label, scale or term is O(1)
// off. Its own file: kernel_cases.cpp is near the size limit.
#include "check_context.hpp"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>

namespace verlpp::conformance {
namespace {

struct BackwardShape {
  int64_t n, v, row_stride;
  float temperature;
  DLDataType dtype;
  bool grad_logprob, grad_entropy, in_place;
};

// Rounding to `dtype`: half an ulp relative to the value (doubled for slack for f32/bf16), and
// an absolute floor for f16, whose values below 6.1e-5 are subnormal (steps of 2^-24).
double relative_rounding(DLDataType dtype) {
  if (dtype.bits == 32) return 1.2e-7;
  return dtype.code == kDLBfloat ? 1.0 / 256.0 : 1.0 / 2048.0;
}
double absolute_rounding(DLDataType dtype) {
  return dtype.bits == 16 && dtype.code == kDLFloat ? std::ldexp(1.0, -24) : 0.0;
}

void check_shape(CheckContext& ctx, const BackwardShape& s) {
  hw::Device d = ctx.device();
  const auto* table = ctx.api().kernels;
  std::mt19937 rng(uint32_t(s.n * 977 + s.v));
  std::normal_distribution<float> normal(0.0f, 3.0f), unit(0.0f, 1.0f);
  std::vector<float> logits(size_t(s.n * s.row_stride));
  for (auto& x : logits) x = normal(rng);
  std::vector<double> seen;
  const std::vector<uint8_t> raw = encode_as(logits, s.dtype, seen);
  std::vector<int64_t> labels(size_t(s.n));
  std::vector<float> lse(size_t(s.n)), mean_z(size_t(s.n)), g_lp(size_t(s.n)), g_ent(size_t(s.n));
  for (int64_t r = 0; r < s.n; ++r) {
    labels[size_t(r)] = int64_t(rng() % uint32_t(s.v));
    const double* row = seen.data() + r * s.row_stride;
    double mx = -INFINITY;
    for (int64_t j = 0; j < s.v; ++j) mx = std::max(mx, double(row[j]) / s.temperature);
    double sum = 0, weighted = 0;
    for (int64_t j = 0; j < s.v; ++j) {
      const double z = double(row[j]) / s.temperature, e = std::exp(z - mx);
      sum += e;
      weighted += e * z;
    }
    lse[size_t(r)] = float(mx + std::log(sum));
    mean_z[size_t(r)] = float(weighted / sum);
    g_lp[size_t(r)] = unit(rng);
    g_ent[size_t(r)] = unit(rng);
  }

  DeviceTensor lt(d, {s.n * s.row_stride}, s.dtype), out(d, {s.n * s.row_stride}, s.dtype);
  lt.upload(raw.data());
  std::vector<int64_t> shape = {s.n, s.v}, strides = {s.row_stride, 1};
  DLTensor in_view = lt.dl(), out_view = (s.in_place ? lt : out).dl();
  for (DLTensor* t : {&in_view, &out_view}) {
    t->ndim = 2;
    t->shape = shape.data();
    t->strides = strides.data();
  }
  DeviceTensor yt(d, {s.n}, dl_i64()), lse_t(d, {s.n}, dl_f32()), mz_t(d, {s.n}, dl_f32()), glp_t(d, {s.n}, dl_f32()),
      gent_t(d, {s.n}, dl_f32());
  yt.upload(labels.data());
  lse_t.upload(lse.data());
  mz_t.upload(mean_z.data());
  glp_t.upload(g_lp.data());
  gent_t.upload(g_ent.data());
  ctx.expect_ok(table->logprob_backward(&in_view, &yt.dl(), &lse_t.dl(), s.grad_logprob ? &glp_t.dl() : nullptr,
                                        s.grad_entropy ? &mz_t.dl() : nullptr, s.grad_entropy ? &gent_t.dl() : nullptr,
                                        s.temperature, &out_view, nullptr),
                "logprob_backward");
  const std::vector<uint8_t> got = (s.in_place ? lt : out).to_host<uint8_t>();
  Worst w;
  for (int64_t r = 0; r < s.n; ++r) {
    const double glp = s.grad_logprob ? g_lp[size_t(r)] : 0.0, ge = s.grad_entropy ? g_ent[size_t(r)] : 0.0;
    for (int64_t j = 0; j < s.v; ++j) {
      const size_t i = size_t(r * s.row_stride + j);
      const double z = double(seen[i]) / s.temperature, p = std::exp(z - double(lse[size_t(r)]));
      const double want =
          (glp * ((j == labels[size_t(r)] ? 1.0 : 0.0) - p) - ge * p * (z - double(mean_z[size_t(r)]))) / s.temperature;
      // fp32's error in p (its exponent is ~|z| + |lse| large) times the terms p multiplies.
      const double p_error = 4e-7 * p * (std::fabs(z) + std::fabs(lse[size_t(r)]) + 1.0);
      const double scale = (std::fabs(glp) + std::fabs(ge) * (std::fabs(z - mean_z[size_t(r)]) + 1.0)) / s.temperature;
      w.add(i, decode_as(got, s.dtype, i), want,
            relative_rounding(s.dtype) * std::fabs(want) + absolute_rounding(s.dtype) + p_error * scale + 1e-12);
    }
  }
  w.require("gradient");
  if (s.in_place) {  // in place, the columns between rows (stride > V) are not the kernel's to touch
    const size_t elem = size_t(s.dtype.bits / 8);
    for (int64_t r = 0; r < s.n; ++r)
      for (int64_t j = s.v; j < s.row_stride; ++j) {
        const size_t i = size_t(r * s.row_stride + j);
        CHECK_THAT(std::memcmp(got.data() + i * elem, raw.data() + i * elem, elem) == 0,
                   "element {} between rows (row {}, column {} >= V) was written", i, r, j);
      }
  }
}

// Throws NotOffered unless the plugin is 1.2+ and its kernel table is long enough to hold the slot
// (a 1.1 table ends before it: reading the slot would read past the plugin's struct).
void need_slot(const CheckContext& ctx) {
  const auto& table =
      ctx.appended_kernels("logprob_backward", 2, offsetof(verlpp_kernel_table, logprob_backward) + sizeof(void*));
  CheckContext::need(reinterpret_cast<const void*>(table.logprob_backward), "kernel logprob_backward");
}

}  // namespace

void run_logprob_backward_cases(CheckContext& ctx) {
  const auto* table = ctx.api().kernels;
  const BackwardShape shapes[] = {
      {1, 1, 1, 1.0f, dl_f32(), true, false, false},       {7, 5, 5, 1.0f, dl_f32(), true, true, false},
      {33, 1000, 1000, 0.7f, dl_f32(), true, true, true},  {3, 4099, 4111, 1.0f, dl_f32(), true, false, true},
      {5, 777, 777, 1.0f, dl_f32(), false, true, false},   {17, 513, 520, 1.3f, dl_bf16(), true, false, true},
      {6, 4101, 4101, 1.0f, dl_bf16(), true, true, false}, {9, 257, 260, 1.0f, dl_f16(), true, true, true},
      {2, 3000, 3003, 0.5f, dl_bf16(), true, true, true}};
  for (const BackwardShape& s : shapes) {
    const std::string name = fmt::format("logprob_backward N={} V={} stride={} T={} {}{}{}{}", s.n, s.v, s.row_stride,
                                         s.temperature, sdk::dtype_name(s.dtype), s.grad_logprob ? " +logprob" : "",
                                         s.grad_entropy ? " +entropy" : "", s.in_place ? " in place" : "");
    ctx.run("kernels", name, [&] {
      need_slot(ctx);
      check_shape(ctx, s);
    });
  }
  ctx.run("kernels", "logprob_backward rejects bad input", [&] {
    need_slot(ctx);
    hw::Device d = ctx.device();
    DeviceTensor lt(d, {4, 8}, dl_f32()), half(d, {4, 8}, dl_f16()), yt(d, {4}, dl_i64()), y5(d, {5}, dl_i64()),
        lse(d, {4}, dl_f32()), g(d, {4}, dl_f32());
    ctx.expect_error(
        table->logprob_backward(&lt.dl(), &y5.dl(), &lse.dl(), &g.dl(), nullptr, nullptr, 1.0f, &lt.dl(), nullptr),
        VERLPP_STATUS_INVALID_ARGUMENT, "logprob_backward(labels [5] for 4 rows)");
    ctx.expect_error(
        table->logprob_backward(&lt.dl(), &yt.dl(), &lse.dl(), &g.dl(), nullptr, nullptr, 1.0f, &half.dl(), nullptr),
        VERLPP_STATUS_INVALID_ARGUMENT, "logprob_backward(f16 out_grad for f32 logits)");
    ctx.expect_error(
        table->logprob_backward(&lt.dl(), &yt.dl(), &lse.dl(), &g.dl(), &g.dl(), nullptr, 1.0f, &lt.dl(), nullptr),
        VERLPP_STATUS_INVALID_ARGUMENT, "logprob_backward(mean_z without grad_entropy)");
    ctx.expect_error(
        table->logprob_backward(&lt.dl(), &yt.dl(), nullptr, &g.dl(), nullptr, nullptr, 1.0f, &lt.dl(), nullptr),
        VERLPP_STATUS_INVALID_ARGUMENT, "logprob_backward(NULL lse)");
    ctx.expect_error(
        table->logprob_backward(&lt.dl(), &yt.dl(), &lse.dl(), &g.dl(), nullptr, nullptr, 0.0f, &lt.dl(), nullptr),
        VERLPP_STATUS_INVALID_ARGUMENT, "logprob_backward(temperature 0)");
  });
}

}  // namespace verlpp::conformance
