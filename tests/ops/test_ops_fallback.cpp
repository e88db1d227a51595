// The ops layer's two paths agree: every function called with cpu_ref's kernels and with no
// kernels (a NULL entry: the LibTorch reference) gives the same result within the dtype's
// rounding, on awkward shapes (odd, prime, strided rows, GQA, ragged contexts). cpu_ref itself
// is checked against fp64 loops by the conformance suite; this checks the fallbacks and the
// views, streams and argument order of each call.
#include <catch2/catch.hpp>

#include "../../src/core/ops/adamw.hpp"
#include "../../src/core/ops/attention.hpp"
#include "../../src/core/ops/logprob.hpp"
#include "../../src/core/ops/norm.hpp"
#include "../../src/core/ops/rotary.hpp"
#include "../../src/core/ops/sample.hpp"
#include "../../src/core/ops/swiglu.hpp"

#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/model/layers.hpp>

#include <ATen/Context.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/randperm.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

using namespace verlpp;

namespace {

const hw::Kernels& cpu_ref() {
  static const hw::Plugin plugin = hw::load_plugin_file(std::string(VERLPP_BIN_DIR) + "/libverlpp-plugin-cpu_ref.so");
  static const hw::Kernels kernels(plugin);
  return kernels;
}

// Every element within atol + rtol * |want|; reports the worst error and the first bad index.
void require_close(const at::Tensor& got, const at::Tensor& want, double atol, double rtol, const std::string& what) {
  const at::Tensor g = got.to(at::kDouble).reshape(-1), w = want.to(at::kDouble).reshape(-1);
  REQUIRE(g.numel() == w.numel());
  const at::Tensor diff = (g - w).abs();
  const at::Tensor bad = (diff <= atol + rtol * w.abs()).logical_not();
  const double worst = diff.numel() ? diff.nan_to_num(1e300).max().item<double>() : 0.0;
  const int64_t first = bad.any().item<bool>() ? bad.nonzero()[0][0].item<int64_t>() : -1;
  INFO(fmt::format("{}: worst |diff| {:.3e}, first bad index {}", what, worst, first));
  CHECK(first == -1);
}

// Relative tolerance of a few roundings in `t`.
double rtol_of(at::ScalarType t) { return t == at::kFloat ? 1e-5 : t == at::kBFloat16 ? 2e-2 : 4e-3; }

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kBFloat16, at::kHalf};

}  // namespace

TEST_CASE("ops: logprob_entropy and logprob_backward without a kernel equal cpu_ref's", "[ops][logprob]") {
  for (at::ScalarType dtype : kDtypes) {
    INFO(c10::toString(dtype));
    at::manual_seed(1);
    const int64_t n = 7, v = 131;
    // Strided rows: a column slice of a wider buffer.
    const at::Tensor logits = (at::randn({n, v + 5}) * 3).to(dtype).narrow(1, 2, v);
    const at::Tensor labels = at::randint(v, {n}, at::TensorOptions().dtype(at::kLong));
    const double t = 0.7;
    at::Tensor lp[2], ent[2];
    for (int path = 0; path < 2; ++path) {
      lp[path] = at::empty({n});
      ent[path] = at::empty({n});
      ops::logprob_entropy(path == 0 ? &cpu_ref() : nullptr, logits, labels, t, lp[path], ent[path]);
    }
    require_close(lp[1], lp[0], 1e-5, 1e-5, "log-prob");
    require_close(ent[1], ent[0], 1e-5, 1e-5, "entropy");

    const at::Tensor lse = logits.to(at::kFloat).div(t).logsumexp(-1);
    const at::Tensor mean_z = lse - ent[0];
    const at::Tensor g_lp = at::randn({n}), g_ent = at::randn({n});
    at::Tensor grad[2];
    for (int path = 0; path < 2; ++path) {
      grad[path] = at::empty({n, v}, at::TensorOptions().dtype(dtype));
      ops::logprob_backward(path == 0 ? &cpu_ref() : nullptr, logits, labels, lse, g_lp, mean_z, g_ent, t, grad[path]);
    }
    require_close(grad[1], grad[0], 1e-6, rtol_of(dtype), "logprob_backward");
  }
}

