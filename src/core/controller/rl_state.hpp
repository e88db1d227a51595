// RlTrainer's internals, shared by its translation units: the objects a run owns and the
// stages of one step, each a function of the state and the step's Batch (rl_stages.cpp), so
// the family step functions (rl_steps.cpp) read as verl's fit() does.
#pragma once

#include <verlpp/algo/kl.hpp>
#include <verlpp/controller/batch.hpp>
#include <verlpp/controller/checkpoint_manager.hpp>
#include <verlpp/agent/interaction.hpp>
#include <verlpp/config/config.hpp>
#include <verlpp/controller/dataset.hpp>
#include <verlpp/tracking/generation_dump.hpp>
#include <verlpp/tracking/loggers.hpp>
#include <verlpp/reward/reward.hpp>
#include <verlpp/reward/reward_manager.hpp>
#include <verlpp/controller/rl_trainer.hpp>
#include <verlpp/config/run_settings.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/error_text.hpp>
#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/process_group.hpp>
#include <verlpp/hw/world.hpp>
#include <verlpp/model/chat_template.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/model/tokenizer.hpp>
#include <verlpp/rollout/engine.hpp>
#include <verlpp/train/actor.hpp>
#include <verlpp/train/critic.hpp>
#include <verlpp/train/data_parallel.hpp>
#include <verlpp/train/sharded_weights.hpp>

#include "../util/output_file.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace verlpp::controller {

struct RlTrainer::State {
  config::Config config = config::Config::defaults();  // the resolved tree, as checkpoints and the report record it
  config::RunSettings settings;                        // what the stages read (parsed once from `config`)
  TrainerHooks hooks;
  AlgorithmFamily family = AlgorithmFamily::kCriticFree;
  std::string estimator;
  c10::Device device = c10::Device(c10::kCPU);
  std::string plugin;  // the hardware plugin the device comes from ("" = none loaded)

  // Scale-out (SPMD): every rank runs this loop on the same data; generation and the forward
  // stages split their rows over the ranks and gather the results, updates sum gradients.
  // Only rank 0 writes files (metrics, checkpoints, report) and reports progress.
  hw::WorldInfo world;
  std::unique_ptr<hw::ProcessGroup> group;  // null with one rank
  train::DataParallel dp;                   // every rank
  // Rank 0 is always in the actor's pool (resource_pools.hpp).
  bool is_writer() const { return world.rank == 0; }
  // Resource pools (settings.pools): each role is built and runs only on its pool's ranks, over
  // the pool's own communicator; a result the other ranks need travels from the pool's first
  // rank (share_from_pool). Colocated (the default), every place is every rank.
  struct RolePlacement {
    int32_t root = 0;                         // the pool's first rank
    bool here = true;                         // this rank is one of the pool's
    bool whole_world = true;                  // the pool is every rank: nothing to send
    const hw::ProcessGroup* group = nullptr;  // the pool's communicator (null with one rank)
    train::DataParallel dp;                   // the pool's ranks
  };
  // The communicators of the pools this rank is in that are not every rank; declared before
  // everything that keeps one (the trainers, the engine's group).
  std::vector<std::unique_ptr<hw::ProcessGroup>> pool_groups;
  std::map<config::RlRole, RolePlacement> places;
  // Results sent from a pool so far (keys the signal that each is ready, share_from_pool); every
  // rank counts alike, as every rank takes part in every transfer.
  mutable int64_t pool_transfers = 0;
  const RolePlacement& place(config::RlRole role) const { return places.at(role); }
  bool runs(config::RlRole role) const { return place(role).here; }
  // Rollout engines (rollout.tensor_model_parallel_size = t): the actor pool's ranks
  // [e t, (e + 1) t) run engine e, split over them through `rollout_group` (null when t = 1: one
  // whole engine per rank). Declared before `engine`, which uses it until it is destroyed.
  int64_t rollout_tp = 1;
  std::unique_ptr<hw::ProcessGroup> rollout_group;
  int64_t num_engines() const { return place(config::RlRole::kActorRollout).dp.world_size() / rollout_tp; }
  int64_t engine_index() const { return place(config::RlRole::kActorRollout).dp.rank() / rollout_tp; }

