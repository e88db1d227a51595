// Actor::update_policy on the tiny model: one AdamW step through micro-batches (fixed and
// dynamic) equals the step a plain full-batch reference computes by hand; non-finite steps are
// skipped; metrics carry verl's names.
#include <ATen/core/grad_mode.h>
#include <verlpp/algo/policy_loss.hpp>
#include <verlpp/model/model_config.hpp>
#include <verlpp/train/actor.hpp>

#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/sqrt.h>

#include <cmath>
#include "tiny_fixture.hpp"
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;

namespace {

constexpr int64_t kB = 8, kP = 5, kR = 4;

// A rollout-shaped batch with ragged prompts and responses, old log-probs from `m`.
data::Batch make_batch(const model::DecoderLM& m) {
  return test::policy_batch(
      m, kB, kP, kR, 4, [](int64_t r) { return r % 3; }, [](int64_t r) { return (r * 5) % 4; });
}

train::ActorConfig base_config() {
  train::ActorConfig c;
  c.ppo_mini_batch_size = kB;
  c.optim.grad_clip = 1e9;  // no clipping: compare raw steps
  c.optim.eps = 1e-3;       // damps AdamW's g/(|g|+eps) near g = 0, where rounding would flip it
  c.optim.weight_decay = 0.01;
  c.policy.loss_agg_mode = "token-mean";
  return c;
}

// The expected parameters after one AdamW step on the full-batch loss, computed by hand. With
// `compute` bf16/fp16 the loss and its gradient come from a copy of the model in that dtype (the
// gradient then taken to fp32) and the step applies to the fp32 weights, as mixed precision does.
std::vector<at::Tensor> reference_step(const data::Batch& b, const train::ActorConfig& cfg, double lr,
                                       at::ScalarType compute = at::kFloat) {
  const model::DecoderLM master = test::tiny_model(9);
  model::DecoderLM m = test::tiny_model(9);
  if (compute != at::kFloat) m.to(compute, m.options().device);
  m.set_requires_grad(true);
  auto out = train::response_log_probs(m, b.tensor("input_ids"), b.tensor("attention_mask"), b.tensor("position_ids"),
                                       kR, 1.0, cfg.entropy_coeff != 0);
  algo::PolicyLossConfig policy = cfg.policy;
  at::Tensor loss = algo::compute_policy_loss(cfg.loss_mode, b.tensor("old_log_probs"), out.log_probs,
                                              b.tensor("advantages"), b.tensor("response_mask"), policy)
                        .loss;
  if (cfg.entropy_coeff != 0)
    loss =
        loss.sub(algo::agg_loss(out.entropy, b.tensor("response_mask"), policy.loss_agg_mode).mul(cfg.entropy_coeff));
  loss.backward();
  std::vector<at::Tensor> expected;
  for (size_t i = 0; i < m.named_parameters().size(); ++i) {
    at::NoGradGuard no_grad;
    at::Tensor g = m.named_parameters()[i].second.grad().to(at::kFloat);
    const at::Tensor& p = master.named_parameters()[i].second;
    // Step 1 of AdamW: m_hat = g, v_hat = g^2; decoupled weight decay first.
    expected.push_back(
        p.mul(1 - lr * cfg.optim.weight_decay).sub(g.div(at::sqrt(g.mul(g)).add(cfg.optim.eps)).mul(lr)));
  }
  return expected;
}

double worst_param_diff(const model::DecoderLM& m, const std::vector<at::Tensor>& expected) {
  double worst = 0;
  size_t i = 0;
  for (const auto& [name, p] : m.named_parameters())
    worst = std::max(worst, p.detach().sub(expected[i++]).abs().max().item<double>());
  return worst;
}

}  // namespace

