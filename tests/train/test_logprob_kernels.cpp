// linear_log_probs / response_log_probs through a plugin's kernels (cpu_ref's reference
// logprob_entropy, ABI 1.2's logprob_backward, and rotary_embedding for the training RoPE with its
// own backward): values and gradients against autograd through full fp64 logits, and against
// LibTorch's own path. The cuda plugin's kernels are held to cpu_ref's by the conformance suite,
// and the GPU bench checks the whole path against LibTorch's before timing it.
#include "../../src/core/ops/layer_kernels.hpp"

#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/train/linear_log_probs.hpp>
#include <verlpp/train/logprob.hpp>

#include <ATen/TensorOperators.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/logsumexp.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/zeros.h>

#include <cstdlib>

#include "cpu_ref_kernels.hpp"
#include "tiny_fixture.hpp"
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;

namespace {

using test::cpu_ref_kernels;

double max_abs(const at::Tensor& t) { return t.abs().max().item<double>(); }

}  // namespace

TEST_CASE("linear_log_probs with plugin kernels: values and gradients equal autograd through fp64 logits",
          "[logprob][kernels]") {
  const hw::Kernels& kernels = cpu_ref_kernels();
  REQUIRE(kernels.offers(hw::KernelId::logprob_backward));
  at::manual_seed(11);
  const int64_t n = 9, c = 6, v = 37;
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor h0 = at::randn({n, c}, f32), w0 = at::randn({v, c}, f32).mul(2);
  const at::Tensor targets = at::randint(v, {n}, at::TensorOptions().dtype(at::kLong));
  const at::Tensor g_lp = at::randn({n}, f32), g_ent = at::randn({n}, f32);
  for (double temperature : {1.0, 0.6}) {
    for (int which : {0, 1, 2}) {  // both outputs, log-probs only, entropy only
      // The reference: fp64 autograd through full logits of the same fp32 inputs.
      at::Tensor h = h0.to(at::kDouble).requires_grad_(true), w = w0.to(at::kDouble).requires_grad_(true);
      at::Tensor z = at::linear(h, w).div(temperature);
      at::Tensor lp = at::log_softmax(z, -1).gather(1, targets.unsqueeze(1)).squeeze(1);
      at::Tensor ent = at::logsumexp(z, -1) - at::softmax(z, -1).mul(z).sum(-1);
      at::Tensor loss = (which != 2 ? lp.mul(g_lp.to(at::kDouble)).sum() : at::zeros({}, h.options())) +
                        (which != 1 ? ent.mul(g_ent.to(at::kDouble)).sum() : at::zeros({}, h.options()));
      loss.backward();
      for (train::LogitsInBackward mode : {train::LogitsInBackward::kKeep, train::LogitsInBackward::kRecompute}) {
        for (int64_t chunk : {int64_t(1), int64_t(4), n}) {
          at::Tensor h2 = h0.clone().requires_grad_(true), w2 = w0.clone().requires_grad_(true);
          train::LinearLogProbs out =
              train::linear_log_probs(h2, w2, targets, temperature, which != 1, chunk, &kernels, mode);
          INFO("T " << temperature << " outputs " << which << " chunk " << chunk << " keep "
                    << (mode == train::LogitsInBackward::kKeep));
          REQUIRE(out.used_kernels);
          CHECK(max_abs(out.log_probs.to(at::kDouble).sub(lp.detach())) < 2e-5);
          at::Tensor loss2 = which != 2 ? out.log_probs.mul(g_lp).sum() : at::zeros({}, f32);
          if (which != 1) {
            CHECK(max_abs(out.entropy.to(at::kDouble).sub(ent.detach())) < 2e-5);
            loss2 = loss2 + out.entropy.mul(g_ent).sum();
          }
          // Twice through the retained graph: the kernel overwrites kept logits with dL/dz, so
          // the second backward must recompute them and add the same gradients again.
          loss2.backward({}, /*retain_graph=*/true);
          CHECK(max_abs(h2.grad().to(at::kDouble).sub(h.grad())) < 2e-5 * max_abs(h.grad()));
          CHECK(max_abs(w2.grad().to(at::kDouble).sub(w.grad())) < 2e-5 * max_abs(w.grad()));
          loss2.backward();
          CHECK(max_abs(h2.grad().to(at::kDouble).sub(h.grad().mul(2))) < 4e-5 * max_abs(h.grad()));
          CHECK(max_abs(w2.grad().to(at::kDouble).sub(w.grad().mul(2))) < 4e-5 * max_abs(w.grad()));
        }
      }
    }
  }
}

