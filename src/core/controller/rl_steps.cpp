// The RL loop: one step function per algorithm family, each in verl's order (fit() of
// RayPPOTrainer): generate -> reward -> (reference) -> old log-probs -> (values) -> KL in reward
// -> advantages -> (critic update) -> actor update -> weight sync. Then validation and
// checkpoints on their frequencies, and one metrics row per step.
#include "rl_state.hpp"

#include <verlpp/config/keys.hpp>
#include <verlpp/tracking/metrics_log.hpp>
#include <verlpp/tracking/validation_metrics.hpp>
#include <verlpp/rollout/engine.hpp>
#include <verlpp/rollout/sampling.hpp>

#include "../util/files.hpp"

#include <ATen/ops/from_blob.h>

#include <map>

namespace verlpp::controller {
namespace {

using json = nlohmann::json;

struct StepOutput {
  json metrics = json::object();
  Batch batch;
  std::vector<std::string> reward_extras;  // the batch's reward-extra columns (compute_scores)
};

void merge_into(json& metrics, const json& more) {
  for (const auto& [key, value] : more.items()) metrics[key] = value;
}

// The per-step seed base of the rollout: a function of the run seed and the step alone, so a
// resumed run samples what the uninterrupted run sampled.
uint64_t rollout_seed(const RlTrainer::State& s, int64_t step, uint64_t salt) {
  return rollout::sample_seed(s.seed * 0x9E3779B97F4A7C15ULL + salt, step) & ((uint64_t(1) << 52) - 1);
}

// The tail every family shares: the KL penalty in the reward and the advantages, the critic
// update (when there is a critic), the actor update once critic_warmup steps have passed, the
// weight sync to the rollout engine, and the step's data metrics.
void advantages_update_and_sync(RlTrainer::State& s, StepOutput& out) {
  json& m = out.metrics;
  run_stage(s, "adv", m, [&] {
    apply_reward_kl(s, out.batch, m);
    compute_advantages(s, out.batch);
  });
  // The updates run on their roles' pools; the critic's metrics come to every rank from its
  // pool's first rank (the actor's are on rank 0 already).
  if (s.use_critic)
    run_stage(s, "update_critic", m, [&] {
      json critic = json::object();
      if (s.critic) {
        critic = s.critic->update_critic(out.batch);
        s.critic->trained_model().offload_parameters();  // param_offload: off the device until the next values
      }
      merge_into(m, share_json_from_pool(s, config::RlRole::kCritic, std::move(critic)));
    });
  if (s.global_step + 1 > s.settings.trainer.critic_warmup) {
    run_stage(s, "update_actor", m, [&] {
      if (s.actor) merge_into(m, s.actor->update_policy(out.batch));
    });
    run_stage(s, "sync", m, [&] { sync_rollout_weights(s, m); });
  }
  add_data_metrics(out.batch, s.use_critic, m);
}

// Generation through the actor's old log-probs: the part every family starts with.
void rollout_and_score(RlTrainer::State& s, StepOutput& out, const Batch& prompts) {
  json& m = out.metrics;
  const uint64_t seed = rollout_seed(s, s.global_step + 1, 0);
  out.batch = run_stage(
      s, "gen", m, [&] { return generate_sequences(s, prompts, s.n, rollout_decoding(s.settings.rollout), seed); });
  // How this rank's engine ran: decode steps replayed as device graphs, and the captures the
  // step paid for (the pool is re-created after each sleep, and the graphs with it). Rank 0,
  // which writes the metrics, always has an engine (it is in the actor's pool).
  if (s.engine) {
    const rollout::GenerateStats& gen = s.engine->last_stats();
    m["perf/rollout_decode_steps"] = gen.num_decode_steps;
    m["perf/rollout_graph_steps"] = gen.num_graph_steps;
    m["perf/rollout_overlapped_steps"] = gen.num_overlapped_steps;
    m["perf/rollout_graph_captures"] = gen.num_graph_captures;
    m["timing_s/gen_graph_capture"] = gen.graph_capture_seconds;
  }
  release_engine_weights(s);
  run_stage(s, "reward", m, [&] {
    if (s.settings.reward_model.enable) compute_rm_scores(s, out.batch);
    out.reward_extras = compute_scores(s, out.batch, &m);
  });
  if (s.use_reference) run_stage(s, "ref", m, [&] { compute_reference_log_prob(s, out.batch); });
  m["actor/entropy"] = run_stage(s, "old_log_prob", m, [&] { return compute_old_log_prob(s, out.batch); });
  add_rollout_drift_metrics(out.batch, m);
}

// gae: PPO with a learned value baseline.
StepOutput step_with_critic(RlTrainer::State& s) {
  StepOutput out;
  const Batch prompts = next_prompt_batch(s);
  rollout_and_score(s, out, prompts);
  run_stage(s, "values", out.metrics, [&] { compute_values(s, out.batch); });
  advantages_update_and_sync(s, out);
  return out;
}

// grpo, rloo, opo, gpg, grpo_passk, reinforce_plus_plus[_baseline]: baselines from the group
// of n samples per prompt (or none), no critic.
StepOutput step_critic_free(RlTrainer::State& s) {
  StepOutput out;
  const Batch prompts = next_prompt_batch(s);
  rollout_and_score(s, out, prompts);
  advantages_update_and_sync(s, out);
  return out;
}

// remax: the baseline of each prompt is the reward of its greedy response.
StepOutput step_remax(RlTrainer::State& s) {
  StepOutput out;
  json& m = out.metrics;
  const Batch prompts = next_prompt_batch(s);
  std::vector<float> baselines = run_stage(s, "gen_max", m, [&] {
    Batch greedy = generate_sequences(s, prompts, 1, Decoding{}, rollout_seed(s, s.global_step + 1, 1));
    if (s.settings.reward_model.enable)
      compute_rm_scores(s, greedy);  // verl's remax scores its baseline with the RM too
    compute_scores(s, greedy);
    std::vector<float> b;
    for (const auto& score : greedy.column("score")) b.push_back(score.get<float>());
    return b;
  });
  rollout_and_score(s, out, prompts);
  std::vector<float> repeated;  // interleaved, as the batch's rows
  for (float b : baselines)
    for (int64_t k = 0; k < s.n; ++k) repeated.push_back(b);
  out.batch.set("reward_baselines",
                at::from_blob(repeated.data(), {int64_t(repeated.size())}, at::TensorOptions().dtype(at::kFloat))
                    .clone()
                    .to(s.device));
  advantages_update_and_sync(s, out);
  return out;
}

StepOutput run_step(RlTrainer::State& s) {
  switch (s.family) {
    case AlgorithmFamily::kWithCritic:
      return step_with_critic(s);
    case AlgorithmFamily::kGreedyBaseline:
      return step_remax(s);
    case AlgorithmFamily::kCriticFree:
      break;
  }
  return step_critic_free(s);
}

}  // namespace

json validate_model(RlTrainer::State& s) {
  json m = json::object();
  if (!s.val_set) return m;
  const int64_t size = int64_t(s.val_set->size());
  const int64_t chunk = s.settings.data.val_batch_size.value_or(size);
  const config::ValKwargsSettings& val = s.settings.rollout.val_kwargs;
  const Decoding decoding = validation_decoding(val);
  // Sampled validation draws from seeds of the run seed and the step alone (as the rollout's),
  // so a resumed run validates as the uninterrupted one did.
  const uint64_t seed_base = decoding.greedy ? 0 : rollout_seed(s, s.global_step, 2);
  std::map<std::string, std::pair<double, int64_t>> by_source;
  double total = 0, length = 0;
  const config::TrainerSettings& t = s.settings.trainer;
  const bool keep_samples = s.is_writer() && (t.validation_data_dir || t.log_val_generations > 0);
  std::vector<tracking::GenerationRecord> samples;
  // verl's inputs to process_validation_metrics: "reward" (the score) and the reward extras.
  tracking::ValidationSamples scored;
  for (int64_t begin = 0; begin < size; begin += chunk) {
    std::vector<size_t> indices;
    for (int64_t i = begin; i < std::min(size, begin + chunk); ++i) indices.push_back(size_t(i));
    Batch batch = generate_sequences(s, collate_prompts(*s.val_set, indices, s.pad_id, "val:"), val.n, decoding,
                                     seed_base + uint64_t(begin));
    const std::vector<std::string> extras = compute_scores(s, batch);
    const auto& sources = batch.column("data_source");
    const auto& scores = batch.column("score");
    const auto& uids = batch.column("uid");
    const size_t before = scored.uids.size();
    for (size_t i = 0; i < scores.size(); ++i) {
      auto& [sum, count] = by_source[sources[i].get<std::string>()];
      sum += scores[i].get<double>();
      ++count;
      total += scores[i].get<double>();
      scored.data_sources.push_back(sources[i].get<std::string>());
      scored.uids.push_back(uids[i].get<std::string>());
    }
    auto append = [&](const std::string& var, const std::vector<json>& column) {
      std::vector<json>& values = scored.vars[var];
      values.resize(before, nullptr);  // rows of earlier chunks whose scorers did not report it
      values.insert(values.end(), column.begin(), column.end());
    };
    append("reward", scores);
    for (const std::string& extra : extras)
      if (extra != "reward") append(extra, batch.column(extra));
    for (auto& [var, values] : scored.vars) values.resize(scored.uids.size(), nullptr);
    length += data::response_attention(batch).sum().item<double>();
    if (keep_samples)
      for (tracking::GenerationRecord& r : generation_records(s, batch, /*with_advantage=*/false, extras))
        samples.push_back(std::move(r));
    s.progress("val", std::min(size, begin + chunk), size);
  }
  if (keep_samples) record_val_generations(s, samples);
  merge_into(m, tracking::validation_metric_names(tracking::process_validation_metrics(scored)));
  // The names before verl's (one release, docs/training.md): the mean score per source and over
  // all responses, and the mean response length.
  const double responses = double(scored.uids.size());
  for (const auto& [source, sc] : by_source) m["val/" + source + "/acc"] = sc.first / double(sc.second);
  m["val/acc"] = total / responses;
  m["val/response_length/mean"] = length / responses;
  return m;
}

RlTrainer::RlTrainer(config::Config config, TrainerHooks hooks) : s_(std::make_unique<State>()) {
  s_->config = std::move(config);
  s_->hooks = std::move(hooks);
  setup_trainer(*s_);
}

RlTrainer::~RlTrainer() = default;

json RlTrainer::validate() { return validate_model(*s_); }
int64_t RlTrainer::global_step() const { return s_->global_step; }
int64_t RlTrainer::total_steps() const { return s_->total_steps; }
const std::string& RlTrainer::run_dir() const { return s_->run_dir; }
const config::Config& RlTrainer::config() const { return s_->config; }
const config::RunSettings& RlTrainer::settings() const { return s_->settings; }
int32_t RlTrainer::rank() const { return s_->world.rank; }
int32_t RlTrainer::world_size() const { return s_->world.world_size; }

json RlTrainer::fit() {
  State& s = *s_;
  const config::TrainerSettings& t = s.settings.trainer;
  const std::string metrics_path = files::join(s.run_dir, "metrics.jsonl");
  const std::string samples_path = files::join(s.run_dir, "val_generations.jsonl");
  const ResumePlan plan = s.checkpoints->plan_resume(t.resume_mode, t.resume_from_path,
                                                     {"metrics.jsonl", "sft_metrics.jsonl", "val_generations.jsonl"});
  // Every rank has looked at the folder before rank 0 changes anything in it (with pools, each
  // after its own setup, which takes as long as its roles' models need).
  pools_barrier(s, "fit/start");
  for (const std::string& note : plan.notes) s.message(note);
  const std::optional<std::string>& resume_from = plan.folder;
  if (resume_from) {
    s.global_step = load_checkpoint(s, *resume_from);
    // The rows past the checkpoint (and a torn last one) go: this run writes them again.
    if (s.is_writer()) {
      for (const std::string& note :
           tracking::trim_metrics(metrics_path, s.global_step).notes(metrics_path, s.global_step))
        s.message(note);
      // val_generations.jsonl has rows at evaluations only, so only the cut applies to it.
      tracking::trim_metrics(samples_path, s.global_step);
    }
    s.message(fmt::format("resumed from {} (step {} of {})", *resume_from, s.global_step, s.total_steps));
    if (s.global_step >= s.total_steps)
      s.message(
          fmt::format("the run in {} is already complete; to train again, choose another "
                      "trainer.default_local_dir (or move this one's checkpoints and metrics away)",
                      s.run_dir));
  } else {
    if (s.is_writer()) {
      files::remove_file(metrics_path);
      files::remove_file(samples_path);
    }
    try {
      run_sft_warm_start(s);
    } catch (const std::exception& e) {
      throw Error(fmt::format("rank {} of {}, SFT warm start", s.world.rank, s.world.world_size), e.what());
    }
  }
  if (s.is_writer()) {
    s.metrics_out = files::OutputFile(metrics_path, files::OutputFile::Mode::kAppend);
    // The backends of trainer.logger follow metrics.jsonl: cut back to the checkpoint on resume.
    tracking::LoggerRun run;
    run.project = t.project_name;
    run.experiment = t.experiment_name;
    run.run_dir = s.run_dir;
    run.config = s.config.tree();
    run.total_steps = s.total_steps;
    if (resume_from) run.resumed_step = s.global_step;
    run.message = [&s](const std::string& text) { s.message(text); };
    s.loggers = tracking::make_loggers(t.logger, run);
    if (t.log_val_generations > 0)
      s.val_generations_out = files::OutputFile(samples_path, files::OutputFile::Mode::kAppend);
  }
  // Syncs what every output holds (before a checkpoint names the step).
  auto sync_outputs = [&] {
    tracking::sync_file(metrics_path);
    for (const auto& logger : s.loggers) logger->sync();
    if (s.val_generations_out.is_open()) tracking::sync_file(samples_path);
  };
  // Closes metrics.jsonl and the backends and syncs them: the rows after the last checkpoint
  // are on disk too.
  auto close_metrics = [&] {
    if (!s.metrics_out.is_open()) return;
    s.metrics_out.commit();
    tracking::sync_file(metrics_path);
    for (const auto& logger : s.loggers) logger->finish();
    if (s.val_generations_out.is_open()) {
      s.val_generations_out.commit();
      tracking::sync_file(samples_path);
    }
  };
  auto write_row = [&](const json& row) {
    if (!s.is_writer()) return;
    s.metrics_out.write(row.dump() + "\n");
    s.metrics_out.flush();  // on disk before the next step, or an error naming the file
    const int64_t step = row.value("step", int64_t(0));
    for (const auto& logger : s.loggers) logger->log(row, step);
    if (s.hooks.on_step) s.hooks.on_step(row);
  };

  json last = json::object();
  if (!resume_from && s.val_set && t.val_before_train) {
    last = validate_model(s);
    last["step"] = 0;
    write_row(last);
    if (t.val_only) {
      close_metrics();
      return last;
    }
  }
  const int64_t test_freq = t.test_freq, save_freq = t.save_freq;
  while (s.global_step < s.total_steps) {
    const auto start = std::chrono::steady_clock::now();
    StepOutput out = run_step(s);
    ++s.global_step;
    dump_rollout_generations(s, out.batch, out.reward_extras);
    const bool is_last = s.global_step == s.total_steps;
    json& m = out.metrics;
    if (s.val_set && every(test_freq, s.global_step, is_last))
      run_stage(s, "testing", m, [&] { merge_into(m, validate_model(s)); });
    const bool save = every(save_freq, s.global_step, is_last);
    if (save) run_stage(s, "save_checkpoint", m, [&] { write_checkpoint(s); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    m["timing_s/step"] = seconds;
    add_throughput_metrics(out.batch, seconds, m);
    add_memory_metrics(s, m);
    m["training/global_step"] = s.global_step;
    m["training/epoch"] = s.loader->epoch();
    m["step"] = s.global_step;
    try {
      write_row(m);
      // The row is on disk (in metrics.jsonl and every backend) before the checkpoint names its
      // step: a resume from this checkpoint finds every row up to it, and one from an earlier
      // checkpoint drops this row and writes it again (trim_metrics and each backend's cut), so
      // no output loses or repeats a step.
      if (save && s.is_writer()) sync_outputs();
    } catch (...) {
      // The step ends uncommitted: its written checkpoint goes too, the last committed one stays.
      if (save && s.is_writer()) s.checkpoints->abort(s.global_step);
      throw;
    }
    if (save) {
      try {
        commit_checkpoint(s);
      } catch (const std::exception& e) {
        throw Error(
            fmt::format("rank {} of {}, step {} commit_checkpoint", s.world.rank, s.world.world_size, s.global_step),
            e.what());
      }
    }
    s.progress("train", s.global_step, s.total_steps);
    last = m;
  }
  close_metrics();
  // No rank leaves (and rank 0 stops serving the store) while another still needs it.
  pools_barrier(s, "fit/end");
  return last;
}

}  // namespace verlpp::controller
