// GRPO on the tiny model with verlpp as a library: sample 4 responses to each of 2 prompts,
// score them, and update the policy; twice. The reward is the share of digits in the decoded
// response. Usage: grpo_step <model folder with config.json and tokenizer.json> (examples/tiny).
#include <verlpp/algo/advantages.hpp>
#include <verlpp/data/rl_batch.hpp>
#include <verlpp/model/model_config.hpp>
#include <verlpp/model/tokenizer.hpp>
#include <verlpp/rollout/training_batch.hpp>
#include <verlpp/train/actor.hpp>

#include <cctype>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

using namespace verlpp;

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : "examples/tiny";
  const model::Tokenizer tokenizer = model::Tokenizer::from_file(dir);
  model::DecoderLM policy(model::load_model_config(dir));
  policy.init_weights(/*seed=*/1);
  train::Actor actor(policy, train::ActorConfig{}, /*learning_rate=*/1e-3);
  rollout::RolloutEngine engine(actor.compute_model());  // shares the actor's weights
  const TokenId pad = policy.config().pad_token_id.value_or(0);
  const int64_t response_length = 16;

  rollout::SamplingParams sampling;
  sampling.n = 4;  // one GRPO group per prompt
  sampling.max_new_tokens = response_length;
  std::vector<rollout::GenerateRequest> requests;
  for (const char* prompt : {"12+7=", "30-4="}) requests.push_back({tokenizer.encode(prompt), sampling});

  for (int step = 1; step <= 2; ++step) {
    data::Batch batch = rollout::to_training_batch(requests, engine.generate(requests), response_length, pad);
    std::vector<double> scores;
    const at::Tensor responses = batch.tensor(data::fields::kResponses);
    const at::Tensor mask = batch.tensor(data::fields::kResponseMask);
    for (int64_t row = 0; row < batch.size(); ++row) {
      const int64_t len = mask[row].sum().item<int64_t>();
      const TokenId* ids = responses[row].data_ptr<TokenId>();
      const std::string text = tokenizer.decode(TokenIds(ids, ids + len), /*skip_special_tokens=*/true);
      double digits = 0;
      for (unsigned char c : text) digits += std::isdigit(c) ? 1 : 0;
      scores.push_back(text.empty() ? 0.0 : digits / double(text.size()));
    }
    batch.set(data::fields::kOldLogProbs, actor.compute_log_prob(batch, /*with_entropy=*/false).log_probs);
    algo::AdvantageInputs in;
    in.token_level_rewards = data::outcome_token_scores(mask, scores);
    in.response_mask = mask;
    for (const auto& uid : batch.column(data::fields::kUid)) in.index.push_back(uid.get<std::string>());
    batch.set(data::fields::kAdvantages, algo::compute_advantage("grpo", in).advantages);

    const nlohmann::json metrics = actor.update_policy(batch);
    engine.update_weights(actor.compute_model());  // generate() refuses weights changed since
    double mean_score = 0;
    for (double s : scores) mean_score += s / double(scores.size());
    std::printf("step %d: score %.4f pg_loss %.6f grad_norm %.6f lr %g\n", step, mean_score,
                metrics["actor/pg_loss"].get<double>(), metrics["actor/grad_norm"].get<double>(),
                metrics["actor/lr"].get<double>());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "grpo_step: %s\n", e.what());
  return 1;
}
