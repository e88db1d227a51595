// verlpp-plugin-check, group "kernels": add_rms_norm (ABI 1.3), the residual add fused with the
// next RMSNorm, against references written here:
//  - residual: round(float(residual) + float(x)), one fp32 add and one rounding, which leaves
//    nothing to chance: the updated residual must match bit for bit;
//  - out: HF's roundings modelled on that residual in fp64 (normalise, round to the dtype, scale
//    by the weight, round). A plugin's fp32 inverse norm may flip a rare rounding, so half
//    precision allows a few elements off by at most two ulps and the rest exact (a dropped or
//    extra rounding moves a large share of them); f32 is compared at 1e-5;
//  - and, where the plugin offers rms_norm, out must equal rms_norm of the updated residual bit
//    for bit (plugin_abi.h: "exactly as the rms_norm entry computes it").
// Shapes: tiny, odd D, Qwen2.5-0.5B's D = 896 at decode batch 256, x passed as residual itself.
#include "check_context.hpp"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>

namespace verlpp::conformance {
namespace {

struct AddNormShape {
  int64_t n, d;
  DLDataType dtype;
  bool x_is_residual;  // x and residual one tensor: residual = round(2 residual)
};

constexpr float kEps = 1e-6f;

// Throws NotOffered unless the plugin is 1.3+ and its table holds the slot (a 1.2 table ends before it).
void need_slot(const CheckContext& ctx) {
  const auto& table =
      ctx.appended_kernels("add_rms_norm", 3, offsetof(verlpp_kernel_table, add_rms_norm) + sizeof(void*));
  CheckContext::need(reinterpret_cast<const void*>(table.add_rms_norm), "kernel add_rms_norm");
}

// Upper bound of one ulp relative to a value of the dtype, and the spacing of f16's subnormals.
double relative_ulp(DLDataType d) { return d.code == kDLBfloat ? 1.0 / 128 : d.bits == 16 ? 1.0 / 1024 : 0.0; }
double subnormal_step(DLDataType d) { return d.bits == 16 && d.code == kDLFloat ? std::ldexp(1.0, -24) : 0.0; }

std::vector<float> draw(std::mt19937& rng, int64_t count, float mean, float spread) {
  std::normal_distribution<float> normal(mean, spread);
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& x : v) x = normal(rng);
  return v;
}

void check_shape(CheckContext& ctx, const AddNormShape& s) {
  hw::Device d = ctx.device();
  const auto* table = ctx.api().kernels;
  std::mt19937 rng(uint32_t(s.n * 613 + s.d));
  std::vector<double> x_seen, r_seen, w_seen;
  const std::vector<uint8_t> x_raw = encode_as(draw(rng, s.n * s.d, 0.0f, 1.0f), s.dtype, x_seen);
  // The residual stream runs larger than a layer's output, as in a model.
  const std::vector<uint8_t> r_raw = encode_as(draw(rng, s.n * s.d, 0.0f, 3.0f), s.dtype, r_seen);
  const std::vector<uint8_t> w_raw = encode_as(draw(rng, s.d, 1.0f, 0.1f), s.dtype, w_seen);
  DeviceTensor xt(d, {s.n, s.d}, s.dtype), rt(d, {s.n, s.d}, s.dtype), wt(d, {s.d}, s.dtype),
      ot(d, {s.n, s.d}, s.dtype);
  xt.upload(x_raw.data());
  rt.upload(r_raw.data());
  wt.upload(w_raw.data());
  ctx.expect_ok(table->add_rms_norm(s.x_is_residual ? &rt.dl() : &xt.dl(), &rt.dl(), &wt.dl(), kEps, &ot.dl(), nullptr),
                "add_rms_norm");
  const std::vector<uint8_t> got_r = rt.to_host<uint8_t>(), got_out = ot.to_host<uint8_t>();
  if (!s.x_is_residual) CHECK_THAT(xt.to_host<uint8_t>() == x_raw, "add_rms_norm wrote to x (an input)");

  std::vector<double> sum(size_t(s.n * s.d));
  size_t residual_off = 0, first_residual_off = SIZE_MAX;
  for (size_t i = 0; i < sum.size(); ++i) {
    const float added = float(r_seen[i]) + float(s.x_is_residual ? r_seen[i] : x_seen[i]);  // the fp32 add
    sum[i] = round_as(s.dtype, added);
    if (decode_as(got_r, s.dtype, i) != sum[i]) {
      ++residual_off;
      if (first_residual_off == SIZE_MAX) first_residual_off = i;
    }
  }
  CHECK_THAT(residual_off == 0,
             "residual: {} of {} elements are not round(residual + x) (first at {}: got {}, want {})", residual_off,
             sum.size(), first_residual_off, decode_as(got_r, s.dtype, first_residual_off), sum[first_residual_off]);

  const double ulp = relative_ulp(s.dtype);
  Worst worst;
  size_t inexact = 0;
  for (int64_t r = 0; r < s.n; ++r) {
    double squares = 0;
    for (int64_t j = 0; j < s.d; ++j) squares += sum[size_t(r * s.d + j)] * sum[size_t(r * s.d + j)];
    const double inv = 1.0 / std::sqrt(squares / double(s.d) + double(kEps));
    for (int64_t j = 0; j < s.d; ++j) {
      const size_t i = size_t(r * s.d + j);
      const double normed = round_as(s.dtype, sum[i] * inv);  // HF rounds before the weight
      const double want = round_as(s.dtype, w_seen[size_t(j)] * normed);
      const double got = decode_as(got_out, s.dtype, i);
      if (ulp == 0) {
        worst.add(i, got, want, 1e-5 * std::fabs(want) + 1e-6);
        continue;
      }
      inexact += got != want;
      worst.add(i, got, want, 2 * ulp * std::fabs(want) + subnormal_step(s.dtype));
    }
  }
  worst.require("out");
  const size_t allowed = 2 + sum.size() / 500;
  CHECK_THAT(inexact <= allowed,
             "out: {} of {} elements differ from the modelled roundings (at most {} may: an fp32 inverse norm flips a "
             "rare rounding; a dropped or extra rounding flips many)",
             inexact, sum.size(), allowed);

  if (table->rms_norm == nullptr) return;
  DeviceTensor again(d, {s.n, s.d}, s.dtype);
  ctx.expect_ok(table->rms_norm(&rt.dl(), &wt.dl(), kEps, &again.dl(), nullptr), "rms_norm (of the updated residual)");
  const std::vector<uint8_t> want_bits = again.to_host<uint8_t>();
  const size_t elem = size_t(s.dtype.bits / 8);
  for (size_t i = 0; i < sum.size(); ++i)
    CHECK_THAT(
        std::memcmp(got_out.data() + i * elem, want_bits.data() + i * elem, elem) == 0,
        "out[{}] = {} differs from this plugin's rms_norm of the updated residual ({}): add_rms_norm must compute "
        "it exactly as rms_norm does",
        i, decode_as(got_out, s.dtype, i), decode_as(want_bits, s.dtype, i));
}

void bad_input_case(CheckContext& ctx) {
  need_slot(ctx);
  const auto* table = ctx.api().kernels;
  hw::Device d = ctx.device();
  DeviceTensor x(d, {4, 8}, dl_bf16()), res(d, {4, 8}, dl_bf16()), w(d, {8}, dl_bf16()), out(d, {4, 8}, dl_bf16()),
      w_f16(d, {8}, dl_f16()), res_short(d, {3, 8}, dl_bf16()), wide(d, {4, 16}, dl_bf16());
  std::vector<double> seen;
  const std::vector<uint8_t> res_raw = encode_as(std::vector<float>(32, 1.5f), dl_bf16(), seen);
  res.upload(res_raw.data());
  ctx.expect_error(table->add_rms_norm(&x.dl(), &res.dl(), &w_f16.dl(), kEps, &out.dl(), nullptr),
                   VERLPP_STATUS_INVALID_ARGUMENT, "add_rms_norm(bf16 x, f16 weight)");
  ctx.expect_error(table->add_rms_norm(&x.dl(), &res_short.dl(), &w.dl(), kEps, &out.dl(), nullptr),
                   VERLPP_STATUS_INVALID_ARGUMENT, "add_rms_norm(residual [3, 8] for x [4, 8])");
  ctx.expect_error(table->add_rms_norm(&x.dl(), nullptr, &w.dl(), kEps, &out.dl(), nullptr),
                   VERLPP_STATUS_INVALID_ARGUMENT, "add_rms_norm(NULL residual)");
  ctx.expect_error(table->add_rms_norm(&x.dl(), &res.dl(), &w.dl(), kEps, &res.dl(), nullptr),
                   VERLPP_STATUS_INVALID_ARGUMENT, "add_rms_norm(out = residual)");
  ctx.expect_error(table->add_rms_norm(&x.dl(), &res.dl(), &w.dl(), kEps, &x.dl(), nullptr),
                   VERLPP_STATUS_INVALID_ARGUMENT, "add_rms_norm(out = x)");
  ctx.expect_error(table->add_rms_norm(&x.dl(), &res.dl(), &w.dl(), -1.0f, &out.dl(), nullptr),
                   VERLPP_STATUS_INVALID_ARGUMENT, "add_rms_norm(eps -1)");
  // The left half of a [4, 16] buffer: dense columns but not the contiguous layout the entry takes.
  std::vector<int64_t> shape = {4, 8}, strides = {16, 1};
  DLTensor strided = wide.dl();
  strided.shape = shape.data();
  strided.strides = strides.data();
  ctx.expect_error(table->add_rms_norm(&strided, &res.dl(), &w.dl(), kEps, &out.dl(), nullptr),
                   VERLPP_STATUS_INVALID_ARGUMENT, "add_rms_norm(x with row stride 16 for D = 8)");
  CHECK_THAT(res.to_host<uint8_t>() == res_raw, "a refused add_rms_norm call changed residual");
}

}  // namespace

void run_add_rms_norm_cases(CheckContext& ctx) {
  const AddNormShape shapes[] = {{1, 1, dl_f32(), false},      {5, 64, dl_f32(), false},   {17, 899, dl_f32(), false},
                                 {256, 896, dl_bf16(), false}, {1, 896, dl_bf16(), false}, {7, 895, dl_bf16(), false},
                                 {13, 896, dl_f16(), false},   {3, 131, dl_f16(), false},  {6, 896, dl_bf16(), true},
                                 {300, 1536, dl_bf16(), false}};
  for (const AddNormShape& s : shapes)
    ctx.run("kernels",
            fmt::format("add_rms_norm N={} D={} {}{}", s.n, s.d, sdk::dtype_name(s.dtype),
                        s.x_is_residual ? " (x is residual)" : ""),
            [&] {
              need_slot(ctx);
              check_shape(ctx, s);
            });
  ctx.run("kernels", "add_rms_norm rejects bad input", [&] { bad_input_case(ctx); });
}

}  // namespace verlpp::conformance