  std::string model_path;
  std::optional<model::Tokenizer> tokenizer;
  std::optional<model::ChatTemplate> chat;
  int64_t pad_id = 0;
  std::vector<int64_t> eos_ids;

  // The agent loop (rollout.multi_turn.*, rollout.agent.*): the tools of tool_config_path, the
  // interactions of interaction_config_path, the loop names rows may give, and the tool
  // segments' format (built when there are tools or interactions).
  agent::ToolSet tools;
  agent::InteractionSet interactions;
  agent::AgentLoopNames agent_loops;
  std::unique_ptr<agent::ToolSegmentFormat> tool_format;

  std::optional<PromptDataset> train_set, val_set;
  std::unique_ptr<DataLoader> loader;

  std::unique_ptr<model::DecoderLM> actor_model, ref_model, critic_model;
  // The reference in flat units (sharded at ZeRO-3, or offloaded between its forwards); then
  // ref_model is null (reference_model()).
  std::unique_ptr<train::ShardedWeights> ref_weights;
  // The actor's settings (its forwards' options: the reference's forwards use them too, on any pool).
  train::ActorConfig actor_config;
  std::unique_ptr<train::Actor> actor;
  std::unique_ptr<train::Critic> critic;
  std::unique_ptr<hw::Kernels> kernels;  // the plugin's, for the engine and the trainer on an accelerator
  std::unique_ptr<rollout::RolloutEngine> engine;
  std::unique_ptr<reward::RewardManager> rewards;  // reward_manager.name with its scorer or batch function
  // reward_model.enable: the frozen reward model and, with reward_model.model.input_tokenizer,
  // its own tokenizer and chat template that responses are re-encoded with (rl_reward_model.cpp).
  std::unique_ptr<model::DecoderLM> reward_model;
  std::optional<model::Tokenizer> rm_tokenizer;
  std::optional<model::ChatTemplate> rm_chat;
  int64_t rm_pad_id = 0;
  std::unique_ptr<algo::KLController> kl_ctrl;
  std::unique_ptr<CheckpointManager> checkpoints;

  bool use_reference = false, use_critic = false, use_kl_in_reward = false;
  int64_t n = 1, response_length = 1, train_batch_size = 1;
  int64_t global_step = 0, total_steps = 1;
  uint64_t seed = 1;
  std::string run_dir;
  files::OutputFile metrics_out;  // metrics.jsonl, appended to; a failed write stops the run
  // trainer.logger's backends (rank 0), opened by fit() once it knows whether the run resumes.
  std::vector<std::unique_ptr<tracking::MetricsLogger>> loggers;
  files::OutputFile val_generations_out;  // val_generations.jsonl (with trainer.log_val_generations)
  // The step's peaks of LibTorch's device memory (bytes) over its stages, where the device's
  // allocator keeps statistics (hw/torch_memory.hpp); reset by add_memory_metrics.
  int64_t step_peak_allocated = 0, step_peak_reserved = 0;

  void message(const std::string& text) const {
    if (hooks.on_message && is_writer()) hooks.on_message(text);
  }
  void progress(const std::string& phase, int64_t done, int64_t total) const {
    if (hooks.on_progress && is_writer()) hooks.on_progress(phase, done, total);
  }
};

// Whether a `freq`-steps event (test_freq, save_freq) falls on `step`: every freq-th step and the
// last one when freq > 0, never otherwise.
inline bool every(int64_t freq, int64_t step, bool last) { return freq > 0 && (step % freq == 0 || last); }

// Resident set size of this process now, and its peak, in GiB (0 where /proc is absent).
double resident_gib();
double peak_resident_gib();
// A stage's memory figure: begin_stage_memory starts the device's allocator peak again;
// stage_memory_gib is then the peak of LibTorch's allocated device memory during the stage (as
// torch.cuda.max_memory_allocated) where the allocator keeps statistics, else this process's
// resident memory after it (the host: the CPU device, an allocator without statistics).
void begin_stage_memory(const RlTrainer::State& s);
double stage_memory_gib(RlTrainer::State& s);
// perf/max_memory_allocated_gb and perf/max_memory_reserved_gb (verl's names: the step's peaks
// of the device's allocator) where there are statistics, and perf/max_memory_rss_gib.
void add_memory_metrics(RlTrainer::State& s, nlohmann::json& m);