TEST_CASE("linear_log_probs with plugin kernels: bf16 log-probs and gradients match LibTorch's path",
          "[logprob][kernels]") {
  const hw::Kernels& kernels = cpu_ref_kernels();
  at::manual_seed(12);
  const int64_t n = 12, c = 16, v = 301;
  auto bf16 = at::TensorOptions().dtype(at::kBFloat16);
  const at::Tensor h0 = at::randn({n, c}, bf16), w0 = at::randn({v, c}, bf16);
  const at::Tensor targets = at::randint(v, {n}, at::TensorOptions().dtype(at::kLong));
  const at::Tensor g_lp = at::randn({n}), g_ent = at::randn({n});
  for (bool with_entropy : {false, true}) {
    at::Tensor grads[2][2];
    at::Tensor values[2][2];
    for (int path = 0; path < 2; ++path) {
      at::Tensor h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
      train::LinearLogProbs out =
          train::linear_log_probs(h, w, targets, 0.8, with_entropy, 5, path == 0 ? nullptr : &kernels);
      REQUIRE(out.used_kernels == (path == 1));
      at::Tensor loss = out.log_probs.mul(g_lp).sum();
      if (with_entropy) loss = loss + out.entropy.mul(g_ent).sum();
      loss.backward();
      values[path][0] = out.log_probs;
      values[path][1] = with_entropy ? out.entropy : at::zeros({n});
      grads[path][0] = h.grad().to(at::kFloat);
      grads[path][1] = w.grad().to(at::kFloat);
    }
    INFO("with entropy " << with_entropy);
    // Both read the same bf16 logits; the softmax sums are fp32 (LibTorch) and fp64 (cpu_ref).
    CHECK(max_abs(values[1][0].sub(values[0][0])) < 1e-5);
    CHECK(max_abs(values[1][1].sub(values[0][1])) < 1e-5);
    // dL/dz is rounded to bf16 once on each path (from fp32 vs fp64 values: at most an ulp
    // apart), then the same bf16 products; a wrong term or scale would be O(1) off.
    for (int g = 0; g < 2; ++g) CHECK(max_abs(grads[1][g].sub(grads[0][g])) < 1e-2 * max_abs(grads[0][g]));
  }
}

// Keeping the logits for the backward changes where they come from, not what they are: the same
// GEMM made them, so log-probs and gradients are bit-identical to recomputing them, on both paths.
TEST_CASE("linear_log_probs: kept logits give exactly the gradients of recomputed ones", "[logprob][kernels]") {
  const hw::Kernels& kernels = cpu_ref_kernels();
  at::manual_seed(13);
  const int64_t n = 10, c = 16, v = 203;
  auto bf16 = at::TensorOptions().dtype(at::kBFloat16);
  const at::Tensor h0 = at::randn({n, c}, bf16), w0 = at::randn({v, c}, bf16);
  const at::Tensor targets = at::randint(v, {n}, at::TensorOptions().dtype(at::kLong));
  const at::Tensor g_lp = at::randn({n}), g_ent = at::randn({n});
  for (const hw::Kernels* k : {static_cast<const hw::Kernels*>(nullptr), &kernels}) {
    for (bool with_entropy : {false, true}) {
      at::Tensor grads[2][2];
      for (int keep = 0; keep < 2; ++keep) {
        at::Tensor h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
        train::LinearLogProbs out =
            train::linear_log_probs(h, w, targets, 0.7, with_entropy, 3, k,
                                    keep ? train::LogitsInBackward::kKeep : train::LogitsInBackward::kRecompute);
        at::Tensor loss = out.log_probs.mul(g_lp).sum();
        if (with_entropy) loss = loss + out.entropy.mul(g_ent).sum();
        loss.backward();
        grads[keep][0] = h.grad().to(at::kFloat);
        grads[keep][1] = w.grad().to(at::kFloat);
      }
      INFO((k == nullptr ? "LibTorch's path" : "cpu_ref's kernels") << ", entropy " << with_entropy);
      CHECK(max_abs(grads[1][0].sub(grads[0][0])) == 0);
      CHECK(max_abs(grads[1][1].sub(grads[0][1])) == 0);
    }
  }
}

