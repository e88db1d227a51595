// verlpp-plugin-check, group "kernels": every kernel the plugin offers against reference math
// written here in fp64 loops, on awkward shapes (1, odd, prime, wider than a cache line) and
// strided rows. Reports the worst error and the first index over tolerance.
#include "check_context.hpp"

#include <cmath>
#include <random>

namespace verlpp::conformance {
namespace {

struct Worst {
  double error = 0;
  size_t index = 0;
  size_t first_bad = SIZE_MAX;
  void add(size_t i, double got, double want, double tol) {
    double e = std::fabs(got - want);
    if (!(e <= error)) { error = e; index = i; }  // NaN counts as worst
    if (!(e <= tol) && first_bad == SIZE_MAX) first_bad = i;
  }
  void require(const std::string& what) const {
    CHECK_THAT(first_bad == SIZE_MAX, "{}: first bad index {}, worst |diff| {:.3e} at {}", what, first_bad, error, index);
  }
};

// Host data of `dtype` from fp32 values (rounded), and the values as the kernel sees them.
std::vector<uint16_t> round_half(const std::vector<float>& v, DLDataType dtype, std::vector<float>& seen) {
  std::vector<uint16_t> out(v.size());
  seen.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    out[i] = dtype.code == kDLBfloat ? to_bf16(v[i]) : to_f16(v[i]);
    seen[i] = dtype.code == kDLBfloat ? from_bf16(out[i]) : from_f16(out[i]);
  }
  return out;
}

void logprob_entropy_cases(CheckContext& ctx) {
  hw::Device d = ctx.device();
  const auto* table = ctx.api().kernels;
  struct Shape { int64_t n, v, row_stride; float temperature; DLDataType dtype; bool entropy; };
  const Shape shapes[] = {{1, 1, 1, 1.0f, dl_f32(), true},     {7, 5, 5, 1.0f, dl_f32(), true},
                          {33, 1000, 1000, 0.7f, dl_f32(), true}, {3, 4099, 4111, 1.0f, dl_f32(), false},
                          {17, 513, 513, 1.3f, dl_bf16(), true},  {9, 257, 260, 1.0f, dl_f16(), true}};
  for (const Shape& s : shapes) {
    std::string name = fmt::format("logprob_entropy N={} V={} stride={} T={} {}{}", s.n, s.v, s.row_stride, s.temperature,
                                   sdk::dtype_name(s.dtype), s.entropy ? "" : " (no entropy)");
    ctx.run("kernels", name, [&] {
      CheckContext::need(table ? reinterpret_cast<const void*>(table->logprob_entropy) : nullptr, "kernel logprob_entropy");
      std::mt19937 rng(uint32_t(s.n * 131 + s.v));
      std::normal_distribution<float> normal(0.0f, 3.0f);
      std::vector<float> logits(size_t(s.n * s.row_stride));
      for (auto& x : logits) x = normal(rng);
      std::vector<int64_t> labels(size_t(s.n));
      for (auto& y : labels) y = int64_t(rng() % uint32_t(s.v));
      std::vector<float> seen = logits;
      DeviceTensor lt(d, {s.n * s.row_stride}, s.dtype);
      if (s.dtype.bits == 32) lt.upload(logits.data());
      else lt.upload(round_half(logits, s.dtype, seen).data());
      // A [N, V] view with row stride `row_stride` over the flat buffer.
      std::vector<int64_t> shape = {s.n, s.v}, strides = {s.row_stride, 1};
      DLTensor view = lt.dl();
      view.ndim = 2;
      view.shape = shape.data();
      view.strides = strides.data();
      DeviceTensor yt(d, {s.n}, dl_i64()), lp(d, {s.n}, dl_f32()), ent(d, {s.n}, dl_f32());
      yt.upload(labels.data());
      ctx.expect_ok(table->logprob_entropy(&view, &yt.dl(), s.temperature, &lp.dl(), s.entropy ? &ent.dl() : nullptr, nullptr),
                    "logprob_entropy");
      auto got_lp = lp.to_host<float>();
      auto got_ent = ent.to_host<float>();
      Worst wl, we;
      for (int64_t r = 0; r < s.n; ++r) {
        const float* row = seen.data() + r * s.row_stride;
        double mx = -INFINITY;
        for (int64_t j = 0; j < s.v; ++j) mx = std::max(mx, double(row[j]) / s.temperature);
        double sum = 0, weighted = 0;
        for (int64_t j = 0; j < s.v; ++j) {
          double z = double(row[j]) / s.temperature, e = std::exp(z - mx);
          sum += e;
          weighted += e * z;
        }
        double lse = mx + std::log(sum);
        double want_lp = double(row[labels[size_t(r)]]) / s.temperature - lse;
        double want_ent = lse - weighted / sum;
        wl.add(size_t(r), got_lp[size_t(r)], want_lp, 1e-4 + 1e-5 * std::fabs(want_lp));
        if (s.entropy) we.add(size_t(r), got_ent[size_t(r)], want_ent, 1e-4 + 1e-5 * std::fabs(want_ent));
      }
      wl.require("log-prob");
      we.require("entropy");
    });
  }
  ctx.run("kernels", "logprob_entropy rejects bad input", [&] {
    CheckContext::need(table ? reinterpret_cast<const void*>(table->logprob_entropy) : nullptr, "kernel logprob_entropy");
    DeviceTensor lt(d, {4, 8}, dl_f32()), yt(d, {5}, dl_i64()), lp(d, {4}, dl_f32());
    ctx.expect_error(table->logprob_entropy(&lt.dl(), &yt.dl(), 1.0f, &lp.dl(), nullptr, nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "logprob_entropy(labels [5] for 4 rows)");
    ctx.expect_error(table->logprob_entropy(nullptr, &yt.dl(), 1.0f, &lp.dl(), nullptr, nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "logprob_entropy(NULL logits)");
  });
}

void rms_norm_cases(CheckContext& ctx) {
  hw::Device d = ctx.device();
  const auto* table = ctx.api().kernels;
  struct Shape { int64_t n, dim; DLDataType dtype; };
  const Shape shapes[] = {{1, 1, dl_f32()}, {5, 64, dl_f32()}, {17, 899, dl_f32()}, {13, 896, dl_bf16()}, {3, 131, dl_f16()}};
  for (const Shape& s : shapes) {
    ctx.run("kernels", fmt::format("rms_norm N={} D={} {}", s.n, s.dim, sdk::dtype_name(s.dtype)), [&] {
      CheckContext::need(table ? reinterpret_cast<const void*>(table->rms_norm) : nullptr, "kernel rms_norm");
      std::mt19937 rng(uint32_t(s.n * 7 + s.dim));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> x(size_t(s.n * s.dim)), w(size_t(s.dim));
      for (auto& v : x) v = normal(rng);
      for (auto& v : w) v = 1.0f + 0.1f * normal(rng);
      const float eps = 1e-6f;
      bool half = s.dtype.bits == 16;
      std::vector<float> xs = x, ws = w;
      DeviceTensor xt(d, {s.n, s.dim}, s.dtype), wt(d, {s.dim}, s.dtype), ot(d, {s.n, s.dim}, s.dtype);
      if (half) {
        xt.upload(round_half(x, s.dtype, xs).data());
        wt.upload(round_half(w, s.dtype, ws).data());
      } else {
        xt.upload(x.data());
        wt.upload(w.data());
      }
      ctx.expect_ok(table->rms_norm(&xt.dl(), &wt.dl(), eps, &ot.dl(), nullptr), "rms_norm");
      std::vector<float> got(x.size());
      if (half) {
        auto raw = ot.to_host<uint16_t>();
        for (size_t i = 0; i < raw.size(); ++i) got[i] = s.dtype.code == kDLBfloat ? from_bf16(raw[i]) : from_f16(raw[i]);
      } else {
        got = ot.to_host<float>();
      }
      // Half precision: allow two units in the last place of the output dtype (HF rounds twice).
      double ulp = s.dtype.code == kDLBfloat ? 1.0 / 128 : s.dtype.bits == 16 ? 1.0 / 1024 : 0.0;
      Worst worst;
      for (int64_t r = 0; r < s.n; ++r) {
        double ss = 0;
        for (int64_t j = 0; j < s.dim; ++j) ss += double(xs[size_t(r * s.dim + j)]) * xs[size_t(r * s.dim + j)];
        double inv = 1.0 / std::sqrt(ss / double(s.dim) + eps);
        for (int64_t j = 0; j < s.dim; ++j) {
          size_t i = size_t(r * s.dim + j);
          double want = double(xs[i]) * inv * ws[size_t(j)];
          worst.add(i, got[i], want, 1e-5 + std::fabs(want) * (half ? 2 * ulp : 1e-5));
        }
      }
      worst.require("rms_norm");
    });
  }
}

}  // namespace

void run_kernel_cases(CheckContext& ctx) {
  logprob_entropy_cases(ctx);
  rms_norm_cases(ctx);
  ctx.run("kernels", "table struct_size", [&] {
    CheckContext::need(reinterpret_cast<const void*>(ctx.api().kernels), "kernel table");
    CHECK_THAT(ctx.api().kernels->struct_size >= sizeof(size_t), "kernel table struct_size {}", ctx.api().kernels->struct_size);
  });
}

}  // namespace verlpp::conformance