// Runs `f` as the stage `name` of a step: adds its seconds to metrics["timing_s/<name>"],
// records memory/<name>_gib (stage_memory_gib), tells the other ranks where this one is, and
// turns an exception into an Error naming the rank, the step and the stage.
template <class F>
auto run_stage(RlTrainer::State& s, const std::string& name, nlohmann::json& metrics, F&& f) -> decltype(f()) {
  const auto start = std::chrono::steady_clock::now();
  const std::string where = fmt::format("step {} {}", s.global_step + 1, name);
  if (s.group) s.group->set_stage(where);
  begin_stage_memory(s);
  auto finish = [&] {
    metrics["timing_s/" + name] = metrics.value("timing_s/" + name, 0.0) +
                                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    metrics["memory/" + name + "_gib"] = stage_memory_gib(s);
  };
  try {
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      finish();
    } else {
      auto result = f();
      finish();
      return result;
    }
  } catch (const std::exception& e) {
    throw Error(fmt::format("rank {} of {}, {}", s.world.rank, s.world.world_size, where), error_text(e));
  }
}

// --- dispatch between pools (rl_pools.cpp) ---
// Builds the places of every role from settings.pools: the pools' communicators (collective over
// each pool's ranks) and their data-parallel groups.
void join_resource_pools(RlTrainer::State& s);
// `t`, defined on the first rank of `role`'s pool, on every rank: one broadcast over all ranks
// (its dtype and shape first) when the pool is not every rank; `t` itself otherwise. The other
// ranks first wait for the pool's signal that `t` is ready (hw::ProcessGroup::wait_posted: no
// timeout while every rank is alive), so a long stage of one pool does not time the others out.
at::Tensor share_from_pool(const RlTrainer::State& s, config::RlRole role, at::Tensor t);
// Every rank meets here: a barrier, or with resource pools one without a timeout (the pools'
// ranks arrive at times as far apart as their stages are long); `key` names the meeting (unique).
void pools_barrier(const RlTrainer::State& s, const std::string& key);
// The same for a JSON value (a stage's metrics).
nlohmann::json share_json_from_pool(const RlTrainer::State& s, config::RlRole role, nlohmann::json value);

// Runs `compute` (a forward over rows of `batch`, returning [rows, ...]) on the ranks of `role`'s
// pool, each its share of the rows, and returns the whole batch's result in its order, on every
// rank (from the pool's first rank when the pool is not every rank; `compute` runs only there).
template <class F>
at::Tensor dispatch_rows(const RlTrainer::State& s, config::RlRole role, const Batch& batch, F&& compute) {
  const RlTrainer::State::RolePlacement& p = s.place(role);
  at::Tensor result;
  if (p.here) {
    if (!p.dp.is_distributed()) {
      result = compute(batch);
    } else {
      const auto parts = p.dp.partition(batch);
      result = p.dp.gather(compute(p.dp.local_rows(batch, parts)).contiguous(), parts);
    }
  }
  return share_from_pool(s, role, std::move(result));
}

// Moves every tensor of `batch` to `device` (collation happens on the host).
inline void move_to(Batch& batch, c10::Device device) {
  for (const std::string& name : batch.tensor_names()) batch.set(name, batch.tensor(name).to(device));
}