TEST_CASE("ops: rms_norm and add_rms_norm without a kernel equal cpu_ref's", "[ops][norm]") {
  for (at::ScalarType dtype : kDtypes) {
    INFO(c10::toString(dtype));
    at::manual_seed(2);
    const int64_t n = 5, d = 67;
    const at::Tensor x = at::randn({n, d}).to(dtype), w = (at::rand({d}) + 0.5).to(dtype);
    const at::Tensor base = at::randn({n, d}).to(dtype);
    at::Tensor out[2], residual[2], fused[2];
    for (int path = 0; path < 2; ++path) {
      const hw::Kernels* k = path == 0 ? &cpu_ref() : nullptr;
      out[path] = at::empty({n, d}, x.options());
      ops::rms_norm(k, x, w, 1e-6, out[path]);
      residual[path] = base.clone();
      fused[path] = at::empty({n, d}, x.options());
      ops::add_rms_norm(k, x, residual[path], w, 1e-6, fused[path]);
    }
    require_close(out[1], out[0], 1e-6, rtol_of(dtype), "rms_norm");
    CHECK(at::equal(residual[1], residual[0]));  // one addition, rounded once, on both paths
    require_close(fused[1], fused[0], 1e-6, rtol_of(dtype), "add_rms_norm");
  }
}

TEST_CASE("ops: rotary_embedding and rotary_kv_store without a kernel equal cpu_ref's", "[ops][rotary]") {
  for (at::ScalarType dtype : kDtypes) {
    INFO(c10::toString(dtype));
    at::manual_seed(3);
    const int64_t n = 9, h = 4, kv = 2, s = 16, bs = 4, blocks = 5;
    const at::Tensor inv_freq = at::pow(10000.0, at::arange(0, s, 2, at::kFloat) / -double(s));
    const at::Tensor positions = at::randint(300, {n}, at::TensorOptions().dtype(at::kLong));
    // q, k, v as column views of one fused projection, as the engine hands them over.
    const at::Tensor qkv = at::randn({n, (h + 2 * kv) * s}).to(dtype);
    const at::Tensor q = qkv.narrow(1, 0, h * s).view({n, h, s}), k = qkv.narrow(1, h * s, kv * s).view({n, kv, s});
    const at::Tensor v = qkv.narrow(1, (h + kv) * s, kv * s).view({n, kv, s});
    const at::Tensor slots =
        at::randperm(blocks * bs, at::TensorOptions().dtype(at::kLong)).narrow(0, 0, n).contiguous();
    at::Tensor qr[2], kr[2], q_out[2], k_cache[2], v_cache[2];
    for (int path = 0; path < 2; ++path) {
      const hw::Kernels* kernels = path == 0 ? &cpu_ref() : nullptr;
      qr[path] = q.contiguous();
      kr[path] = k.contiguous();
      ops::rotary_embedding(kernels, qr[path], kr[path], positions, inv_freq);
      q_out[path] = at::empty({n, h, s}, q.options());
      k_cache[path] = at::zeros({blocks, bs, kv, s}, q.options());
      v_cache[path] = at::zeros({blocks, bs, kv, s}, q.options());
      ops::rotary_kv_store(kernels, q, k, v, positions, inv_freq, slots, q_out[path], k_cache[path], v_cache[path]);
    }
    // cos/sin from fp64 (cpu_ref) or fp32 (LibTorch) may round an ulp apart.
    const double tol = dtype == at::kFloat ? 1e-5 : 2 * rtol_of(dtype);
    require_close(qr[1], qr[0], tol, tol, "rotary_embedding q");
    require_close(kr[1], kr[0], tol, tol, "rotary_embedding k");
    require_close(q_out[1], q_out[0], tol, tol, "rotary_kv_store q_out");
    require_close(k_cache[1], k_cache[0], tol, tol, "rotary_kv_store k_cache");
    CHECK(at::equal(v_cache[1], v_cache[0]));  // v is copied
    // The reference's rotation is the model's own.
    const auto [cos, sin] = model::rope_cos_sin(inv_freq, positions, dtype);
    CHECK(at::equal(qr[1], model::apply_rope(q, cos, sin)));
  }
}