TEST_CASE("response_log_probs hands the kernels to the LM head: the tiny model's log-probs and gradients",
          "[logprob][kernels]") {
  const hw::Kernels& kernels = cpu_ref_kernels();
  model::DecoderLM m = test::tiny_model(4);
  m.set_requires_grad(true);
  const data::Batch b = test::ragged_batch(
      m.config().vocab_size, 3, 6, 5, 7, [](int64_t r) { return r; }, [](int64_t r) { return 2 - r; });
  at::Tensor grads[2];
  at::Tensor values[2];
  for (int path = 0; path < 2; ++path) {
    for (const auto& [name, p] : m.named_parameters()) const_cast<at::Tensor&>(p).mutable_grad() = at::Tensor();
    train::ResponseLogProbs out =
        train::response_log_probs(m, b.tensor("input_ids"), b.tensor("attention_mask"), b.tensor("position_ids"), 5,
                                  1.0, true, 2, false, path == 0 ? nullptr : &kernels);
    out.log_probs.sum().add(out.entropy.mean()).backward();
    values[path] = out.log_probs.detach();
    grads[path] = m.parameter("model.layers.0.self_attn.q_proj.weight").grad().clone();
  }
  CHECK(max_abs(values[1].sub(values[0])) < 1e-5);
  CHECK(max_abs(grads[1].sub(grads[0])) < 1e-5 * max_abs(grads[0]));
}

TEST_CASE("linear_log_probs takes LibTorch's path where the kernels cannot serve", "[logprob][kernels]") {
  const hw::Kernels& kernels = cpu_ref_kernels();
  const at::Tensor targets = at::zeros({3}, at::TensorOptions().dtype(at::kLong));
  // fp64 (the tests' exact dtype) has no plugin kernel.
  const at::Tensor h = at::randn({3, 4}, at::TensorOptions().dtype(at::kDouble)), w = at::randn({6, 4}, h.options());
  CHECK_FALSE(train::linear_log_probs(h, w, targets, 1.0, true, 2, &kernels).used_kernels);
  CHECK_FALSE(train::linear_log_probs(h.to(at::kFloat), w.to(at::kFloat), targets, 1.0, true, 2).used_kernels);
}

// RoPE runs through rotary_kv_store where the plugin has it (ABI 1.3: rotated q, k and a copy of
// v in one pass, each way) and through rotary_embedding otherwise (the same plugin presented as
// ABI 1.2, whose table ends before rotary_kv_store); both against the model's own ops.
TEST_CASE(
    "PluginLayerKernels: RoPE and silu(gate) * up through the plugin's kernels, with their backwards, equal the "
    "model's ops and autograd",
    "[logprob][kernels]") {
  const hw::Kernels& kernels = cpu_ref_kernels();
  REQUIRE(ops::PluginLayerKernels::offered(&kernels));
  REQUIRE(kernels.offers(hw::KernelId::rotary_kv_store));
  verlpp_plugin_api api = kernels.plugin().api();
  api.abi_minor = 2;
  const hw::Plugin older_plugin(kernels.plugin().path(), kernels.plugin().score(), api, sizeof(api));
  const hw::Kernels older(older_plugin);
  REQUIRE(!older.offers(hw::KernelId::rotary_kv_store));
  REQUIRE(older.offers(hw::KernelId::rotary_embedding));
  for (const hw::Kernels* table : {&kernels, &older}) {
    const bool qkv = table == &kernels;
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      for (bool packed : {false, true}) {
        for (bool checkpointing : {false, true}) {
          model::DecoderLM m = test::tiny_model(6);
          m.to(dtype, c10::Device(c10::kCPU));
          m.set_requires_grad(true);
          m.set_gradient_checkpointing(checkpointing);
          const data::Batch b = test::ragged_batch(
              m.config().vocab_size, 3, 6, 5, 8, [](int64_t r) { return r; }, [](int64_t r) { return 2 - r; });
          at::Tensor hidden[2];
          std::vector<at::Tensor> grads[2];
          int64_t rotations = 0, qkv_rotations = 0, silu_muls = 0;
          for (int path = 0; path < 2; ++path) {
            for (const auto& [name, p] : m.named_parameters()) const_cast<at::Tensor&>(p).mutable_grad() = at::Tensor();
            auto rope = path == 1 ? std::make_shared<ops::PluginLayerKernels>(*table) : nullptr;
            const at::Tensor ids = b.tensor("input_ids"), mask = b.tensor("attention_mask"),
                             pos = b.tensor("position_ids");
            at::Tensor h;
            if (packed) {
              at::Tensor keep = mask.reshape({-1}).ne(0).nonzero().squeeze(1);
              at::Tensor counts = mask.ne(0).sum(1).to(at::kLong);
              at::Tensor cu = at::cat({at::zeros({1}, counts.options()), counts.cumsum(0)});
              h = m.forward_packed(ids.reshape({-1}).index_select(0, keep), pos.reshape({-1}).index_select(0, keep), cu,
                                   rope);
            } else {
              h = m.forward_padded(ids, mask, pos, rope);
            }
            // A loss that weighs every hidden unit differently, so every gradient path is exercised.
            at::manual_seed(9);
            h.to(at::kFloat).mul(at::randn(h.sizes())).sum().backward();
            if (rope)
              rotations = rope->rotations(), qkv_rotations = rope->qkv_rotations(), silu_muls = rope->silu_muls();
            hidden[path] = h.detach().to(at::kFloat);
            for (const auto& [name, p] : m.named_parameters()) grads[path].push_back(p.grad().to(at::kFloat));
          }
          INFO("rotary_kv_store " << qkv << " dtype " << c10::toString(dtype) << " packed " << packed
                                  << " checkpointing " << checkpointing);
          CHECK(rotations >=
                m.config().num_hidden_layers);  // the kernels ran, once a layer (and again when recomputing)
          CHECK(qkv_rotations == (qkv ? rotations : 0));
          CHECK(silu_muls >= m.config().num_hidden_layers);
          // fp32 proves the math: the kernels' cos/sin and exp are within an ulp of LibTorch's. In
          // bf16 the same roundings happen at the same places, but an exp or cos an fp32 ulp apart
          // flips a bf16 rounding now and then (0.4-0.8% of that element), and the backward carries
          // such flips through every layer below: up to ~2.5% of a gradient's largest element was
          // seen on this 4-layer model on one CPU, 4.8% (a norm weight's gradient, a sum over every
          // row) on another, whose LibTorch bf16 ops round elsewhere. A wrong term, sign or scale is
          // O(1) off, so 8% still tells them apart by more than ten times.
          const double tol = dtype == at::kFloat ? 1e-5 : 8e-2;
          CHECK(max_abs(hidden[1].sub(hidden[0])) <= tol * max_abs(hidden[0]));
          for (size_t i = 0; i < grads[0].size(); ++i) {
            INFO("parameter " << m.named_parameters()[i].first);
            CHECK(max_abs(grads[1][i].sub(grads[0][i])) <= tol * std::max(1e-12, max_abs(grads[0][i])));
          }
        }
      }
    }
  }
}

