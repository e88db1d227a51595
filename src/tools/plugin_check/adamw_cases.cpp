// verlpp-plugin-check, group "kernels": adamw_update (ABI 1.4), one AdamW update of many
// tensors, against plugin_abi.h's formula evaluated in fp64 from the values the kernel read.
// Lists of 70 tensors (more than one launch's worth in the cuda plugin), sizes from 1 to a few
// tiles with odd tails, tensors at odd element offsets in a shared buffer (no vector access
// fits), each gradient and copy dtype, a clipping factor, a later step with non-zero moments,
// and a skipped step (a non-finite factor writes nothing). Tolerances: a few fp32 roundings of
// the magnitudes each result passes through (plugin_abi.h lets a plugin fuse multiply-adds); the
// 16-bit copies must be exactly the plugin's own fp32 result rounded.
#include "check_context.hpp"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>

namespace verlpp::conformance {
namespace {

void need_slot(const CheckContext& ctx) {
  const auto& table =
      ctx.appended_kernels("adamw_update", 4, offsetof(verlpp_kernel_table, adamw_update) + sizeof(void*));
  CheckContext::need(reinterpret_cast<const void*>(table.adamw_update), "kernel adamw_update");
}

verlpp_adamw_options options_at(int64_t step) {
  verlpp_adamw_options o{};
  o.struct_size = sizeof(o);
  o.lr = 3e-3;
  o.beta1 = 0.9;
  o.beta2 = 0.999;
  o.eps = 1e-8;
  o.weight_decay = 0.01;
  o.step = step;
  return o;
}

struct AdamwCase {
  DLDataType grad_dtype;
  bool with_copies;
  DLDataType copy_dtype;
  bool offsets;  // every tensor at an odd element offset of one buffer per list
  float scale;   // NaN: no grad_scale tensor (scale 1)
  int64_t step;  // > 1: the moments start non-zero
};

// `count` tensors of `sizes` laid out in one buffer per list (at odd element offsets when
// `offsets`), as DLTensor views.
struct TensorList {
  DeviceTensor buffer;
  std::vector<int64_t> starts;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DLTensor> views;
  TensorList(const hw::Device& d, const std::vector<int64_t>& sizes, DLDataType dtype, bool offsets)
      : buffer(d, {total(sizes, offsets)}, dtype) {
    int64_t at = 0;
    for (int64_t n : sizes) {
      at += offsets ? 1 + (at % 2 == 0 ? 1 : 0) : 0;  // odd starts
      starts.push_back(at);
      shapes.push_back({n});
      at += n;
    }
    for (size_t t = 0; t < sizes.size(); ++t) {
      DLTensor v = buffer.dl();
      v.ndim = 1;
      v.shape = shapes[t].data();
      v.strides = nullptr;
      v.byte_offset += uint64_t(starts[t]) * (dtype.bits / 8);
      views.push_back(v);
    }
  }
  static int64_t total(const std::vector<int64_t>& sizes, bool offsets) {
    int64_t n = 0;
    for (int64_t s : sizes) n += s + (offsets ? 2 : 0);
    return n;
  }
  std::vector<DLTensor*> pointers() {
    std::vector<DLTensor*> p;
    for (auto& v : views) p.push_back(&v);
    return p;
  }
};

std::vector<int64_t> case_sizes() {
  std::vector<int64_t> sizes;
  for (int t = 0; t < 70; ++t) sizes.push_back(t % 7 == 0 ? 4096 * 2 + 5 : t % 5 == 0 ? 4096 : 1 + (t * 37) % 300);
  return sizes;
}

void check_case(CheckContext& ctx, const AdamwCase& c) {
  hw::Device d = ctx.device();
  const auto* table = ctx.api().kernels;
  const std::vector<int64_t> sizes = case_sizes();
  TensorList params(d, sizes, dl_f32(), c.offsets), m(d, sizes, dl_f32(), c.offsets), v(d, sizes, dl_f32(), c.offsets);
  TensorList grads(d, sizes, c.grad_dtype, c.offsets);
  TensorList copies(d, sizes, c.copy_dtype, c.offsets);
  const size_t n = size_t(params.buffer.bytes() / 4);
  std::mt19937 rng(uint32_t(c.step * 7 + (c.offsets ? 1 : 0) + c.grad_dtype.bits));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p0(n), m0(n, 0.0f), v0(n, 0.0f), graw(n);
  for (size_t i = 0; i < n; ++i) {
    p0[i] = normal(rng) * 0.5f;
    graw[i] = normal(rng) * (i % 11 == 0 ? 1e-3f : 0.2f);
    if (c.step > 1) {
      m0[i] = normal(rng) * 0.05f;
      v0[i] = std::fabs(normal(rng)) * 1e-3f;
    }
  }
  std::vector<double> g_seen;
  const std::vector<uint8_t> g_raw = encode_as(graw, c.grad_dtype, g_seen);
  params.buffer.upload(p0.data());
  m.buffer.upload(m0.data());
  v.buffer.upload(v0.data());
  grads.buffer.upload(g_raw.data());
  const std::vector<uint8_t> copies_before(copies.buffer.bytes(), 0xA5);
  copies.buffer.upload(copies_before.data());
  DeviceTensor scale_t(d, {1}, dl_f32());
  const bool has_scale = !std::isnan(c.scale);
  scale_t.upload(&c.scale);
  const verlpp_adamw_options o = options_at(c.step);
  std::vector<DLTensor*> pp = params.pointers(), mp = m.pointers(), vp = v.pointers(), gp = grads.pointers(),
                         cp = copies.pointers();
  std::vector<const DLTensor*> gc(gp.begin(), gp.end());
  ctx.expect_ok(
      table->adamw_update(int32_t(sizes.size()), pp.data(), gc.data(), mp.data(), vp.data(),
                          c.with_copies ? cp.data() : nullptr, &o, has_scale ? &scale_t.dl() : nullptr, nullptr),
      "adamw_update");
  const std::vector<float> p1 = params.buffer.to_host<float>(), m1 = m.buffer.to_host<float>(),
                           v1 = v.buffer.to_host<float>();
  const std::vector<uint8_t> c1 = copies.buffer.to_host<uint8_t>();
  const double scale = has_scale ? double(c.scale) : 1.0;
  const double bc1 = 1.0 - std::pow(o.beta1, double(o.step)), bc2s = std::sqrt(1.0 - std::pow(o.beta2, double(o.step)));
  const double step_size = o.lr / bc1, u = std::ldexp(1.0, -24);
  Worst wp, wm, wv, wc;
  for (size_t t = 0; t < sizes.size(); ++t)
    for (int64_t k = 0; k < sizes[t]; ++k) {
      const size_t i = size_t(params.starts[t] + k);
      const double g = g_seen[i] * scale, pm = m0[i], pv = v0[i], pp0 = p0[i];
      const double want_m = pm + (1.0 - o.beta1) * (g - pm);
      const double want_v = o.beta2 * pv + (1.0 - o.beta2) * g * g;
      const double decayed = pp0 - o.lr * o.weight_decay * pp0;
      const double denom = std::sqrt(want_v) / bc2s + o.eps;
      const double update = step_size * want_m / denom;
      const double want_p = decayed - update;
      const double tol_m = 8 * u * (std::fabs(pm) + std::fabs(g) + std::fabs(want_m)) + 1e-30;
      wm.add(i, m1[i], want_m, tol_m);
      wv.add(i, v1[i], want_v, 8 * u * want_v + 1e-37);
      // m's own error carried through the division, plus a few roundings of each term.
      wp.add(i, p1[i], want_p, 8 * u * (std::fabs(pp0) + std::fabs(update)) + step_size * tol_m / denom + 1e-30);
      if (c.with_copies) wc.add(i, decode_as(c1, c.copy_dtype, i), round_as(c.copy_dtype, double(p1[i])), 0.0);
    }
  wp.require("params");
  wm.require("exp_avg");
  wv.require("exp_avg_sq");
  if (c.with_copies) wc.require("copies (the plugin's own fp32 result, rounded)");
  // Elements between the tensors (the odd offsets) are nobody's: they must be untouched.
  if (c.offsets)
    for (size_t i = 0; i < n; ++i) {
      bool inside = false;
      for (size_t t = 0; t < sizes.size() && !inside; ++t)
        inside = int64_t(i) >= params.starts[t] && int64_t(i) < params.starts[t] + sizes[t];
      if (!inside)
        CHECK_THAT(p1[i] == p0[i] && m1[i] == m0[i] && v1[i] == v0[i], "element {} between tensors was written", i);
    }
}

void check_skip(CheckContext& ctx, float scale) {
  hw::Device d = ctx.device();
  const auto* table = ctx.api().kernels;
  const std::vector<int64_t> sizes = {5, 4099, 300};
  TensorList params(d, sizes, dl_f32(), false), m(d, sizes, dl_f32(), false), v(d, sizes, dl_f32(), false);
  TensorList grads(d, sizes, dl_bf16(), false), copies(d, sizes, dl_bf16(), false);
  const size_t n = size_t(params.buffer.bytes() / 4);
  std::vector<float> ones(n, 1.0f);
  std::vector<uint8_t> fill(copies.buffer.bytes(), 0x3C), gfill(grads.buffer.bytes(), 0x3F);
  for (TensorList* l : {&params, &m, &v}) l->buffer.upload(ones.data());
  copies.buffer.upload(fill.data());
  grads.buffer.upload(gfill.data());
  DeviceTensor scale_t(d, {1}, dl_f32());
  scale_t.upload(&scale);
  const verlpp_adamw_options o = options_at(3);
  std::vector<DLTensor*> pp = params.pointers(), mp = m.pointers(), vp = v.pointers(), gp = grads.pointers(),
                         cp = copies.pointers();
  std::vector<const DLTensor*> gc(gp.begin(), gp.end());
  ctx.expect_ok(
      table->adamw_update(3, pp.data(), gc.data(), mp.data(), vp.data(), cp.data(), &o, &scale_t.dl(), nullptr),
      "adamw_update (non-finite grad_scale)");
  for (TensorList* l : {&params, &m, &v})
    CHECK_THAT(l->buffer.to_host<float>() == ones, "a skipped step wrote f32 state");
  CHECK_THAT(copies.buffer.to_host<uint8_t>() == fill, "a skipped step wrote the copies");
}

void check_rejects(CheckContext& ctx) {
  hw::Device d = ctx.device();
  const auto* table = ctx.api().kernels;
  DeviceTensor p(d, {8}, dl_f32()), m(d, {8}, dl_f32()), v(d, {8}, dl_f32()), g(d, {8}, dl_bf16()),
      c(d, {8}, dl_bf16());
  DeviceTensor p16(d, {8}, dl_f16()), g7(d, {7}, dl_bf16()), g32(d, {8}, dl_f32()), two(d, {2}, dl_f32());
  DeviceTensor p2(d, {8}, dl_f32()), m2(d, {8}, dl_f32()), v2(d, {8}, dl_f32());
  verlpp_adamw_options o = options_at(1);
  auto call = [&](DLTensor* pt, const DLTensor* gt, DLTensor* ct, const verlpp_adamw_options* opt,
                  const DLTensor* scale) {
    DLTensor* ps[] = {pt};
    const DLTensor* gs[] = {gt};
    DLTensor* ms[] = {&m.dl()};
    DLTensor* vs[] = {&v.dl()};
    DLTensor* cs[] = {ct};
    return table->adamw_update(1, ps, gs, ms, vs, ct != nullptr ? cs : nullptr, opt, scale, nullptr);
  };
  ctx.expect_error(call(&p16.dl(), &g.dl(), nullptr, &o, nullptr), VERLPP_STATUS_INVALID_ARGUMENT,
                   "adamw_update(f16 params)");
  ctx.expect_error(call(&p.dl(), &g7.dl(), nullptr, &o, nullptr), VERLPP_STATUS_INVALID_ARGUMENT,
                   "adamw_update(grads [7] for [8])");
  ctx.expect_error(call(&p.dl(), &g.dl(), &p.dl(), &o, nullptr), VERLPP_STATUS_INVALID_ARGUMENT,
                   "adamw_update(copies = params)");
  ctx.expect_error(call(&p.dl(), &g.dl(), &c.dl(), nullptr, nullptr), VERLPP_STATUS_INVALID_ARGUMENT,
                   "adamw_update(NULL options)");
  ctx.expect_error(call(&p.dl(), &g.dl(), &c.dl(), &o, &two.dl()), VERLPP_STATUS_INVALID_ARGUMENT,
                   "adamw_update(grad_scale of 2 elements)");
  verlpp_adamw_options bad = o;
  bad.step = 0;
  ctx.expect_error(call(&p.dl(), &g.dl(), nullptr, &bad, nullptr), VERLPP_STATUS_INVALID_ARGUMENT,
                   "adamw_update(step 0)");
  bad = o;
  bad.beta1 = 1.0;
  ctx.expect_error(call(&p.dl(), &g.dl(), nullptr, &bad, nullptr), VERLPP_STATUS_INVALID_ARGUMENT,
                   "adamw_update(beta1 1)");
  bad = o;
  bad.struct_size = offsetof(verlpp_adamw_options, step);
  ctx.expect_error(call(&p.dl(), &g.dl(), nullptr, &bad, nullptr), VERLPP_STATUS_INVALID_ARGUMENT,
                   "adamw_update(options.struct_size without step)");
  // Two tensors whose grads differ in dtype, and two params that are one tensor.
  DLTensor* ps[] = {&p.dl(), &p2.dl()};
  DLTensor* same[] = {&p.dl(), &p.dl()};
  const DLTensor* gs[] = {&g.dl(), &g32.dl()};
  const DLTensor* gs_ok[] = {&g.dl(), &g.dl()};
  DLTensor* ms[] = {&m.dl(), &m2.dl()};
  DLTensor* vs[] = {&v.dl(), &v2.dl()};
  ctx.expect_error(table->adamw_update(2, ps, gs, ms, vs, nullptr, &o, nullptr, nullptr),
                   VERLPP_STATUS_INVALID_ARGUMENT, "adamw_update(bf16 and f32 grads in one call)");
  ctx.expect_error(table->adamw_update(2, same, gs_ok, ms, vs, nullptr, &o, nullptr, nullptr),
                   VERLPP_STATUS_INVALID_ARGUMENT, "adamw_update(params[0] = params[1])");
  ctx.expect_ok(table->adamw_update(0, nullptr, nullptr, nullptr, nullptr, nullptr, &o, nullptr, nullptr),
                "adamw_update(count 0)");
}

}  // namespace

void run_adamw_update_cases(CheckContext& ctx) {
  const float none = std::numeric_limits<float>::quiet_NaN();
  const AdamwCase cases[] = {
      {dl_f32(), false, dl_f32(), false, none, 1}, {dl_bf16(), true, dl_bf16(), false, 0.37f, 1},
      {dl_f16(), true, dl_f16(), false, 1.0f, 5},  {dl_bf16(), true, dl_bf16(), true, 0.5f, 9},
      {dl_f32(), true, dl_f32(), true, none, 2},   {dl_f32(), true, dl_bf16(), false, 0.9f, 3},
  };
  for (const AdamwCase& c : cases)
    ctx.run("kernels",
            fmt::format("adamw_update 70 tensors, {} grads, {}, step {}{}{}", sdk::dtype_name(c.grad_dtype),
                        c.with_copies ? sdk::dtype_name(c.copy_dtype) + " copies" : "no copies", c.step,
                        std::isnan(c.scale) ? "" : fmt::format(", grad_scale {}", c.scale),
                        c.offsets ? ", odd offsets" : ""),
            [&] {
              need_slot(ctx);
              check_case(ctx, c);
            });
  for (float scale : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()})
    ctx.run("kernels", fmt::format("adamw_update skips the step when grad_scale is {}", scale), [&] {
      need_slot(ctx);
      check_skip(ctx, scale);
    });
  ctx.run("kernels", "adamw_update rejects bad input", [&] {
    need_slot(ctx);
    check_rejects(ctx);
  });
}

}  // namespace verlpp::conformance
