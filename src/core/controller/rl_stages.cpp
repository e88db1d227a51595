// The stages of one RL step (see rl_state.hpp), each a small function over the step's Batch.
#include <ATen/core/grad_mode.h>

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
std::vector<std::vector<int64_t>> prompt_tokens(const Batch& prompts) {
  at::Tensor ids = prompts.tensor("input_ids").cpu().contiguous(),
             mask = prompts.tensor("attention_mask").cpu().to(at::kLong).contiguous();
  const int64_t b = ids.size(0), t = ids.size(1);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(b));
  const int64_t* ip = ids.data_ptr<int64_t>();
  const int64_t* mp = mask.data_ptr<int64_t>();
  for (int64_t r = 0; r < b; ++r)
    for (int64_t k = 0; k < t; ++k)
      if (mp[r * t + k]) out[size_t(r)].push_back(ip[r * t + k]);
  return out;
}

// Generated samples of some prompts: token ids per sample and a log-prob per token.
struct Samples {
  std::vector<TokenIds> responses;
  std::vector<std::vector<float>> logprobs;
};

// Samples as padded host tensors, the form they travel in between ranks: ids [rows, R] (padded
// with the pad id), lengths [rows], log-probs [rows, R] (padded with 0), on the CPU.
struct PaddedSamples {
  at::Tensor ids, lens, lps;
};

// `samples` in the first rows of `rows` padded ones.
PaddedSamples pad_samples(const RlTrainer::State& s, const Samples& samples, int64_t rows) {
  const int64_t r_len = s.response_length;
  // Host buffers first (one element write each), then one tensor per field.
  std::vector<int64_t> ids(size_t(rows * r_len), s.pad_id), lens(size_t(rows), 0);
  std::vector<float> lps(size_t(rows * r_len), 0.0f);
  for (size_t row = 0; row < samples.responses.size(); ++row) {
    lens[row] = int64_t(samples.responses[row].size());
    std::copy(samples.responses[row].begin(), samples.responses[row].end(), ids.begin() + int64_t(row) * r_len);
    std::copy(samples.logprobs[row].begin(), samples.logprobs[row].end(), lps.begin() + int64_t(row) * r_len);
  }
  auto tensor = [](auto& data, std::vector<int64_t> shape, at::ScalarType type) {
    return at::from_blob(data.data(), shape, at::TensorOptions().dtype(type)).clone();
  };
  return {tensor(ids, {rows, r_len}, at::kLong), tensor(lens, {rows}, at::kLong),
          tensor(lps, {rows, r_len}, at::kFloat)};
}

// Appends rows [first, first + count) of `padded` (on the CPU, contiguous) to `out`.
void append_padded_rows(const PaddedSamples& padded, int64_t first, int64_t count, Samples& out) {
  const int64_t r_len = padded.ids.size(1);
  for (int64_t g = first; g < first + count; ++g) {
    const int64_t len = padded.lens.data_ptr<int64_t>()[g];
    const int64_t* row_ids = padded.ids.data_ptr<int64_t>() + g * r_len;
    out.responses.emplace_back(row_ids, row_ids + len);
    const float* row_lps = padded.lps.data_ptr<float>() + g * r_len;
    out.logprobs.emplace_back(row_lps, row_lps + len);
  }
}

// With several engines, each generated the samples of its own prompt range [begin_e, end_e)
// (every rank of a split engine the same ones); returns everyone's, in prompt order, on every
// rank of the actor's pool. Every rank sends its rows, padded to the longest range; the first
// rank's of each engine are kept.
Samples gather_samples(const RlTrainer::State& s, Samples local, const std::vector<int64_t>& begins, int64_t n) {
  const int64_t engines = s.num_engines();
  int64_t chunk = 0;
  for (int64_t e = 0; e < engines; ++e) chunk = std::max(chunk, (begins[size_t(e) + 1] - begins[size_t(e)]) * n);
  const hw::ProcessGroup& group = *s.place(config::RlRole::kActorRollout).group;  // the actor pool's ranks
  const PaddedSamples mine = pad_samples(s, local, chunk);
  auto gather = [&](const at::Tensor& t) { return group.all_gather(t.to(s.device)).cpu().contiguous(); };
  const PaddedSamples all{gather(mine.ids), gather(mine.lens), gather(mine.lps)};
  Samples out;
  for (int64_t e = 0; e < engines; ++e)
    append_padded_rows(all, e * s.rollout_tp * chunk, (begins[size_t(e) + 1] - begins[size_t(e)]) * n, out);
  return out;
}

