// RlTrainer: verl's single-controller RL loop (RayPPOTrainer.fit) in C++. One object owns the
// actor (and its rollout engine, which shares the actor's weights: the hybrid engine), the
// frozen reference, the critic, the reward scorer and the data; fit() runs the steps in verl's
// order and writes metrics.jsonl, checkpoints and report.html under trainer.default_local_dir.
// Each algorithm family has one step function (see rl_steps.cpp): with a critic (gae), without
// one (grpo, rloo, reinforce_plus_plus[_baseline], opo, gpg, grpo_passk), and remax (a greedy
// baseline). See docs/training.md.
#pragma once

#include <verlpp/config/config.hpp>
#include <verlpp/config/run_settings.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace verlpp::controller {

// What a caller (the CLI, a linking program) hears while training runs.
struct TrainerHooks {
  // After every training step, with that step's metrics row (as written to metrics.jsonl).
  std::function<void(const nlohmann::json& row)> on_step;
  // Progress inside a phase ("sft", "train", "val", "gen"): done of total units.
  std::function<void(const std::string& phase, int64_t done, int64_t total)> on_progress;
  // One-line messages (setup, checkpoints, resume).
  std::function<void(const std::string& message)> on_message;
};

// The algorithm family an estimator belongs to, which picks the step function.
enum class AlgorithmFamily { kWithCritic, kCriticFree, kGreedyBaseline };
// The family of algorithm.adv_estimator; Error listing the known estimators otherwise.
AlgorithmFamily algorithm_family(const std::string& adv_estimator);

class RlTrainer {
 public:
  // Validates `config` (resolved), then builds everything it names: tokenizer and chat
  // template, datasets, actor (+ reference, critic), rollout engine, reward scorer (unknown
  // data sources are refused here), checkpoint manager. Errors name the key or file.
  explicit RlTrainer(config::Config config, TrainerHooks hooks = {});
  ~RlTrainer();
  RlTrainer(const RlTrainer&) = delete;
  RlTrainer& operator=(const RlTrainer&) = delete;

  // Resumes from a checkpoint if trainer.resume_mode finds one (CheckpointManager::plan_resume:
  // an Error, before anything is changed, for a folder it would overwrite or a checkpoint that
  // does not hold its own step; metrics.jsonl is cut back to the checkpoint's step), else runs the
  // SFT warm start when sft.enable; validates before training when asked, and trains to the last
  // step. Each step's metrics row is on disk before its checkpoint is committed.
  // Returns the last metrics row (with the final validation when test_freq > 0).
  nlohmann::json fit();

  // Validation over data.val_files with rollout.val_kwargs (n responses per prompt, greedy or
  // sampled): verl's val-core/<source>/<var>/... and val-aux/... (validation_metrics.hpp), plus
  // the older val/<data_source>/acc (mean score of that source's responses) and val/acc.
  nlohmann::json validate();

  // Training steps completed (the N of the last global_step_N).
  int64_t global_step() const;
  int64_t total_steps() const;
  // trainer.default_local_dir: metrics.jsonl, report.html and the checkpoints live here.
  const std::string& run_dir() const;
  // The resolved tree (recorded in checkpoints and the report) and the settings read from it.
  const config::Config& config() const;
  const config::RunSettings& settings() const;
  // This process's rank and the number of ranks (from the launcher's environment; see
  // hw/world.hpp). Rank 0 writes metrics, checkpoints and sft_model; every rank trains.
  int32_t rank() const;
  int32_t world_size() const;

  // The run's objects; defined inside the library (src/core/controller/rl_state.hpp).
  struct State;

 private:
  std::unique_ptr<State> s_;
};

}  // namespace verlpp::controller
