// response_log_probs on the tiny model: against full logits with fp64 log-softmax and an explicit
// entropy loop, for every chunking; gradients equal the unchunked computation's.
#include <verlpp/model/model_config.hpp>
#include <verlpp/train/linear_log_probs.hpp>
#include <verlpp/train/logprob.hpp>

#include <ATen/TensorOperators.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/logsumexp.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include "tiny_fixture.hpp"
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;

namespace {}  // namespace

TEST_CASE("response log-probs and entropy match a full fp64 recompute", "[logprob]") {
  model::DecoderLM m = test::tiny_model(5);
  const int64_t b = 5, p = 6, r = 4, t = p + r, v = m.config().vocab_size;
  at::manual_seed(1);
  at::Tensor ids = at::randint(v, {b, t}, at::TensorOptions().dtype(at::kLong));
  at::Tensor mask = at::ones({b, t}, at::TensorOptions().dtype(at::kLong));
  // Ragged: left padding on prompts, right padding on responses.
  for (int64_t row = 0; row < b; ++row) {
    for (int64_t k = 0; k < row % 3; ++k) mask[row][k] = 0;
    for (int64_t k = 0; k < row % 2; ++k) mask[row][t - 1 - k] = 0;
  }
  at::Tensor pos = mask.cumsum(1).sub(1).clamp_min(0);
  const double temperature = 0.7;
  at::Tensor full = m.logits(m.forward_padded(ids, mask, pos)).to(at::kDouble);  // [B, T, V]
  for (int64_t chunk : {int64_t(1), int64_t(3), b}) {
    auto out = train::response_log_probs(m, ids, mask, pos, r, temperature, true, chunk);
    REQUIRE(out.log_probs.sizes() == std::vector<int64_t>{b, r});
    double worst = 0;
    for (int64_t row = 0; row < b; ++row)
      for (int64_t j = 0; j < r; ++j) {
        // Position p-1+j scores token p+j.
        std::vector<double> z(static_cast<size_t>(v));
        double mx = -INFINITY;
        for (int64_t k = 0; k < v; ++k) {
          z[size_t(k)] = full[row][p - 1 + j][k].item<double>() / temperature;
          mx = std::max(mx, z[size_t(k)]);
        }
        double sum = 0, weighted = 0;
        for (double x : z) {
          sum += std::exp(x - mx);
          weighted += std::exp(x - mx) * x;
        }
        double lse = mx + std::log(sum);
        double want_lp = z[size_t(ids[row][p + j].item<int64_t>())] - lse;
        double want_ent = lse - weighted / sum;
        worst = std::max({worst, std::fabs(out.log_probs[row][j].item<double>() - want_lp),
                          std::fabs(out.entropy[row][j].item<double>() - want_ent)});
      }
    INFO("chunk " << chunk << " worst |diff| " << worst);
    CHECK(worst < 2e-5);
  }
  CHECK_FALSE(train::response_log_probs(m, ids, mask, pos, r, 1.0, false).entropy.defined());
  CHECK_THROWS(train::response_log_probs(m, ids, mask, pos, t, 1.0, false));
  CHECK_THROWS(train::response_log_probs(m, ids, mask, pos, r, 0.0, false));
}

TEST_CASE("gradients through chunked log-probs equal the unchunked ones", "[logprob]") {
  model::DecoderLM m = test::tiny_model(5);
  m.set_requires_grad(true);
  const int64_t b = 4, t = 9, r = 3, v = m.config().vocab_size;
  at::manual_seed(2);
  at::Tensor ids = at::randint(v, {b, t}, at::TensorOptions().dtype(at::kLong));
  at::Tensor mask = at::ones({b, t}, at::TensorOptions().dtype(at::kLong));
  at::Tensor pos = mask.cumsum(1).sub(1);
  const at::Tensor& w = m.parameter("model.layers.0.mlp.down_proj.weight");
  std::vector<at::Tensor> grads;
  for (int64_t chunk : {int64_t(1), b}) {
    if (w.grad().defined()) w.mutable_grad().zero_();
    train::response_log_probs(m, ids, mask, pos, r, 1.0, false, chunk).log_probs.sum().backward();
    grads.push_back(w.grad().clone());
  }
  double diff = grads[0].sub(grads[1]).abs().max().item<double>();
  INFO("max |grad diff| " << diff);
  CHECK(diff < 1e-6);
  CHECK(grads[0].abs().sum().item<double>() > 0);
}