// The actor pool's samples (`rows` of them) on every rank, sent by the pool's first rank, when
// the pool is not every rank.
Samples share_samples(const RlTrainer::State& s, Samples samples, int64_t rows) {
  const RlTrainer::State::RolePlacement& actor = s.place(config::RlRole::kActorRollout);
  if (actor.whole_world) return samples;
  const bool root = s.world.rank == actor.root;
  PaddedSamples padded;
  if (root) padded = pad_samples(s, samples, rows);
  auto share = [&](const at::Tensor& t) {
    return share_from_pool(s, config::RlRole::kActorRollout, t).cpu().contiguous();
  };
  padded = {share(padded.ids), share(padded.lens), share(padded.lps)};
  if (root) return samples;
  Samples out;
  append_padded_rows(padded, 0, rows, out);
  return out;
}

// This engine's share of the prompts, generated, then every engine's on every rank of the actor's pool.
Samples generate_on_engines(RlTrainer::State& s, const Batch& prompts, const std::vector<std::vector<int64_t>>& tokens,
                            const rollout::SamplingParams& params, int64_t n, uint64_t seed_base) {
  const config::RolloutSettings& r = s.settings.rollout;
  // Data-parallel rollout: engine e (rank e of the actor's pool alone, or the t ranks it is split
  // over) generates the prompts [begins[e], begins[e+1]) with all their n samples (GRPO groups
  // stay whole); every seed is a function of the global prompt index, so the tokens do not depend
  // on the number of engines.
  const int64_t num_prompts = int64_t(tokens.size()), engines = s.num_engines();
  const int64_t per_engine = (num_prompts + engines - 1) / engines;
  std::vector<int64_t> begins;
  for (int64_t k = 0; k <= engines; ++k) begins.push_back(std::min(num_prompts, k * per_engine));
  const int64_t first = begins[size_t(s.engine_index())], last = begins[size_t(s.engine_index()) + 1];
  std::vector<rollout::GenerateRequest> requests;
  requests.reserve(size_t(last - first));
  for (int64_t i = first; i < last; ++i) {
    rollout::GenerateRequest q{tokens[size_t(i)], params};
    q.sampling.seed = seed_base + uint64_t(i);
    requests.push_back(std::move(q));
  }
  // Weights released for the training stages (release_engine_weights) come back from the actor.
  if (s.engine->weights_released()) {
    json ignored;
    sync_rollout_weights(s, ignored);
  }
  if (s.engine->is_sleeping()) s.engine->wake();
  const int64_t local_total = (last - first) * n;
  std::vector<rollout::GenerateOutput> outputs;
  if (!requests.empty())
    outputs = s.engine->generate(requests,
                                 [&](int64_t done, int64_t) { s.progress("gen", done * engines, num_prompts * n); });
  if (r.free_cache_engine) s.engine->sleep();  // the pool's memory goes back for training

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
  return engines > 1 ? gather_samples(s, std::move(local), begins, n) : std::move(local);
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
  // The actor pool's ranks generate; the others receive the samples from its first rank.
  Samples all;
  if (s.runs(config::RlRole::kActorRollout)) all = generate_on_engines(s, prompts, tokens, params, n, seed_base);
  all = share_samples(s, std::move(all), num_prompts * n);
  Batch batch = data::append_samples(prompts.repeat(n, /*interleave=*/true), all.responses, all.logprobs,
                                     s.response_length, s.pad_id);
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
    at::Tensor lengths = batch.tensor("response_mask").sum(1).to(at::kLong).cpu().contiguous();
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
  at::Tensor lengths = batch.tensor("response_mask").sum(1).to(at::kLong).cpu().contiguous();
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
  batch.set(data::fields::kTokenLevelScores, data::outcome_token_scores(batch.tensor("response_mask"), values));
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
