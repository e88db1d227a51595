// The library path: a program that drives the rollout engine and the actor itself. Generating
// after an optimizer step is synced or refused, never run on a mix of weights; engine outputs
// become the trainer's batch through rollout::to_training_batch (checked field by field against
// the outputs); outcome scores land on each response's last token; an actor runs at a constant
// learning rate; the tokenizer and the engine share one token-id type.
#include <verlpp/algo/advantages.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/token_id.hpp>
#include <verlpp/data/rl_batch.hpp>
#include <verlpp/model/tokenizer.hpp>
#include <verlpp/rollout/engine.hpp>
#include <verlpp/rollout/training_batch.hpp>
#include <verlpp/train/actor.hpp>

#include "../rollout/engine_fixture.hpp"

#include <ATen/ops/tensor.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using namespace verlpp;
using Catch::Contains;

static_assert(std::is_same_v<decltype(std::declval<model::Tokenizer>().encode("")), TokenIds>,
              "the tokenizer returns the public token-id type");
static_assert(std::is_same_v<decltype(rollout::GenerateRequest::prompt_ids), TokenIds>,
              "the engine takes the public token-id type");
static_assert(std::is_same_v<decltype(rollout::GenerateOutput::token_ids), TokenIds>,
              "the engine returns the public token-id type");

rollout::SamplingParams sampled(int64_t max_new, int64_t n, uint64_t seed) {
  rollout::SamplingParams p;
  p.n = n;
  p.max_new_tokens = max_new;
  p.temperature = 1.0;
  p.seed = seed;
  p.ignore_eos = true;
  return p;
}

rollout::SamplingParams greedy(int64_t max_new) {
  rollout::SamplingParams p;
  p.temperature = 0;
  p.max_new_tokens = max_new;
  p.ignore_eos = true;
  return p;
}

// One GRPO update of `actor` on `engine`'s samples of two prompts (scores: the response's first
// token id over the vocabulary size, which differs between samples, so the advantages are not
// zero and the weights change). Returns the update's metrics.
nlohmann::json grpo_step(rollout::RolloutEngine& engine, train::Actor& actor) {
  const std::vector<rollout::GenerateRequest> requests = {{test::prompt_of(5, 1), sampled(4, 4, 7)},
                                                          {test::prompt_of(6, 2), sampled(4, 4, 8)}};
  data::Batch batch = rollout::to_training_batch(requests, engine.generate(requests), 4, 0);
  std::vector<double> scores;
  const at::Tensor responses = batch.tensor(data::fields::kResponses);
  const double vocab = double(actor.compute_model().config().vocab_size);
  for (int64_t row = 0; row < batch.size(); ++row) scores.push_back(double(responses[row][0].item<int64_t>()) / vocab);
  batch.set(data::fields::kOldLogProbs, actor.compute_log_prob(batch, false).log_probs);
  algo::AdvantageInputs in;
  in.token_level_rewards = data::outcome_token_scores(batch.tensor(data::fields::kResponseMask), scores);
  in.response_mask = batch.tensor(data::fields::kResponseMask);
  for (const auto& uid : batch.column(data::fields::kUid)) in.index.push_back(uid.get<std::string>());
  batch.set(data::fields::kAdvantages, algo::compute_advantage("grpo", in).advantages);
  return actor.update_policy(batch);
}

train::ActorConfig actor_config() {
  train::ActorConfig c;
  c.ppo_mini_batch_size = 8;
  c.ppo_micro_batch_size = 4;
  return c;
}

TEST_CASE("library path: generating after an optimizer step is refused until the engine syncs", "[library]") {
  model::DecoderLM policy = test::tiny_model(31);
  train::Actor actor(policy, actor_config(), 1e-2);
  rollout::RolloutEngine engine(actor.compute_model());  // shares the actor's tensors, fuses q/k/v
  CHECK_FALSE(engine.weights_stale());
  const int64_t before = policy.weights_version();
  grpo_step(engine, actor);
  CHECK(policy.weights_version() > before);  // the optimizer step moved it
  CHECK(engine.weights_stale());
  const rollout::GenerateRequest probe{test::prompt_of(7, 3), greedy(6)};
  CHECK_THROWS_WITH(engine.generate({probe}), Contains("changed") && Contains("update_weights(model)"));
  // The refusal is the only effect: after a sync the engine generates what the trained weights
  // generate by full recomputation.
  engine.update_weights(actor.compute_model());
  CHECK_FALSE(engine.weights_stale());
  CHECK(engine.generate({probe})[0].token_ids == test::naive_greedy(policy, probe.prompt_ids, 6));
}

TEST_CASE("library path: StaleWeights::kSync syncs before generating", "[library]") {
  model::DecoderLM policy = test::tiny_model(32);
  train::Actor actor(policy, actor_config(), 1e-2);
  rollout::EngineOptions options;
  options.stale_weights = rollout::StaleWeights::kSync;
  rollout::RolloutEngine engine(actor.compute_model(), options);
  grpo_step(engine, actor);
  const std::string q0 = "model.layers.0.self_attn.q_proj.weight";
  // The fused copy is stale until generate() syncs it.
  CHECK_FALSE(engine.model().parameter(q0).equal(policy.parameter(q0)));
  const rollout::GenerateRequest probe{test::prompt_of(7, 4), greedy(6)};
  CHECK(engine.generate({probe})[0].token_ids == test::naive_greedy(policy, probe.prompt_ids, 6));
  CHECK(engine.model().parameter(q0).equal(policy.parameter(q0)));
  CHECK_FALSE(engine.weights_stale());
}