// A training forward on an accelerator computes q/k/v, and gate/up with kernels that take them
// whole (silu_mul_halves), as one GEMM each; ForwardOptions' training_projections = kFused does it
// on the CPU too. Log-probs and every parameter's gradient equal those of one GEMM per projection, with and
// without the plugin's kernels, and the kernels' product runs in both.
TEST_CASE("training forward with fused projections: the same log-probs and gradients as one GEMM per projection",
          "[logprob][kernels]") {
  const hw::Kernels& kernels = cpu_ref_kernels();
  model::DecoderLM m = test::tiny_model(6);
  m.set_requires_grad(true);
  const data::Batch b = test::ragged_batch(
      m.config().vocab_size, 3, 6, 5, 9, [](int64_t r) { return r; }, [](int64_t r) { return 2 - r; });
  for (const hw::Kernels* k : {static_cast<const hw::Kernels*>(nullptr), &kernels}) {
    INFO((k == nullptr ? "LibTorch's ops" : "cpu_ref's kernels"));
    std::vector<at::Tensor> grads[2];
    at::Tensor values[2];
    for (int fused = 0; fused < 2; ++fused) {
      model::ForwardOptions forward;
      forward.training_projections = fused ? model::TrainingProjections::kFused : model::TrainingProjections::kSplit;
      m.set_forward_options(forward);
      for (const auto& [name, p] : m.named_parameters()) const_cast<at::Tensor&>(p).mutable_grad() = at::Tensor();
      train::ResponseLogProbs out = train::response_log_probs(m, b.tensor("input_ids"), b.tensor("attention_mask"),
                                                              b.tensor("position_ids"), 5, 1.0, true, 2, false, k);
      out.log_probs.sum().add(out.entropy.mean()).backward();
      values[fused] = out.log_probs.detach();
      for (const auto& [name, p] : m.named_parameters())
        grads[fused].push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
    }
    CHECK(max_abs(values[1].sub(values[0])) < 1e-5);
    for (size_t i = 0; i < grads[0].size(); ++i) {
      INFO(m.named_parameters()[i].first);
      REQUIRE(grads[1][i].defined() == grads[0][i].defined());
      if (grads[0][i].defined()) CHECK(max_abs(grads[1][i].sub(grads[0][i])) <= 1e-5 * max_abs(grads[0][i]) + 1e-9);
    }
  }
}