TEST_CASE("remove_padding: packed forwards give the padded batch's log-probs, entropy and gradients", "[logprob]") {
  model::DecoderLM m = test::tiny_model(5);
  const int64_t b = 6, p = 7, r = 5, t = p + r, v = m.config().vocab_size;
  at::manual_seed(3);
  at::Tensor ids = at::randint(v, {b, t}, at::TensorOptions().dtype(at::kLong));
  at::Tensor mask = at::ones({b, t}, at::TensorOptions().dtype(at::kLong));
  for (int64_t row = 0; row < b; ++row) {
    for (int64_t k = 0; k < (row * 2) % p; ++k) mask[row][k] = 0;          // left-padded prompt
    for (int64_t k = 0; k < (row * 3) % r; ++k) mask[row][t - 1 - k] = 0;  // right-padded response
  }
  at::Tensor pos = mask.cumsum(1).sub(1).clamp_min(0);
  at::Tensor response_mask = mask.narrow(1, p, r).to(at::kFloat);
  m.set_requires_grad(true);
  std::vector<std::vector<at::Tensor>> grads;
  std::vector<train::ResponseLogProbs> outs;
  for (bool packed : {false, true}) {
    for (const auto& [name, param] : m.named_parameters()) param.mutable_grad() = at::Tensor();
    auto out = train::response_log_probs(m, ids, mask, pos, r, 1.0, true, 2, packed);
    out.log_probs.mul(response_mask).sum().add(out.entropy.mul(response_mask).sum().mul(0.1)).backward();
    std::vector<at::Tensor> g;
    for (const auto& [name, param] : m.named_parameters()) g.push_back(param.grad().clone());
    grads.push_back(g);
    outs.push_back({out.log_probs.detach(), out.entropy.detach()});
  }
  // Compared where the response is real (padding positions score nothing either way).
  CHECK(outs[0].log_probs.sub(outs[1].log_probs).mul(response_mask).abs().max().item<double>() < 1e-5);
  CHECK(outs[0].entropy.sub(outs[1].entropy).mul(response_mask).abs().max().item<double>() < 1e-5);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < grads[0].size(); ++i) {
    worst = std::max(worst, grads[0][i].sub(grads[1][i]).abs().max().item<double>());
    scale = std::max(scale, grads[0][i].abs().max().item<double>());
  }
  INFO("worst |grad diff| " << worst << " of max |grad| " << scale);
  CHECK(worst < 1e-5 * std::max(1.0, scale));
}

TEST_CASE("gradient checkpointing: the same log-probs and gradients, padded and packed", "[logprob]") {
  const int64_t b = 4, p = 6, r = 5, t = p + r;
  at::manual_seed(11);
  model::DecoderLM m = test::tiny_model(7);
  at::Tensor ids = at::randint(m.config().vocab_size, {b, t}, at::TensorOptions().dtype(at::kLong));
  at::Tensor mask = at::ones({b, t}, at::TensorOptions().dtype(at::kLong));
  for (int64_t row = 0; row < b; ++row) {
    for (int64_t k = 0; k < row; ++k) mask[row][k] = 0;
    for (int64_t k = 0; k < (row * 2) % r; ++k) mask[row][t - 1 - k] = 0;
  }
  at::Tensor pos = mask.cumsum(1).sub(1).clamp_min(0);
  at::Tensor response_mask = mask.narrow(1, p, r).to(at::kFloat);
  m.set_requires_grad(true);
  for (bool packed : {false, true}) {
    std::vector<std::vector<at::Tensor>> grads;
    std::vector<at::Tensor> lps;
    for (bool checkpointing : {false, true}) {
      m.set_gradient_checkpointing(checkpointing);
      for (const auto& [name, param] : m.named_parameters()) param.mutable_grad() = at::Tensor();
      auto out = train::response_log_probs(m, ids, mask, pos, r, 1.0, true, 2, packed);
      out.log_probs.mul(response_mask).sum().add(out.entropy.mul(response_mask).sum().mul(0.1)).backward();
      std::vector<at::Tensor> g;
      for (const auto& [name, param] : m.named_parameters()) {
        REQUIRE(param.grad().defined());  // every parameter got its gradient through the recomputation
        g.push_back(param.grad().clone());
      }
      grads.push_back(g);
      lps.push_back(out.log_probs.detach());
    }
    m.set_gradient_checkpointing(false);
    INFO("packed " << packed);
    CHECK(lps[0].equal(lps[1]));
    double worst = 0, scale = 0;
    for (size_t i = 0; i < grads[0].size(); ++i) {
      worst = std::max(worst, grads[0][i].sub(grads[1][i]).abs().max().item<double>());
      scale = std::max(scale, grads[0][i].abs().max().item<double>());
    }
    INFO("worst |grad diff| " << worst << " of max |grad| " << scale);
    CHECK(worst <= 1e-6 * std::max(1.0, scale));
  }
}