TEST_CASE("library path: an engine of its own weights tracks the model given to update_weights", "[library]") {
  model::DecoderLM policy = test::tiny_model(33);
  train::Actor actor(policy, actor_config(), 1e-2);
  rollout::RolloutEngine engine(test::tiny_model(34));  // unrelated weights, its own version
  engine.update_weights(actor.compute_model());
  grpo_step(engine, actor);
  CHECK(engine.weights_stale());
  CHECK_THROWS_WITH(engine.generate({{test::prompt_of(5, 5), greedy(3)}}), Contains("update_weights(model)"));
  // Loading named tensors vouches for them: the caller asked for these weights.
  engine.update_weights(policy.named_parameters());
  CHECK_FALSE(engine.weights_stale());
}

TEST_CASE("library path: to_training_batch lays engine outputs out as the trainer reads them", "[library]") {
  rollout::RolloutEngine engine(test::tiny_model(35));
  const std::vector<rollout::GenerateRequest> requests = {{test::prompt_of(3, 1), sampled(5, 2, 1)},
                                                          {test::prompt_of(6, 2), sampled(5, 2, 2)}};
  const std::vector<rollout::GenerateOutput> outputs = engine.generate(requests);
  const int64_t r = 7, pad = 0;
  const data::Batch batch = rollout::to_training_batch(requests, outputs, r, pad);
  REQUIRE(batch.size() == int64_t(outputs.size()));
  const int64_t p = 6;  // the longest prompt
  const at::Tensor ids = batch.tensor(data::fields::kInputIds), mask = batch.tensor(data::fields::kAttentionMask);
  const at::Tensor pos = batch.tensor(data::fields::kPositionIds), resp = batch.tensor(data::fields::kResponses);
  const at::Tensor rmask = batch.tensor(data::fields::kResponseMask);
  const at::Tensor lps = batch.tensor(data::fields::kRolloutLogProbs);
  CHECK(ids.sizes() == at::IntArrayRef({batch.size(), p + r}));
  for (int64_t row = 0; row < batch.size(); ++row) {
    const rollout::GenerateOutput& out = outputs[size_t(row)];
    const TokenIds& prompt = requests[size_t(out.request_index)].prompt_ids;
    const int64_t len = int64_t(prompt.size()), n = int64_t(out.token_ids.size()), lead = p - len;
    CHECK(batch.column(data::fields::kUid)[size_t(row)] == std::to_string(out.request_index));
    for (int64_t k = 0; k < p + r; ++k) {
      const bool is_prompt = k >= lead && k < p, is_response = k >= p && k - p < n;
      const int64_t expected = is_prompt ? prompt[size_t(k - lead)] : is_response ? out.token_ids[size_t(k - p)] : pad;
      CHECK(ids[row][k].item<int64_t>() == expected);
      CHECK(mask[row][k].item<int64_t>() == ((is_prompt || is_response) ? 1 : 0));
      if (is_prompt) CHECK(pos[row][k].item<int64_t>() == k - lead);
      if (k >= p) CHECK(pos[row][k].item<int64_t>() == len - 1 + (k - p + 1));
    }
    for (int64_t k = 0; k < r; ++k) {
      CHECK(resp[row][k].item<int64_t>() == (k < n ? out.token_ids[size_t(k)] : pad));
      CHECK(rmask[row][k].item<float>() == (k < n ? 1.0f : 0.0f));
      CHECK(lps[row][k].item<float>() == (k < n ? out.logprobs[size_t(k)] : 0.0f));
    }
  }
  // An error output names its request; a response longer than R is an Error naming its row.
  std::vector<rollout::GenerateOutput> failed = outputs;
  failed[2].error = "refused for the test";
  CHECK_THROWS_WITH(rollout::to_training_batch(requests, failed, r, pad),
                    Contains("request 1") && Contains("refused for the test"));
  CHECK_THROWS_WITH(rollout::to_training_batch(requests, outputs, 4, pad), Contains("more than response_length 4"));
  std::vector<rollout::GenerateOutput> stray = outputs;
  stray[0].request_index = 5;
  CHECK_THROWS_WITH(rollout::to_training_batch(requests, stray, r, pad), Contains("request 5"));
}

TEST_CASE("library path: outcome scores sit on each response's last token", "[library]") {
  const at::Tensor mask = at::tensor(std::vector<float>{1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1}).view({4, 4});
  const at::Tensor scores = data::outcome_token_scores(mask, {0.5, -1.0, 3.0, 2.0});
  const std::vector<float> expected = {0, 0, 0.5f, 0, -1.0f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2.0f};
  CHECK(scores.equal(at::tensor(expected).view({4, 4})));  // the empty row gets no score
  CHECK_THROWS_WITH(data::outcome_token_scores(mask, {1.0}), Contains("1 scores for 4 rows"));
}

TEST_CASE("library path: an actor at a constant learning rate", "[library]") {
  model::DecoderLM policy = test::tiny_model(36);
  train::Actor actor(policy, actor_config(), 3e-3);
  rollout::RolloutEngine engine(actor.compute_model());
  for (int step = 0; step < 2; ++step) {
    const nlohmann::json metrics = grpo_step(engine, actor);
    CHECK(metrics["actor/lr"].get<double>() == 3e-3);
    CHECK(std::isfinite(metrics["actor/pg_loss"].get<double>()));
    engine.update_weights(actor.compute_model());
  }
  CHECK(train::LrSchedule::constant(3e-3).lr(0) == 3e-3);
  CHECK(train::LrSchedule::constant(3e-3).lr(1000) == 3e-3);
  CHECK_THROWS_WITH(train::Actor(policy, actor_config(), 0.0), Contains("optim.lr"));
}

}  // namespace
