// Suites "train" and "algo": LibTorch work placed on the plugin's torch device. train: one
// Actor::update_policy (forward, backward, AdamW; mini-batch = the whole batch) of the tiny
// model; algo: advantage estimators, the vanilla policy loss (forward + backward) and the KL
// penalty on [B, T] fp32. Decision: the plugin itself computes nothing here (the trainer and
// the RL math are the host's); the figures say what its device does with the host's LibTorch.
#include "bench.hpp"

#include <verlpp/algo.hpp>
#include <verlpp/data/batch.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/train/actor.hpp>

#include <ATen/ops/arange.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <fmt/format.h>

namespace verlpp::bench {
namespace {

const auto kF32 = at::TensorOptions().dtype(at::kFloat);

// A rollout-shaped batch on `device`: rows of prompt + response tokens, the responses ragged
// (row r keeps response - (r * 5) % (response / 2) tokens), old log-probs and advantages.
data::Batch actor_batch(int64_t rows, int64_t prompt, int64_t response, int64_t vocab, c10::Device device) {
  at::manual_seed(21);
  const int64_t T = prompt + response;
  const at::Tensor ids = at::randint(vocab, {rows, T}, at::TensorOptions().dtype(at::kLong));  // [rows, T]
  const at::Tensor keep =
      response - at::arange(rows, at::TensorOptions().dtype(at::kLong)).mul(5).remainder(response / 2);
  const at::Tensor pos = at::arange(T, at::TensorOptions().dtype(at::kLong)).unsqueeze(0);
  const at::Tensor mask = (pos < (prompt + keep).unsqueeze(1)).to(at::kLong);  // [rows, T]
  data::Batch b;
  b.set("input_ids", ids.to(device));
  b.set("attention_mask", mask.to(device));
  b.set("position_ids", mask.cumsum(1).sub(1).clamp_min(0).to(device));
  b.set("responses", ids.narrow(1, prompt, response).contiguous().to(device));
  b.set("response_mask", mask.narrow(1, prompt, response).to(at::kFloat).contiguous().to(device));
  b.set("old_log_probs", at::randn({rows, response}, kF32).mul(0.1).sub(3.0).to(device));
  b.set("advantages", at::randn({rows, response}, kF32).to(device));
  return b;
}

}  // namespace

std::vector<Measurement> run_train(const Options& o, const Target& t) {
  const int64_t rows = o.quick ? 4 : 32, prompt = o.quick ? 8 : 32, response = o.quick ? 8 : 64,
                micro = o.quick ? 4 : 8;
  model::DecoderLM m(model::load_model_config(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny"));
  m.init_weights(1);
  m.to(at::kFloat, t.device);
  const data::Batch batch = actor_batch(rows, prompt, response, m.config().vocab_size, t.device);
  train::ActorConfig cfg;
  cfg.ppo_mini_batch_size = rows;
  cfg.ppo_micro_batch_size = micro;
  train::LrScheduleOptions lr;
  lr.base_lr = 1e-5;
  train::Actor actor(m, cfg, train::LrSchedule(lr));
  Measurement r = make_measurement(
      "train", "actor_update",
      fmt::format(
          "tiny model (L={} hidden={} V={}) f32, {} rows x {} tokens (prompt {} + response <= {}), micro-batch {}, "
          "AdamW",
          m.config().num_hidden_layers, m.config().hidden_size, m.config().vocab_size, rows, prompt + response, prompt,
          response, micro),
      t);
  r.seconds = time_reps(o, t, [&] { (void)actor.update_policy(batch); });
  r.work = batch.tensor("attention_mask").sum().item<double>();
  r.work_unit = "tokens";
  return {r};
}

std::vector<Measurement> run_algo(const Options& o, const Target& t) {
  namespace va = verlpp::algo;
  const int64_t B = o.quick ? 64 : 1024, T = o.quick ? 64 : 2048, G = 8;
  const std::string shape = fmt::format("B={} T={} f32, ragged responses T/2..T, groups of {}", B, T, G);
  at::manual_seed(22);
  const at::Tensor lengths = at::randint(T / 2, T + 1, {B, 1}, at::TensorOptions().dtype(at::kLong));
  const at::Tensor positions = at::arange(T, at::TensorOptions().dtype(at::kLong)).unsqueeze(0);
  const at::Tensor mask = (positions < lengths).to(at::kFloat).to(t.device);  // [B, T]
  const at::Tensor outcome = (at::rand({B, 1}, kF32) > 0.5).to(at::kFloat);   // [B, 1]
  const at::Tensor outcome_rewards = ((positions == lengths - 1).to(at::kFloat) * outcome).to(t.device);
  const at::Tensor dense_rewards = at::randn({B, T}, kF32).to(t.device) * mask;
  const at::Tensor values = at::randn({B, T}, kF32).to(t.device);
  const at::Tensor old_lp = at::randn({B, T}, kF32).mul(0.1).sub(2).to(t.device);
  const at::Tensor ref_lp = at::randn({B, T}, kF32).mul(0.1).sub(2).to(t.device);
  const at::Tensor advantages = at::randn({B, T}, kF32).to(t.device);
  std::vector<std::string> uids;
  for (int64_t i = 0; i < B; ++i) uids.push_back(fmt::format("prompt-{}", i / G));

  va::AdvantageInputs grouped;
  grouped.token_level_rewards = outcome_rewards;
  grouped.response_mask = mask;
  grouped.index = uids;
  grouped.group_ids = va::make_groups(uids, t.device).ids;
  va::AdvantageInputs dense;
  dense.token_level_rewards = dense_rewards;
  dense.response_mask = mask;
  dense.values = values;
  va::AdvantageConfig cfg;
  cfg.gamma = 0.99;
  cfg.lam = 0.95;

  std::vector<Measurement> out;
  auto add = [&](const std::string& name, const std::function<void()>& fn) {
    Measurement m = make_measurement("algo", name, shape, t);
    m.seconds = time_reps(o, t, fn);
    out.push_back(m);
  };
  add("grpo_advantage", [&] { (void)va::compute_advantage("grpo", grouped, cfg); });
  add("gae_advantage", [&] { (void)va::compute_advantage("gae", dense, cfg); });
  add("policy_loss_vanilla_fwd_bwd", [&] {
    at::Tensor lp = (old_lp + 0.01).detach().requires_grad_(true);
    va::compute_policy_loss("vanilla", old_lp, lp, advantages, mask).loss.backward();
  });
  add("kl_low_var", [&] { (void)va::kl_penalty(old_lp, ref_lp, "low_var_kl"); });
  return out;
}

}  // namespace verlpp::bench