TEST_CASE("actor: micro-batched and dynamic updates equal the full-batch step", "[actor]") {
  const double lr = 1e-3;
  for (const std::string mode : {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum"}) {
    for (int variant = 0; variant < 3; ++variant) {
      model::DecoderLM m = test::tiny_model(9);
      data::Batch batch = make_batch(m);
      train::ActorConfig cfg = base_config();
      cfg.policy.loss_agg_mode = mode;
      cfg.entropy_coeff = variant == 2 ? 0.01 : 0.0;
      if (variant == 0) cfg.ppo_micro_batch_size = 2;
      if (variant == 1) {
        cfg.use_dynamic_bsz = true;
        cfg.ppo_max_token_len = 20;
      }
      if (variant == 2) cfg.ppo_micro_batch_size = 8;
      auto expected = reference_step(batch, cfg, lr);
      train::Actor actor(m, cfg, train::LrSchedule({lr, "constant", 0, 1, 0.0, 0.5}));
      nlohmann::json metrics = actor.update_policy(batch);
      double worst = worst_param_diff(m, expected);
      INFO("mode " << mode << " variant " << variant << ": worst |param diff| " << worst);
      CHECK(worst < lr * 1e-3);
      CHECK(actor.steps() == 1);
      for (const char* key : {"actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm", "actor/lr"})
        CHECK(std::isfinite(metrics.at(key).get<double>()));
      CHECK(metrics["actor/lr"] == lr);
    }
  }
}

TEST_CASE("actor: a non-finite gradient skips the step and keeps the weights", "[actor]") {
  model::DecoderLM m = test::tiny_model(9);
  data::Batch batch = make_batch(m);
  batch.set("advantages", batch.tensor("advantages").clone().fill_(std::nan("")));
  std::vector<at::Tensor> before;
  for (const auto& [name, p] : m.named_parameters()) before.push_back(p.detach().clone());
  train::Actor actor(m, base_config(), train::LrSchedule({1e-3, "constant", 0, 1, 0.0, 0.5}));
  nlohmann::json metrics = actor.update_policy(batch);
  CHECK(actor.skipped_steps() == 1);
  CHECK(actor.steps() == 0);
  CHECK(metrics["actor/skipped_steps"] == 1);
  CHECK(worst_param_diff(m, before) == 0.0);
}

TEST_CASE("actor: KL loss, epochs, warmup and clipping", "[actor]") {
  model::DecoderLM m = test::tiny_model(9);
  data::Batch batch = make_batch(m);
  batch.set("ref_log_prob", batch.tensor("old_log_probs"));
  train::ActorConfig cfg = base_config();
  cfg.use_kl_loss = true;
  cfg.ppo_epochs = 2;
  cfg.ppo_mini_batch_size = 4;  // two mini-batches per epoch: four optimizer steps
  cfg.ppo_micro_batch_size = 2;
  cfg.optim.grad_clip = 1e-3;
  train::Actor actor(m, cfg, train::LrSchedule({1e-3, "constant", 2, 10, 0.0, 0.5}));
  nlohmann::json first = actor.update_policy(batch);
  CHECK(actor.steps() == 4);
  CHECK(first["actor/lr"] == 0.0);  // warmup step 0
  CHECK(first.contains("actor/kl_loss"));
  CHECK(first["actor/kl_coef"] == cfg.kl_loss_coef);
  CHECK(first["actor/grad_norm"].get<double>() > cfg.optim.grad_clip);  // the norm before clipping is reported
  nlohmann::json second = actor.update_policy(batch);
  CHECK(second["actor/lr"].get<double>() == Approx(0.5e-3));
  CHECK_THROWS_WITH(actor.update_policy(batch.slice(0, 6)), Catch::Contains("not a multiple of ppo_mini_batch_size 4"));
}

// Mixed precision (param_dtype bf16): the passes run on a bf16 copy, the fp32 weights take the
// step with the bf16 gradient taken to fp32, and the copy then holds the new weights cast.
TEST_CASE("actor: bf16 mixed precision steps the fp32 weights with the bf16 gradient", "[actor][mixed]") {
  const double lr = 1e-3;
  model::DecoderLM m = test::tiny_model(9);
  data::Batch batch = make_batch(m);
  train::ActorConfig cfg = base_config();
  cfg.ppo_micro_batch_size = kB;  // one backward: the gradient is the reference's bit for bit
  cfg.param_dtype = at::kBFloat16;
  auto expected = reference_step(batch, cfg, lr, at::kBFloat16);
  train::Actor actor(m, cfg, train::LrSchedule({lr, "constant", 0, 1, 0.0, 0.5}));
  REQUIRE(actor.compute_model().options().dtype == at::kBFloat16);
  REQUIRE(m.options().dtype == at::kFloat);
  auto same_as_cast = [&] {
    double worst = 0;
    for (size_t i = 0; i < m.named_parameters().size(); ++i)
      worst = std::max(worst, actor.compute_model()
                                  .named_parameters()[i]
                                  .second.detach()
                                  .to(at::kFloat)
                                  .sub(m.named_parameters()[i].second.detach().to(at::kBFloat16).to(at::kFloat))
                                  .abs()
                                  .max()
                                  .item<double>());
    return worst;
  };
  CHECK(same_as_cast() == 0.0);
  actor.update_policy(batch);
  const double worst = worst_param_diff(m, expected);
  INFO("worst |param diff| " << worst);
  CHECK(worst < lr * 1e-3);
  CHECK(same_as_cast() == 0.0);
  for (const auto& [name, p] : actor.compute_model().named_parameters()) CHECK(!p.grad().defined());
}

// Micro-batch gradients accumulate in fp32 on the masters: the sum of each bf16 gradient cast.
TEST_CASE("mixed precision: gradients of several backwards add up in fp32", "[actor][mixed]") {
  model::DecoderLM master = test::tiny_model(3);
  master.set_requires_grad(true);
  train::MixedPrecision mp(master, at::kBFloat16);
  REQUIRE(mp.enabled());
  data::Batch b = test::ragged_batch(
      master.config().vocab_size, 4, 3, 3, 11, [](int64_t) { return 0; }, [](int64_t) { return 0; });
  std::vector<at::Tensor> expected(master.named_parameters().size());
  for (int pass = 0; pass < 3; ++pass) {
    auto out = train::response_log_probs(mp.compute(), b.tensor("input_ids"), b.tensor("attention_mask"),
                                         b.tensor("position_ids"), 3, 1.0 + pass, false);
    out.log_probs.mul(double(pass + 1)).sum().backward();
    for (size_t i = 0; i < expected.size(); ++i) {
      at::Tensor g = mp.compute().named_parameters()[i].second.grad().to(at::kFloat);
      expected[i] = pass == 0 ? g : expected[i].add(g);
    }
    mp.accumulate_gradients();
  }
  double worst = 0;
  for (size_t i = 0; i < expected.size(); ++i)
    worst = std::max(worst, master.named_parameters()[i].second.grad().sub(expected[i]).abs().max().item<double>());
  CHECK(worst == 0.0);
  train::MixedPrecision same(master, at::kFloat);
  CHECK(!same.enabled());
  CHECK(&same.compute() == &master);
}