TEST_CASE("ops: paged_attention_decode and rotary_paged_attention_decode without a kernel equal cpu_ref's",
          "[ops][attention]") {
  for (at::ScalarType dtype : kDtypes) {
    INFO(c10::toString(dtype));
    at::manual_seed(4);
    const int64_t b = 3, h = 6, kv = 2, s = 16, bs = 4, blocks = 12, max_blocks = 4;
    const at::Tensor inv_freq = at::pow(10000.0, at::arange(0, s, 2, at::kFloat) / -double(s));
    const at::Tensor k_cache = at::randn({blocks, bs, kv, s}).to(dtype),
                     v_cache = at::randn({blocks, bs, kv, s}).to(dtype);
    const at::Tensor tables = at::randperm(blocks, at::TensorOptions().dtype(at::kInt))
                                  .narrow(0, 0, b * max_blocks)
                                  .view({b, max_blocks})
                                  .contiguous();
    const at::Tensor lens = at::tensor(std::vector<int32_t>{1, 9, 16});  // one position, a partial block, full
    const at::Tensor q = at::randn({b, h, s}).to(dtype);
    const double scale = 1.0 / std::sqrt(double(s));
    at::Tensor out[2];
    for (int path = 0; path < 2; ++path) {
      out[path] = at::empty({b, h, s}, q.options());
      ops::paged_attention_decode(path == 0 ? &cpu_ref() : nullptr, q, k_cache, v_cache, tables, lens, scale,
                                  out[path]);
    }
    // Both in wide math, each rounded once: an output an ulp apart at most.
    require_close(out[1], out[0], rtol_of(dtype), 2 * rtol_of(dtype), "paged_attention_decode");

    // The fused entry: the new token is each context's last position.
    const at::Tensor k = at::randn({b, kv, s}).to(dtype), v = at::randn({b, kv, s}).to(dtype);
    std::vector<int64_t> last, slot;
    for (int64_t r = 0; r < b; ++r) {
      last.push_back(lens[r].item<int64_t>() - 1);
      slot.push_back(int64_t(tables[r][last.back() / bs].item<int32_t>()) * bs + last.back() % bs);
    }
    const at::Tensor positions = at::tensor(last), slots = at::tensor(slot);
    at::Tensor fused[2], kc[2], vc[2];
    for (int path = 0; path < 2; ++path) {
      kc[path] = k_cache.clone();
      vc[path] = v_cache.clone();
      fused[path] = at::empty({b, h, s}, q.options());
      ops::rotary_paged_attention_decode(path == 0 ? &cpu_ref() : nullptr, q, k, v, positions, inv_freq, slots,
                                         kc[path], vc[path], tables, lens, scale, fused[path]);
    }
    require_close(fused[1], fused[0], 2 * rtol_of(dtype), 4 * rtol_of(dtype), "rotary_paged_attention_decode");
    require_close(kc[1], kc[0], 1e-5, 2 * rtol_of(dtype), "rotary_paged_attention_decode k_cache");
    CHECK(at::equal(vc[1], vc[0]));
  }
}

TEST_CASE("ops: silu_mul and silu_mul_backward without a kernel equal cpu_ref's", "[ops][swiglu]") {
  for (at::ScalarType dtype : kDtypes) {
    INFO(c10::toString(dtype));
    at::manual_seed(5);
    const int64_t n = 6, f = 37;
    // gate and up as the halves of one [N, 2F] tensor, grads written into halves as well.
    const at::Tensor gate_up = (at::randn({n, 2 * f}) * 3).to(dtype);
    const at::Tensor gate = gate_up.narrow(1, 0, f), up = gate_up.narrow(1, f, f);
    const at::Tensor grad = at::randn({n, f}).to(dtype);
    at::Tensor out[2], grads[2];
    for (int path = 0; path < 2; ++path) {
      const hw::Kernels* k = path == 0 ? &cpu_ref() : nullptr;
      out[path] = at::empty({n, f}, gate.options());
      ops::silu_mul(k, gate, up, out[path]);
      grads[path] = at::empty({n, 2 * f}, gate.options());
      ops::silu_mul_backward(k, gate, up, grad, grads[path].narrow(1, 0, f), grads[path].narrow(1, f, f));
    }
    require_close(out[1], out[0], 1e-6, rtol_of(dtype), "silu_mul");
    require_close(grads[1], grads[0], 1e-5, 2 * rtol_of(dtype), "silu_mul_backward");
  }
}

