// verlpp-plugin-check, group "kernels": rms_norm against HF's RMSNorm in fp64 loops (normalised,
// rounded to the dtype, times the weight), on shapes 1, odd and prime in f32/bf16/f16; a
// row-strided x, which the contiguous-only contract lets a plugin refuse but never read as
// dense; and every kind of bad argument refused, the first calls safe for a plugin that checks
// nothing (so a missing check fails the case instead of crashing the suite).
#include "check_context.hpp"

#include <cmath>
#include <random>

namespace verlpp::conformance {
void run_rms_norm_cases(CheckContext& ctx) {
  hw::Device d = ctx.device();
  const auto* table = ctx.api().kernels;
  struct Shape {
    int64_t n, dim;
    DLDataType dtype;
  };
  const Shape shapes[] = {
      {1, 1, dl_f32()}, {5, 64, dl_f32()}, {17, 899, dl_f32()}, {13, 896, dl_bf16()}, {3, 131, dl_f16()}};
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
        for (size_t i = 0; i < raw.size(); ++i)
          got[i] = s.dtype.code == kDLBfloat ? from_bf16(raw[i]) : from_f16(raw[i]);
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
  // The contract wants contiguous tensors: a strided x must be refused (INVALID_ARGUMENT) or
  // normalised as its strides say, never read as if it were dense.
  ctx.run("kernels", "rms_norm with row-strided x is refused or honoured", [&] {
    CheckContext::need(table ? reinterpret_cast<const void*>(table->rms_norm) : nullptr, "kernel rms_norm");
    const int64_t n = 5, dim = 24, stride = 40;
    std::vector<float> x(size_t(n * stride)), w(size_t(dim), 1.0f);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = float(int64_t(i % 17) - 8) * 0.25f + (i % size_t(stride) >= size_t(dim) ? 50.0f : 0.0f);
    DeviceTensor xt(d, {n * stride}, dl_f32()), wt(d, {dim}, dl_f32()), ot(d, {n, dim}, dl_f32());
    xt.upload(x.data());
    wt.upload(w.data());
    std::vector<int64_t> shape = {n, dim}, strides = {stride, 1};
    DLTensor view = xt.dl();
    view.ndim = 2;
    view.shape = shape.data();
    view.strides = strides.data();
    verlpp_error* e = table->rms_norm(&view, &wt.dl(), 1e-6f, &ot.dl(), nullptr);
    if (e != nullptr) {
      ctx.expect_error(e, VERLPP_STATUS_INVALID_ARGUMENT, "rms_norm(x [5, 24] with row stride 40)");
      return;
    }
    const std::vector<float> got = ot.to_host<float>();
    Worst worst;
    for (int64_t r = 0; r < n; ++r) {
      double ss = 0;
      for (int64_t j = 0; j < dim; ++j) ss += double(x[size_t(r * stride + j)]) * x[size_t(r * stride + j)];
      const double inv = 1.0 / std::sqrt(ss / double(dim) + 1e-6);
      for (int64_t j = 0; j < dim; ++j) {
        const double want = double(x[size_t(r * stride + j)]) * inv;
        worst.add(size_t(r * dim + j), got[size_t(r * dim + j)], want, 1e-5 + 1e-5 * std::fabs(want));
      }
    }
    worst.require("rms_norm of x [5, 24] with row stride 40 (accepted, so its strides must be honoured)");
  });
  // Every mismatch is its own call, the first ones safe for a plugin that reads without checking
  // (its reads stay inside the buffers), so a missing check fails here instead of crashing.
  ctx.run("kernels", "rms_norm rejects bad input", [&] {
    CheckContext::need(table ? reinterpret_cast<const void*>(table->rms_norm) : nullptr, "kernel rms_norm");
    const int32_t bad = VERLPP_STATUS_INVALID_ARGUMENT;
    DeviceTensor x(d, {4, 8}, dl_f32()), w(d, {8}, dl_f32()), out(d, {4, 8}, dl_f32()), w9(d, {9}, dl_f32()),
        out5(d, {5, 8}, dl_f32()), xh(d, {4, 8}, dl_f16()), x3(d, {4, 2, 4}, dl_f32()), xi(d, {4, 8}, dl_i32());
    ctx.expect_error(table->rms_norm(&x.dl(), &w9.dl(), 1e-6f, &out.dl(), nullptr), bad,
                     "rms_norm(weight [9] for D = 8)");
    ctx.expect_error(table->rms_norm(&x.dl(), &w.dl(), 1e-6f, &out5.dl(), nullptr), bad,
                     "rms_norm(out [5, 8] for x [4, 8])");
    ctx.expect_error(table->rms_norm(&xh.dl(), &w.dl(), 1e-6f, &out.dl(), nullptr), bad,
                     "rms_norm(f16 x, f32 weight and out)");
    ctx.expect_error(table->rms_norm(&xi.dl(), &w.dl(), 1e-6f, &out.dl(), nullptr), bad, "rms_norm(int32 x)");
    ctx.expect_error(table->rms_norm(&x3.dl(), &w.dl(), 1e-6f, &out.dl(), nullptr), bad, "rms_norm(x [4, 2, 4])");
    ctx.expect_error(table->rms_norm(&x.dl(), &w.dl(), -1.0f, &out.dl(), nullptr), bad, "rms_norm(eps -1)");
    ctx.expect_error(table->rms_norm(nullptr, &w.dl(), 1e-6f, &out.dl(), nullptr), bad, "rms_norm(NULL x)");
    ctx.expect_error(table->rms_norm(&x.dl(), nullptr, 1e-6f, &out.dl(), nullptr), bad, "rms_norm(NULL weight)");
    ctx.expect_error(table->rms_norm(&x.dl(), &w.dl(), 1e-6f, nullptr, nullptr), bad, "rms_norm(NULL out)");
  });
}

}  // namespace verlpp::conformance