// linear_log_probs against autograd through the plain formula (full logits, log_softmax, the
// entropy as logsumexp - sum p z) in fp64: values, and the gradients of hidden and weight for
// an upstream gradient on both outputs, on log-probs alone, and on entropy alone; every chunking;
// logits kept for the backward or recomputed there. A second backward through the retained graph
// (the kept logits are spent by the first) must add the same gradients again.
TEST_CASE("linear_log_probs: values and gradients equal autograd through full logits", "[logprob]") {
  at::manual_seed(3);
  const int64_t n = 7, c = 5, v = 11;
  auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor h0 = at::randn({n, c}, f64), w0 = at::randn({v, c}, f64).mul(2);
  const at::Tensor targets = at::randint(v, {n}, at::TensorOptions().dtype(at::kLong));
  const at::Tensor g_lp = at::randn({n}, f64), g_ent = at::randn({n}, f64);
  for (double temperature : {1.0, 0.6}) {
    for (int which : {0, 1, 2}) {  // both outputs, log-probs only, entropy only
      at::Tensor h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
      at::Tensor z = at::linear(h, w).div(temperature);
      at::Tensor lp = at::log_softmax(z, -1).gather(1, targets.unsqueeze(1)).squeeze(1);
      at::Tensor ent = at::logsumexp(z, -1) - at::softmax(z, -1).mul(z).sum(-1);
      at::Tensor loss = (which != 2 ? lp.mul(g_lp).sum() : at::zeros({}, f64)) +
                        (which != 1 ? ent.mul(g_ent).sum() : at::zeros({}, f64));
      loss.backward();
      for (train::LogitsInBackward mode : {train::LogitsInBackward::kKeep, train::LogitsInBackward::kRecompute}) {
        for (int64_t chunk : {int64_t(1), int64_t(3), n}) {
          at::Tensor h2 = h0.clone().requires_grad_(true), w2 = w0.clone().requires_grad_(true);
          train::LinearLogProbs out =
              train::linear_log_probs(h2, w2, targets, temperature, which != 1, chunk, nullptr, mode);
          CHECK(out.log_probs.sub(lp.detach()).abs().max().item<double>() < 1e-12);
          at::Tensor loss2 = which != 2 ? out.log_probs.mul(g_lp).sum() : at::zeros({}, f64);
          if (which != 1) {
            CHECK(out.entropy.sub(ent.detach()).abs().max().item<double>() < 1e-12);
            loss2 = loss2 + out.entropy.mul(g_ent).sum();
          }
          loss2.backward({}, /*retain_graph=*/true);
          INFO("T " << temperature << " outputs " << which << " chunk " << chunk << " keep "
                    << (mode == train::LogitsInBackward::kKeep));
          CHECK(h2.grad().sub(h.grad()).abs().max().item<double>() < 1e-11);
          CHECK(w2.grad().sub(w.grad()).abs().max().item<double>() < 1e-11);
          loss2.backward();
          CHECK(h2.grad().sub(h.grad().mul(2)).abs().max().item<double>() < 2e-11);
          CHECK(w2.grad().sub(w.grad().mul(2)).abs().max().item<double>() < 2e-11);
        }
      }
    }
  }
}

TEST_CASE("linear_log_probs: bad shapes and arguments are named errors", "[logprob]") {
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor h = at::zeros({3, 4}, f32), w = at::zeros({6, 4}, f32);
  const at::Tensor t = at::zeros({3}, at::TensorOptions().dtype(at::kLong));
  CHECK_THROWS_WITH(train::linear_log_probs(h, at::zeros({6, 5}, f32), t, 1.0, false, 2), Catch::Contains("C 4 vs 5"));
  CHECK_THROWS_WITH(train::linear_log_probs(h, w, t.narrow(0, 0, 2), 1.0, false, 2), Catch::Contains("targets"));
  CHECK_THROWS_WITH(train::linear_log_probs(h, w.to(at::kDouble), t, 1.0, false, 2), Catch::Contains("weight is"));
  CHECK_THROWS_WITH(train::linear_log_probs(h, w, t, 0.0, false, 2), Catch::Contains("temperature"));
  CHECK_THROWS_WITH(train::linear_log_probs(h, w, t, 1.0, false, 0), Catch::Contains("chunk_tokens"));
}

// In fp32 on the tiny model, the gradient through response_log_probs (linear_log_probs' own
// backward) equals autograd through full fp32 logits and log_softmax to fp32 rounding: the
// weights' gradients agree to 1e-5 of their largest element.
TEST_CASE("response log-probs: the fp32 gradient equals autograd through full logits", "[logprob]") {
  model::DecoderLM a = test::tiny_model(5), b = test::tiny_model(5);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  const int64_t rows = 4, p = 5, r = 6, t = p + r;
  at::manual_seed(2);
  at::Tensor ids = at::randint(a.config().vocab_size, {rows, t}, at::TensorOptions().dtype(at::kLong));
  at::Tensor mask = at::ones({rows, t}, at::TensorOptions().dtype(at::kLong));
  at::Tensor pos = mask.cumsum(1).sub(1);
  at::Tensor g = at::randn({rows, r});
  train::response_log_probs(a, ids, mask, pos, r, 1.0, false, 2).log_probs.mul(g).sum().backward();
  at::Tensor z = b.logits(b.forward_padded(ids, mask, pos)).narrow(1, t - r - 1, r).to(at::kFloat);
  at::log_softmax(z, -1).gather(-1, ids.narrow(1, t - r, r).unsqueeze(-1)).squeeze(-1).mul(g).sum().backward();
  double worst = 0;
  for (size_t i = 0; i < a.named_parameters().size(); ++i) {
    const at::Tensor ga = a.named_parameters()[i].second.grad(), gb = b.named_parameters()[i].second.grad();
    worst = std::max(worst, ga.sub(gb).abs().max().item<double>() / std::max(1e-12, gb.abs().max().item<double>()));
  }
  INFO("worst relative gradient difference " << worst);
  CHECK(worst < 1e-5);
}