TEST_CASE("ops: sample without a kernel draws what cpu_ref draws", "[ops][sample]") {
  at::manual_seed(6);
  const int64_t b = 8, v = 97;
  const at::Tensor logits = at::randn({b, v}) * 2;
  // Greedy, plain, top-k, top-p and both: one row each, twice with other seeds.
  const at::Tensor temperature = at::tensor(std::vector<float>{0, 1, 0.8f, 1.2f, 0.7f, 0, 1, 0.9f});
  const at::Tensor top_k = at::tensor(std::vector<int32_t>{0, 0, 5, 0, 9, 3, 1, 0});
  const at::Tensor top_p = at::tensor(std::vector<float>{1, 1, 1, 0.6f, 0.8f, 1, 1, 0.3f});
  const at::Tensor seeds = at::tensor(std::vector<int64_t>{11, 12, 13, 14, 15, 16, 17, -18});
  for (uint64_t step : {uint64_t(0), uint64_t(5)}) {
    INFO("step " << step);
    at::Tensor tokens[2], logprobs[2];
    for (int path = 0; path < 2; ++path) {
      tokens[path] = at::empty({b}, at::TensorOptions().dtype(at::kLong));
      logprobs[path] = at::empty({b});
      ops::sample(path == 0 ? &cpu_ref() : nullptr, logits, temperature, top_k, top_p, seeds, step, tokens[path],
                  logprobs[path]);
    }
    CHECK(at::equal(tokens[1], tokens[0]));
    require_close(logprobs[1], logprobs[0], 1e-5, 1e-5, "sample log-probs");
  }
}

TEST_CASE("ops: adamw_update without a kernel equals cpu_ref's, and skips a non-finite step", "[ops][adamw]") {
  at::manual_seed(7);
  const std::vector<std::vector<int64_t>> shapes = {{5, 3}, {7}, {1}};
  // lr, beta1, beta2, eps, weight_decay, step.
  const verlpp_adamw_options options{sizeof(verlpp_adamw_options), 1e-2, 0.9, 0.95, 1e-8, 0.1, 3};
  ops::AdamwTensors start;
  for (const auto& shape : shapes) {
    start.params.push_back(at::randn(shape));
    start.grads.push_back(at::randn(shape).to(at::kBFloat16));
    start.exp_avg.push_back(at::randn(shape) * 0.1);
    start.exp_avg_sq.push_back(at::rand(shape) * 0.01);
    start.copies.push_back(at::empty(shape, at::TensorOptions().dtype(at::kBFloat16)));
  }
  auto copy_of = [&] {
    ops::AdamwTensors t;
    for (size_t i = 0; i < shapes.size(); ++i) {
      t.params.push_back(start.params[i].clone());
      t.grads.push_back(start.grads[i]);
      t.exp_avg.push_back(start.exp_avg[i].clone());
      t.exp_avg_sq.push_back(start.exp_avg_sq[i].clone());
      t.copies.push_back(start.copies[i].clone());
    }
    return t;
  };
  const at::Tensor scale = at::tensor(std::vector<float>{0.5f});
  ops::AdamwTensors got[2] = {copy_of(), copy_of()};
  for (int path = 0; path < 2; ++path) ops::adamw_update(path == 0 ? &cpu_ref() : nullptr, got[path], options, scale);
  for (size_t i = 0; i < shapes.size(); ++i) {
    INFO("tensor " << i);
    require_close(got[1].params[i], got[0].params[i], 1e-6, 1e-5, "params");
    require_close(got[1].exp_avg[i], got[0].exp_avg[i], 1e-7, 1e-5, "exp_avg");
    require_close(got[1].exp_avg_sq[i], got[0].exp_avg_sq[i], 1e-9, 1e-5, "exp_avg_sq");
    require_close(got[1].copies[i], got[0].copies[i], 1e-6, 1e-2, "copies");
  }
  for (int path = 0; path < 2; ++path) {
    ops::AdamwTensors skipped = copy_of();
    ops::adamw_update(path == 0 ? &cpu_ref() : nullptr, skipped, options, at::tensor(std::vector<float>{NAN}));
    for (size_t i = 0; i < shapes.size(); ++i) CHECK(at::equal(skipped.params[i], start.params[i]));
  }
}
