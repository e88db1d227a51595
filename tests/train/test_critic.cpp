// Critic on a tiny token-classification model: values read at the positions before each
// response token; micro-batched updates equal a hand-computed full-batch AdamW step.
#include <ATen/core/grad_mode.h>
#include <verlpp/algo/value_loss.hpp>
#include <verlpp/model/model_config.hpp>
#include <verlpp/train/critic.hpp>

#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/sqrt.h>

#include <cmath>

#include "cpu_ref_kernels.hpp"
#include "tiny_fixture.hpp"
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;

namespace {

constexpr int64_t kB = 6, kP = 4, kR = 5;

model::DecoderLM tiny_critic() {
  model::ModelConfig c = model::load_model_config(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/config.json");
  c.head = model::ModelHead::kTokenClassification;
  c.num_labels = 1;
  model::DecoderLM m(c);
  m.init_weights(21);
  return m;
}

data::Batch make_batch(const model::DecoderLM& m) {
  data::Batch b = test::ragged_batch(
      m.config().vocab_size, kB, kP, kR, 8, [](int64_t) { return 0; }, [](int64_t r) { return r % 4; });
  b.set("returns", at::randn({kB, kR}));
  return b;
}

}  // namespace

TEST_CASE("critic: values sit before each response token", "[critic]") {
  model::DecoderLM m = tiny_critic();
  data::Batch b = make_batch(m);
  train::Critic critic(m, {}, train::LrSchedule({1e-3, "constant", 0, 1, 0.0, 0.5}));
  at::Tensor values = critic.compute_values(b);
  REQUIRE(values.sizes() == std::vector<int64_t>{kB, kR});
  at::NoGradGuard no_grad;
  at::Tensor all =
      m.scores(m.forward_padded(b.tensor("input_ids"), b.tensor("attention_mask"), b.tensor("position_ids")));
  for (int64_t j = 0; j < kR; ++j)
    CHECK(values.select(1, j).sub(all.select(1, kP - 1 + j).select(-1, 0)).abs().max().item<double>() < 1e-6);
  CHECK_FALSE(values.requires_grad());
}

TEST_CASE("critic: micro-batched update equals the full-batch step", "[critic]") {
  const double lr = 1e-3;
  for (bool dynamic : {false, true}) {
    model::DecoderLM m = tiny_critic();
    data::Batch b = make_batch(m);
    train::CriticConfig cfg;
    cfg.ppo_mini_batch_size = kB;
    cfg.ppo_micro_batch_size = 2;
    cfg.use_dynamic_bsz = dynamic;
    cfg.ppo_max_token_len = 20;
    cfg.cliprange_value = 0.2;
    cfg.optim.grad_clip = 1e9;
    cfg.optim.eps = 1e-3;
    train::Critic critic(m, cfg, train::LrSchedule({lr, "constant", 0, 1, 0.0, 0.5}));
    b.set("values", critic.compute_values(b).add(at::randn({kB, kR}).mul(0.3)));
    // Reference: the full-batch loss on a fresh copy, one AdamW step by hand.
    model::DecoderLM ref = tiny_critic();
    ref.set_requires_grad(true);
    at::Tensor hidden = ref.forward_padded(b.tensor("input_ids"), b.tensor("attention_mask"), b.tensor("position_ids"));
    at::Tensor vpreds = ref.scores(hidden.narrow(1, kP - 1, kR)).select(-1, 0);
    algo::compute_value_loss(vpreds, b.tensor("returns"), b.tensor("values"), b.tensor("response_mask"),
                             cfg.cliprange_value)
        .loss.backward();
    nlohmann::json metrics = critic.update_critic(b);
    double worst = 0;
    size_t i = 0;
    const auto& trained = m.named_parameters();
    for (const auto& [name, p] : ref.named_parameters()) {
      at::NoGradGuard no_grad;
      at::Tensor g = p.grad();
      at::Tensor expected =
          p.mul(1 - lr * cfg.optim.weight_decay).sub(g.div(at::sqrt(g.mul(g)).add(cfg.optim.eps)).mul(lr));
      worst = std::max(worst, trained[i++].second.detach().sub(expected).abs().max().item<double>());
    }
    INFO("dynamic " << dynamic << ": worst |param diff| " << worst);
    CHECK(worst < lr * 1e-3);
    CHECK(critic.steps() == 1);
    CHECK(metrics["critic/vf_clipfrac"].get<double>() > 0.0);  // the 0.3 noise exceeds the 0.2 clip
    CHECK(metrics.contains("critic/vf_loss"));
  }
}

TEST_CASE("critic: needs a one-label score head", "[critic]") {
  model::DecoderLM lm(model::load_model_config(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/config.json"));
  CHECK_THROWS_WITH(train::Critic(lm, {}, train::LrSchedule({1e-3, "constant", 0, 1, 0.0, 0.5})),
                    Catch::Contains("score head"));
}

// bf16 mixed precision: values come from the bf16 copy (equal to a bf16 cast of the model's),
// the update moves the fp32 weights, and the copy then holds them cast.
TEST_CASE("critic: bf16 mixed precision runs on the copy and steps the fp32 weights", "[critic][mixed]") {
  model::DecoderLM m = tiny_critic();
  data::Batch b = make_batch(m);
  model::DecoderLM cast = tiny_critic();
  cast.to(at::kBFloat16, cast.options().device);
  train::CriticConfig cfg;
  cfg.ppo_mini_batch_size = kB;
  cfg.ppo_micro_batch_size = 3;
  cfg.param_dtype = at::kBFloat16;
  train::Critic critic(m, cfg, train::LrSchedule({1e-3, "constant", 0, 1, 0.0, 0.5}));
  at::Tensor values = critic.compute_values(b);
  {
    at::NoGradGuard no_grad;
    at::Tensor all =
        cast.scores(cast.forward_padded(b.tensor("input_ids"), b.tensor("attention_mask"), b.tensor("position_ids")));
    CHECK(values.sub(all.narrow(1, kP - 1, kR).select(-1, 0).to(at::kFloat)).abs().max().item<double>() == 0.0);
  }
  const at::Tensor before = m.named_parameters().front().second.detach().clone();
  b.set("values", values);
  critic.update_critic(b);
  CHECK(m.named_parameters().front().second.detach().sub(before).abs().max().item<double>() > 0);
  at::Tensor after = critic.compute_values(b);
  model::DecoderLM recast = tiny_critic();
  for (size_t i = 0; i < m.named_parameters().size(); ++i)
    recast.named_parameters()[i].second.detach().copy_(m.named_parameters()[i].second.detach());
  recast.to(at::kBFloat16, recast.options().device);
  at::NoGradGuard no_grad;
  at::Tensor expect =
      recast.scores(recast.forward_padded(b.tensor("input_ids"), b.tensor("attention_mask"), b.tensor("position_ids")));
  CHECK(after.sub(expect.narrow(1, kP - 1, kR).select(-1, 0).to(at::kFloat)).abs().max().item<double>() == 0.0);
}

// With a plugin's adamw_update (cpu_ref's), a bf16 critic's update takes the one-pass step: the
// same weights as LibTorch's AdamW with the casts (a few fp32 ulps), the compute copy equal to
// the masters cast, and a one-micro-batch update leaves no fp32 gradient behind (the 16-bit one
// went to the kernel as it was).
TEST_CASE("critic: the update through the plugin's adamw_update equals LibTorch's AdamW", "[critic][mixed][kernels]") {
  data::Batch b;
  std::vector<at::Tensor> weights[2];
  for (int plugin = 0; plugin < 2; ++plugin) {
    model::DecoderLM m = tiny_critic();
    if (plugin == 0) b = make_batch(m);
    train::CriticConfig cfg;
    cfg.ppo_mini_batch_size = kB;
    cfg.ppo_micro_batch_size = kB;
    cfg.param_dtype = at::kBFloat16;
    cfg.optim.grad_clip = 0.1;  // engaged
    cfg.kernels = plugin ? &test::cpu_ref_kernels() : nullptr;
    train::Critic critic(m, cfg, train::LrSchedule({1e-3, "constant", 0, 1, 0.0, 0.5}));
    if (plugin == 0) b.set("values", critic.compute_values(b));
    critic.update_critic(b);
    for (const auto& [name, p] : m.named_parameters()) {
      weights[plugin].push_back(p.detach().clone());
      if (plugin == 1) CHECK(!p.grad().defined());
    }
    CHECK(critic.optimizer().last_step_through_plugin() == (plugin == 1));
    // The compute copy the kernel wrote is the masters cast: its values are a recast model's.
    const at::Tensor after = critic.compute_values(b);
    model::DecoderLM recast = tiny_critic();
    for (size_t i = 0; i < m.named_parameters().size(); ++i)
      recast.named_parameters()[i].second.detach().copy_(m.named_parameters()[i].second.detach());
    recast.to(at::kBFloat16, recast.options().device);
    at::NoGradGuard no_grad;
    const at::Tensor expect = recast.scores(
        recast.forward_padded(b.tensor("input_ids"), b.tensor("attention_mask"), b.tensor("position_ids")));
    CHECK(after.sub(expect.narrow(1, kP - 1, kR).select(-1, 0).to(at::kFloat)).abs().max().item<double>() == 0.0);
  }
  for (size_t i = 0; i < weights[0].size(); ++i) {
    const at::Tensor tolerance = weights[0][i].abs().mul(8 * std::ldexp(1.0, -24)).add(1e-8);
    CHECK(weights[1][i].sub(weights[0][i]).abs().le(tolerance).all().item<bool>());
  }
}