// --- setup and persistence (rl_setup.cpp, rl_checkpoint.cpp, rl_sft.cpp) ---
// AdamW's weight decay, betas and clipping norm.
train::AdamWConfig adamw_of(const config::OptimSettings& optim);
// data.* as DatasetOptions, with the agent loops and tool schemas setup_agent_loop loaded.
DatasetOptions dataset_options(const RlTrainer::State& s);
void setup_trainer(RlTrainer::State& s);
// Parts of setup_trainer that `verlpp train-rm` shares (rl_setup.cpp): the options every model
// of the run is built with (its dtype, the run's device and path choices); with several ranks,
// the rendezvous and the plugin communicator (s.group, s.dp); the plugin's kernels where the run
// calls them; the actor (s.actor_model from s.model_path, s.actor).
model::ModelOptions model_options(const RlTrainer::State& s, at::ScalarType dtype);
// The LR schedule of `<role>.optim` for `total_steps` optimizer updates (optim.total_training_steps
// wins when set).
train::LrSchedule schedule_of(const config::OptimSettings& optim, int64_t total_steps);
void join_process_group(RlTrainer::State& s);
// A role's ShardingOptions (its stage, offloads, the plugin's pinned memory).
train::ShardingOptions sharding_options(const RlTrainer::State& s, const config::ShardingSettings& role);
// Refuses offload on an accelerator whose plugin has no pinned host memory, naming the keys.
void check_offload(const RlTrainer::State& s);
// Whether the engine's model can be a second handle on the actor's compute weights (they stay
// on the device, whole): no sharded units, or resident ones without param_offload.
bool engine_shares_actor_weights(const RlTrainer::State& s);
// The reference the ref stage runs (its units' model when sharded or offloaded).
const model::DecoderLM& reference_model(const RlTrainer::State& s);
void load_kernels(RlTrainer::State& s);
void build_actor(RlTrainer::State& s);
// A checkpoint of the current step in two parts, so the step's metrics row can be made durable
// between them: write_checkpoint fills the temporary folder (collective with sharded optimizer
// states), commit_checkpoint renames it into place and updates the tracker (rank 0), then
// every rank waits for the others.
void write_checkpoint(RlTrainer::State& s);
void commit_checkpoint(RlTrainer::State& s);
// The reference's weights from a Hugging Face folder (the SFT warm start's sft_model).
void load_reference_weights(RlTrainer::State& s, const std::string& folder);
// Restores the state from `folder`; returns the step it holds.
int64_t load_checkpoint(RlTrainer::State& s, const std::string& folder);
// The SFT warm start (sft.*), when enabled; writes sft_metrics.jsonl in the run folder.
void run_sft_warm_start(RlTrainer::State& s);

// The agent loop's pieces (rl_agent_rollout.cpp): rollout.agent.agent_loop_config_path's names,
// the default loop checked, multi_turn.tool_config_path's tools, interaction_config_path's
// interactions and their segment format; Errors name the key.
void setup_agent_loop(RlTrainer::State& s);

// --- the stages of a step (rl_stages.cpp), in verl's order ---
// A prompt batch for the next loader batch (uids "s<step>:<row>").
Batch next_prompt_batch(RlTrainer::State& s);
// How a generation decodes: greedily, or sampling with temperature / top_k (-1: off) / top_p.
struct Decoding {
  bool greedy = true;
  double temperature = 1.0;
  int64_t top_k = -1;
  double top_p = 1.0;
};
// The training rollout's decoding (rollout.*; greedy with do_sample=false).
Decoding rollout_decoding(const config::RolloutSettings& r);
// Validation's decoding (rollout.val_kwargs.*; greedy with do_sample=false, as verl's HF rollout).
Decoding validation_decoding(const config::ValKwargsSettings& v);
// Samples `n` responses per prompt as `decoding` says, returning the RL layout (interleaved
// repeat of the prompts + responses, rollout_log_probs). Sample seeds: seed_base + prompt row.
Batch generate_sequences(RlTrainer::State& s, const Batch& prompts, int64_t n, const Decoding& decoding,
                         uint64_t seed_base);
