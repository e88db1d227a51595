// The stages of one RL step (see rl_state.hpp), each a small function over the step's Batch.
#include <ATen/core/grad_mode.h>

#include "rl_samples.hpp"
#include "rl_state.hpp"

#include <verlpp/algo/advantages.hpp>
#include <verlpp/algo/agg_loss.hpp>
#include <verlpp/controller/engine_sync.hpp>
#include <verlpp/data/rl_batch.hpp>
#include <verlpp/train/logprob.hpp>

#include <ATen/ops/cat.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>

#include <map>

namespace verlpp::controller {

using json = nlohmann::json;

Batch next_prompt_batch(RlTrainer::State& s) {
  const std::vector<size_t> indices = s.loader->next();
  return collate_prompts(*s.train_set, indices, s.pad_id, fmt::format("s{}:", s.global_step + 1));
}

namespace {

// The prompt tokens of each row of a left-padded prompt batch.
std::vector<TokenIds> prompt_tokens(const Batch& prompts) {
  at::Tensor ids = prompts.tensor("input_ids").cpu().contiguous(),
             mask = prompts.tensor("attention_mask").cpu().to(at::kLong).contiguous();
  const int64_t b = ids.size(0), t = ids.size(1);
  std::vector<TokenIds> out(static_cast<size_t>(b));
  const int64_t* ip = ids.data_ptr<int64_t>();
  const int64_t* mp = mask.data_ptr<int64_t>();
  for (int64_t r = 0; r < b; ++r)
    for (int64_t k = 0; k < t; ++k)
      if (mp[r * t + k]) out[size_t(r)].push_back(ip[r * t + k]);
  return out;
}

// The single-turn samples of prompts [first, last) from this rank's engine's generate().
Samples generate_single_turn(RlTrainer::State& s, const Batch& prompts, const std::vector<TokenIds>& tokens,
                             int64_t first, int64_t last, const rollout::SamplingParams& params, int64_t n,
                             uint64_t seed_base) {
  std::vector<rollout::GenerateRequest> requests;
  requests.reserve(size_t(last - first));
  for (int64_t i = first; i < last; ++i) {
    rollout::GenerateRequest q{tokens[size_t(i)], params};
    q.sampling.seed = seed_base + uint64_t(i);
    requests.push_back(std::move(q));
  }
  const int64_t local_total = (last - first) * n, engines = s.num_engines(), total = int64_t(tokens.size()) * n;
  std::vector<rollout::GenerateOutput> outputs;
  if (!requests.empty())
    outputs = s.engine->generate(requests, [&](int64_t done, int64_t) { s.progress("gen", done * engines, total); });
  Samples local;
  local.responses.reserve(size_t(local_total));
  local.logprobs.reserve(size_t(local_total));
  for (const auto& out : outputs) {
    if (!out.error.empty())
      throw Error(fmt::format("prompt row {} ({})", first + out.request_index,
                              prompts.column("uid")[size_t(first + out.request_index)].dump()),
                  out.error);
    local.responses.push_back(out.token_ids);
    local.logprobs.push_back(out.logprobs);
  }
  if (int64_t(local.responses.size()) != local_total)
    throw Error("rollout", fmt::format("the engine returned {} samples for {} x {} requested", local.responses.size(),
                                       last - first, n));
  return local;
}

// This engine's share of the prompts, generated, then every engine's on every rank of the actor's pool.
Samples generate_on_engines(RlTrainer::State& s, const Batch& prompts, const std::vector<TokenIds>& tokens,
                            const rollout::SamplingParams& params, int64_t n, uint64_t seed_base, bool multi_turn) {
  const config::RolloutSettings& r = s.settings.rollout;
  // Data-parallel rollout: engine e (rank e of the actor's pool alone, or the t ranks it is split
  // over) generates the prompts [begins[e], begins[e+1]) with all their n samples (GRPO groups
  // stay whole); every seed is a function of the global prompt (or trajectory) index, so the
  // tokens do not depend on the number of engines.
  const int64_t num_prompts = int64_t(tokens.size()), engines = s.num_engines();
  const int64_t per_engine = (num_prompts + engines - 1) / engines;
  std::vector<int64_t> begins;
  for (int64_t k = 0; k <= engines; ++k) begins.push_back(std::min(num_prompts, k * per_engine));
  const int64_t first = begins[size_t(s.engine_index())], last = begins[size_t(s.engine_index()) + 1];
  // Weights released for the training stages (release_engine_weights) come back from the actor.
  if (s.engine->weights_released()) {
    json ignored;
    sync_rollout_weights(s, ignored);
  }
  if (s.engine->is_sleeping()) s.engine->wake();
  Samples local = multi_turn ? generate_trajectories(s, prompts, tokens, first, last, params, n, seed_base)
                             : generate_single_turn(s, prompts, tokens, first, last, params, n, seed_base);
  if (r.free_cache_engine) s.engine->sleep();  // the pool's memory goes back for training
  return engines > 1 ? gather_samples(s, std::move(local), begins, n, multi_turn) : std::move(local);
}

// Whether a prompt batch runs the agent loop: a row names tool_agent (the same on every rank).
bool runs_agent_loop(const Batch& prompts) {
  if (!prompts.has_column("agent_loop")) return false;
  for (const json& loop : prompts.column("agent_loop"))
    if (loop.get<std::string>() != agent::kSingleTurnAgent) return true;
  return false;
}

// The agent loop's counts as the batch's columns (verl's __num_turns__ is num_turns here).
void set_trajectory_columns(Batch& batch, const std::vector<TrajectoryCounts>& counts) {
  std::vector<json> turns, calls, malformed, ends;
  for (const TrajectoryCounts& c : counts) {
    turns.push_back(c.num_turns);
    calls.push_back(c.tool_calls);
    malformed.push_back(c.malformed_calls);
    ends.push_back(agent::termination_name(agent::Termination(c.termination)));
  }
  batch.set_column("num_turns", std::move(turns));
  batch.set_column("tool_call_counts", std::move(calls));
  batch.set_column("malformed_tool_calls", std::move(malformed));
  batch.set_column("termination", std::move(ends));
}

}  // namespace

Decoding rollout_decoding(const config::RolloutSettings& r) { return {!r.do_sample, r.temperature, r.top_k, r.top_p}; }

Decoding validation_decoding(const config::ValKwargsSettings& v) {
  return {!v.do_sample, v.temperature, v.top_k, v.top_p};
}

Batch generate_sequences(RlTrainer::State& s, const Batch& prompts, int64_t n, const Decoding& decoding,
                         uint64_t seed_base) {
  const config::RolloutSettings& r = s.settings.rollout;
  rollout::SamplingParams params;
  params.n = n;
  params.max_new_tokens = s.response_length;
  params.ignore_eos = r.ignore_eos;
  if (decoding.greedy) {
    params.temperature = 0.0;
  } else {
    params.temperature = decoding.temperature;
    params.top_k = std::max<int64_t>(0, decoding.top_k);
    params.top_p = decoding.top_p;
  }
  const auto tokens = prompt_tokens(prompts);
  const int64_t num_prompts = int64_t(tokens.size());
  const bool multi_turn = runs_agent_loop(prompts);
  // The actor pool's ranks generate; the others receive the samples from its first rank.
  Samples all;
  if (s.runs(config::RlRole::kActorRollout))
    all = generate_on_engines(s, prompts, tokens, params, n, seed_base, multi_turn);
  all = share_samples(s, std::move(all), num_prompts * n, multi_turn);
  const Batch repeated = prompts.repeat(n, /*interleave=*/true);
  Batch batch = multi_turn ? data::append_trajectories(repeated, all.responses, all.masks, all.logprobs,
                                                       s.response_length, s.pad_id)
                           : data::append_samples(repeated, all.responses, all.logprobs, s.response_length, s.pad_id);
  if (multi_turn) set_trajectory_columns(batch, all.counts);
  // Collation happens on the host; the trainer's forwards run on the device.
  move_to(batch, s.device);
  return batch;
}

std::vector<std::string> compute_scores(RlTrainer::State& s, Batch& batch, json* metrics) {
  if (batch.has_tensor(data::fields::kRmScores)) {
    // As verl's reward managers: a batch the reward model scored takes its scores as they are
    // (no rule function runs, so there are no reward extras).
    const at::Tensor rm = batch.tensor(data::fields::kRmScores);
    batch.set(data::fields::kTokenLevelScores, rm);
    const at::Tensor sums = rm.sum(1).to(at::kDouble).cpu().contiguous();
    std::vector<json> scores, texts;
    at::Tensor responses = batch.tensor("responses").cpu().contiguous();
    const at::Tensor lengths = data::response_lengths(batch);
    for (int64_t row = 0; row < batch.size(); ++row) {
      scores.push_back(sums.data_ptr<double>()[row]);
      const TokenId* ids = responses.data_ptr<int64_t>() + row * responses.size(1);
      texts.push_back(s.tokenizer->decode(TokenIds(ids, ids + lengths.data_ptr<int64_t>()[row]), true));
    }
    batch.set_column("score", std::move(scores));
    batch.set_column("response_text", std::move(texts));
    return {};
  }
  at::Tensor responses = batch.tensor("responses").cpu().contiguous();
  // The whole response, tool segments included (verl decodes up to the last attended token).
  const at::Tensor lengths = data::response_lengths(batch);
  const int64_t b = batch.size(), r = responses.size(1);
  const auto& sources = batch.column("data_source");
  const auto& truths = batch.column("ground_truth");
  const auto& extras = batch.column("extra_info");
  std::vector<reward::RewardItem> items;
  items.reserve(size_t(b));
  for (int64_t row = 0; row < b; ++row) {
    const int64_t len = lengths.data_ptr<int64_t>()[row];
    const TokenId* row_ids = responses.data_ptr<int64_t>() + row * r;
    const TokenIds ids(row_ids, row_ids + len);
    items.push_back({reward::RewardInput{sources[size_t(row)].get<std::string>(),
                                         s.tokenizer->decode(ids, /*skip_special_tokens=*/true), truths[size_t(row)],
                                         extras[size_t(row)]},
                     len});
  }
  reward::ScoredBatch scored = s.rewards->score(items);
  std::vector<double> values;
  std::vector<json> scores, texts;
  // verl's reward extra info (e.g. math_dapo's acc and pred): one column per key, null in rows
  // whose scorer did not report it.
  std::map<std::string, std::vector<json>> extras_by_key;
  for (int64_t row = 0; row < b; ++row) {
    reward::RewardResult& result = scored.results[size_t(row)];
    for (auto& [key, value] : result.extra.items()) {
      auto& column = extras_by_key[key];
      column.resize(size_t(row), nullptr);
      column.push_back(std::move(value));
    }
    values.push_back(result.score);
    scores.push_back(result.score);
    texts.push_back(std::move(items[size_t(row)].input.response));
  }
  batch.set(data::fields::kTokenLevelScores, data::outcome_token_scores(data::response_attention(batch), values));
  batch.set_column("score", std::move(scores));
  batch.set_column("response_text", std::move(texts));
  std::vector<std::string> names;
  for (auto& [key, column] : extras_by_key) {
    if (key == "score") continue;  // the column above
    if (batch.has_column(key))
      throw Error("reward",
                  fmt::format("a reward function reports the extra '{}', which is already a batch column", key));
    column.resize(size_t(b), nullptr);
    batch.set_column(key, std::move(column));
    names.push_back(key);
  }
  if (metrics != nullptr)
    for (auto& [key, value] : scored.metrics.items()) (*metrics)[key] = value;
  return names;
}

void compute_reference_log_prob(RlTrainer::State& s, Batch& batch) {
  at::NoGradGuard no_grad;
  // A sharded or offloaded reference: its weights come back for this stage and go after it.
  if (s.ref_weights) s.ref_weights->reload();     // null on ranks outside the reference's pool
  const train::ActorConfig& ac = s.actor_config;  // the actor's forward settings (it may be on another pool)
  batch.set("ref_log_prob", dispatch_rows(s, config::RlRole::kReference, batch, [&](const Batch& rows) {
              return train::response_log_probs(
                         reference_model(s), rows.tensor("input_ids"), rows.tensor("attention_mask"),
                         rows.tensor("position_ids"), s.response_length, ac.temperature, false, ac.log_prob_chunk_rows,
                         ac.remove_padding, ac.kernels, train::LogitsInBackward::kKeep, ac.rotate_qkv)
                  .log_probs;
            }));
  if (s.ref_weights) {
    s.ref_weights->release_gathered();
    if (s.settings.ref.sharding.param_offload) s.ref_weights->offload();
  }
}

double compute_old_log_prob(RlTrainer::State& s, Batch& batch) {
  // param_offload: back for the forwards and the update
  if (s.actor) s.actor->trained_model().reload_parameters();
  // Log-probs and entropies side by side [B, 2R], so one gather brings both back.
  at::Tensor both = dispatch_rows(s, config::RlRole::kActorRollout, batch, [&](const Batch& rows) {
    train::ResponseLogProbs out = s.actor->compute_log_prob(rows, /*with_entropy=*/true);
    return at::cat({out.log_probs, out.entropy}, 1);
  });
  batch.set("old_log_probs", both.narrow(1, 0, s.response_length).contiguous());
  const at::Tensor entropy = both.narrow(1, s.response_length, s.response_length);
  return algo::agg_loss(entropy, batch.tensor("response_mask"), "token-mean").item<double>();
}

void compute_values(RlTrainer::State& s, Batch& batch) {
  // param_offload: back for the forward and the update
  if (s.critic) s.critic->trained_model().reload_parameters();
  batch.set("values", dispatch_rows(s, config::RlRole::kCritic, batch,
                                    [&](const Batch& rows) { return s.critic->compute_values(rows); }));
}

void release_engine_weights(RlTrainer::State& s) {
  // Only weights the engine owns (its own copy, or beside shared weights its fused projections):
  // release_weights leaves those it shares with the actor alone.
  if (s.engine) s.engine->release_weights();
}

void apply_reward_kl(RlTrainer::State& s, Batch& batch, json& metrics) {
  if (!s.use_kl_in_reward) {
    batch.set("token_level_rewards", batch.tensor("token_level_scores"));
    return;
  }
  algo::KLRewardOutput kl = algo::apply_kl_penalty(batch.tensor("token_level_scores"), batch.tensor("old_log_probs"),
                                                   batch.tensor("ref_log_prob"), batch.tensor("response_mask"),
                                                   *s.kl_ctrl, s.settings.algorithm.kl_penalty);
  batch.set("token_level_rewards", kl.token_level_rewards);
  metrics["actor/reward_kl_penalty"] = kl.current_kl;
  metrics["actor/reward_kl_penalty_coeff"] = kl.kl_coef;
}

void compute_advantages(RlTrainer::State& s, Batch& batch) {
  algo::AdvantageInputs in;
  in.token_level_rewards = batch.tensor("token_level_rewards");
  in.response_mask = batch.tensor("response_mask");
  if (batch.has_tensor("values")) in.values = batch.tensor("values");
  if (batch.has_tensor("reward_baselines")) in.reward_baselines = batch.tensor("reward_baselines");
  for (const auto& uid : batch.column("uid")) in.index.push_back(uid.get<std::string>());
  algo::AdvantageConfig cfg;
  cfg.gamma = s.settings.algorithm.gamma;
  cfg.lam = s.settings.algorithm.lam;
  cfg.norm_adv_by_std_in_grpo = s.settings.algorithm.norm_adv_by_std_in_grpo;
  algo::AdvantageOutputs out = algo::compute_advantage(s.estimator, in, cfg);
  batch.set("advantages", out.advantages);
  batch.set("returns", out.returns);
}

void sync_rollout_weights(RlTrainer::State& s, json& metrics, train::TrainedModel* from) {
  // An SFT without generation (verlpp train-rm's warm start), or a rank outside the actor's pool.
  if (!s.engine) return;
  train::TrainedModel& trained = from != nullptr ? *from : s.actor->trained_model();
  train::ShardedWeights* units = trained.sharded_weights();
  const bool same_dtype = s.engine->model().options().dtype == s.actor->compute_model().options().dtype;
  EngineSyncReport report;
  if (units != nullptr && !(same_dtype && engine_shares_actor_weights(s))) {
    // Sharded or offloaded actor weights: unit by unit (each gathered, the engine's part copied
    // into its own buffers, freed), so no rank ever holds a second whole copy besides the engine's.
    trained.reload_parameters();
    report = sync_engine_from_units(*units, *s.engine);
    trained.offload_parameters();
  } else {
    // From the actor's compute copy when it has one (mixed precision) and the engine has its
    // dtype: a whole engine then shares those tensors. The refresh covers master weights changed
    // outside the actor's own steps (the SFT warm start, a checkpoint load).
    s.actor->refresh_compute_model();
    // An engine in another dtype casts from the fp32 masters (not from a 16-bit copy of them).
    report = sync_engine_from_model(same_dtype ? s.actor->compute_model() : *s.actor_model, *s.engine);
  }
  constexpr double kGiB = double(int64_t(1) << 30);
  metrics["perf/weight_sync_shared"] = report.shared;
  metrics["perf/weight_sync_copied"] = report.copied;
  metrics["perf/weight_sync_gib"] = double(report.source_bytes) / kGiB;
  metrics["perf/weight_sync_received_gib"] = double(report.received_bytes) / kGiB;
  metrics["perf/weight_sync_engine_gib"] = double(report.engine_bytes) / kGiB;
  metrics["perf/weight_sync_peak_held_gib"] = double(report.peak_held_bytes) / kGiB;
}

}  // namespace verlpp::controller
