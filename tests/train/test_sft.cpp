// SftTrainer: one step through micro-batches equals a plain full-batch recompute (logits of the
// whole sequence, log_softmax, the response tokens' NLL averaged over all response tokens, then
// AdamW's first step by hand), and the reported loss is that NLL.
#include <ATen/core/grad_mode.h>
#include <verlpp/model/model_config.hpp>
#include <verlpp/train/sft.hpp>

#include <ATen/ops/log_softmax.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/sqrt.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include "tiny_fixture.hpp"
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;

namespace {

constexpr int64_t kB = 6, kP = 5, kR = 4;

data::Batch sft_batch(int64_t vocab) {
  return test::ragged_batch(
      vocab, kB, kP, kR, 8, [](int64_t r) { return r % 3; }, [](int64_t r) { return (r * 3) % kR; });
}

// Token-mean NLL of the response tokens from the full sequence's logits, written out directly.
at::Tensor reference_nll(const model::DecoderLM& m, const data::Batch& b) {
  at::Tensor hidden = m.forward_padded(b.tensor("input_ids"), b.tensor("attention_mask"), b.tensor("position_ids"));
  at::Tensor logp = at::log_softmax(m.logits(hidden), -1);  // [B, T, V]
  at::Tensor total = at::zeros({}, at::TensorOptions().dtype(at::kFloat));
  double tokens = 0;
  for (int64_t r = 0; r < kB; ++r)
    for (int64_t k = 0; k < kR; ++k) {
      if (b.tensor("response_mask")[r][k].item<float>() == 0) continue;
      const int64_t pos = kP + k, token = b.tensor("input_ids")[r][pos].item<int64_t>();
      total = total.sub(logp[r][pos - 1][token]);  // the logits before a token predict it
      tokens += 1;
    }
  return total.div(tokens);
}

}  // namespace

TEST_CASE("sft: a micro-batched step equals the full-batch step computed by hand", "[sft]") {
  const double lr = 1e-3;
  for (int64_t micro : {1, 2, 6}) {
    model::DecoderLM m = test::tiny_model(21), ref = test::tiny_model(21);
    data::Batch batch = sft_batch(m.config().vocab_size);
    ref.set_requires_grad(true);
    at::Tensor nll = reference_nll(ref, batch);
    nll.backward();
    train::SftConfig cfg;
    cfg.micro_batch_size = micro;
    cfg.optim.grad_clip = 1e9;
    cfg.optim.eps = 1e-3;
    cfg.optim.weight_decay = 0.0;
    train::SftTrainer trainer(m, cfg, train::LrSchedule({lr, "constant", 0, 1, 0.0, 0.5}));
    nlohmann::json metrics = trainer.train_step(batch);
    CHECK(metrics["sft/loss"].get<double>() == Approx(nll.item<double>()).epsilon(1e-5));
    CHECK(metrics["sft/tokens"].get<double>() == batch.tensor("response_mask").sum().item<double>());
    double worst = 0;
    for (const auto& [name, p] : ref.named_parameters()) {
      at::NoGradGuard no_grad;
      at::Tensor g = p.grad();
      // AdamW's first step: m_hat = g, v_hat = g^2.
      at::Tensor expected = p.sub(g.div(at::sqrt(g.mul(g)).add(cfg.optim.eps)).mul(lr));
      worst = std::max(worst, m.parameter(name).detach().sub(expected).abs().max().item<double>());
    }
    INFO("micro " << micro << ": worst |param diff| " << worst);
    CHECK(worst < lr * 1e-3);
    // The evaluation loss after the step is lower (one step on the same batch).
    CHECK(trainer.loss(batch) < nll.item<double>());
  }
}

// bf16 mixed precision: the step moves the fp32 weights (by about lr per element, AdamW's first
// step), the loss falls, and the evaluation runs on the refreshed bf16 copy: its loss equals the
// loss of a bf16 cast of the new weights.
TEST_CASE("sft: bf16 mixed precision steps the fp32 weights", "[sft][mixed]") {
  const double lr = 1e-3;
  model::DecoderLM m = test::tiny_model(21);
  const model::DecoderLM start = test::tiny_model(21);
  data::Batch batch = sft_batch(m.config().vocab_size);
  train::SftConfig cfg;
  cfg.micro_batch_size = 2;
  cfg.param_dtype = at::kBFloat16;
  train::SftTrainer trainer(m, cfg, train::LrSchedule({lr, "constant", 0, 1, 0.0, 0.5}));
  const double before = trainer.loss(batch);
  trainer.train_step(batch);
  REQUIRE(m.options().dtype == at::kFloat);
  double moved = 0;
  for (size_t i = 0; i < m.named_parameters().size(); ++i)
    moved = std::max(
        moved,
        m.named_parameters()[i].second.detach().sub(start.named_parameters()[i].second).abs().max().item<double>());
  CHECK(moved > lr * 0.5);
  CHECK(moved < lr * 1.5);
  const double after = trainer.loss(batch);
  CHECK(after < before);
  model::DecoderLM cast = test::tiny_model(21);
  for (size_t i = 0; i < m.named_parameters().size(); ++i)
    cast.named_parameters()[i].second.detach().copy_(m.named_parameters()[i].second.detach());
  cast.to(at::kBFloat16, cast.options().device);
  train::SftConfig plain;
  plain.param_dtype = at::kBFloat16;
  model::DecoderLM holder = cast;  // the evaluation of a trainer whose copy is that cast
  train::SftTrainer reader(holder, plain, train::LrSchedule({lr, "constant", 0, 1, 0.0, 0.5}));
  CHECK(reader.loss(batch) == after);
}