// token_level_scores [B, R] (the score at each row's last response token) and the column
// "score" (one double per row), from the reward manager, plus one column per reward extra (null
// in rows whose scorer did not report it); returns the extras' names. The manager's metrics
// (reward/*) go to `metrics`.
std::vector<std::string> compute_scores(RlTrainer::State& s, Batch& batch, nlohmann::json* metrics = nullptr);
// The reward model (reward_model.enable; rl_reward_model.cpp): loads and checks it at setup.
void build_reward_model(RlTrainer::State& s);
// rm_scores [B, R]: the reward model's score of each row placed at its last valid response token
// (verl's compute_rm_score); compute_scores then takes them as the sequence rewards, as verl's
// reward managers return rm_scores when the batch has them. Rows are split over the ranks.
void compute_rm_scores(RlTrainer::State& s, Batch& batch);
// ref_log_prob under the frozen reference.
void compute_reference_log_prob(RlTrainer::State& s, Batch& batch);
// old_log_probs under the current actor; returns the mean response-token entropy.
double compute_old_log_prob(RlTrainer::State& s, Batch& batch);
// values from the critic.
void compute_values(RlTrainer::State& s, Batch& batch);
// token_level_rewards: scores minus the KL penalty (use_kl_in_reward) or the scores as is.
void apply_reward_kl(RlTrainer::State& s, Batch& batch, nlohmann::json& metrics);
// advantages and returns by algorithm.adv_estimator.
void compute_advantages(RlTrainer::State& s, Batch& batch);
// The rollout engine reads the actor's current weights (shared storage: no copy on one device;
// from sharded or offloaded units, unit by unit into the engine's own buffers).
// `from`: another trained model of the actor's layout whose weights to send (the SFT warm
// start's, during its validations); null: the actor.
void sync_rollout_weights(RlTrainer::State& s, nlohmann::json& metrics, train::TrainedModel* from = nullptr);
// After the step's generations: an engine that owns its weights (not shared with the actor) frees
// them until the next sync, so the training stages have the device (KV pool asleep as well).
void release_engine_weights(RlTrainer::State& s);

// Validation over the val set (rl_steps.cpp): val_kwargs.n responses per prompt decoded as
// val_kwargs says, scored, and verl's val-core/... and val-aux/... metrics
// (validation_metrics.hpp), with the older val/<data_source>/acc, val/acc (mean score) and
// val/response_length/mean; empty without data.val_files. Writes the samples to
// trainer.validation_data_dir and hands trainer.log_val_generations of them to the loggers.
nlohmann::json validate_model(RlTrainer::State& s);

// --- generated samples (rl_generations.cpp) ---
// The rows of `batch` (scored: "score", "response_text") as verl's dump records: the prompt
// decoded without padding and special tokens, the response, ground truth, score; with
// `with_advantage`, "advantage" (the mean over the row's response tokens); then each of
// `reward_extras` (columns from compute_scores) the row's scorer reported.
std::vector<tracking::GenerationRecord> generation_records(const RlTrainer::State& s, const Batch& batch,
                                                           bool with_advantage,
                                                           const std::vector<std::string>& reward_extras = {});
// trainer.rollout_data_dir: the training step's samples as <dir>/<step>.jsonl (rank 0), with
// the reward extras every sample has (as verl keeps only full-length lists).
void dump_rollout_generations(RlTrainer::State& s, const Batch& batch, const std::vector<std::string>& reward_extras);
// trainer.validation_data_dir and trainer.log_val_generations for one evaluation's samples
// (rank 0): the dump, the loggers' sample table and a row of val_generations.jsonl.
void record_val_generations(RlTrainer::State& s, const std::vector<tracking::GenerationRecord>& records);

// --- metrics (rl_metrics.cpp) ---
// verl's compute_data_metrics: critic/score, critic/rewards, critic/advantages, critic/returns,
// critic/values, response_length, prompt_length (mean/max/min).
void add_data_metrics(const Batch& batch, bool with_critic, nlohmann::json& metrics);
// training/rollout_probs_diff_{max,mean}: |p_rollout - p_actor| over response tokens (verl's
// check that the engine and the trainer score the same tokens alike).
void add_rollout_drift_metrics(const Batch& batch, nlohmann::json& metrics);
// perf/total_num_tokens, perf/throughput (tokens per second per device), timing_s/step.
void add_throughput_metrics(const Batch& batch, double step_seconds, nlohmann::json& metrics);

}  // namespace verlpp::controller
