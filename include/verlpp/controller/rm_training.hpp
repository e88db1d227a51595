// Reward-model training (`verlpp train-rm CONFIG [overrides]`): a scalar head fitted on
// preference pairs with the Bradley–Terry loss (train/reward_model_trainer.hpp), from the run
// config's rm_train.* section (docs/training.md), with a PPO run's machinery: trainer.device and
// data-parallel ranks, checkpoints as global_step_N/ folders with resume (trainer.resume_mode),
// metrics.jsonl, trainer.logger's backends and report.html. Optionally the chain's SFT step first
// (rm_train.sft_warm_start: the config's sft.* on rm_train.model_path, saved as sft_model). The
// result is <rm_train.default_local_dir>/rm_model, a Hugging Face ...ForSequenceClassification
// folder that transformers loads and a PPO run takes as reward_model.model.path.
#pragma once

#include <verlpp/config/config.hpp>
#include <verlpp/controller/rl_trainer.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace verlpp::controller {

// What a reward-model run did.
struct RmTrainingResult {
  std::string run_dir;    // rm_train.default_local_dir
  std::string model_dir;  // <run_dir>/rm_model
  int64_t steps = 0;      // optimizer steps completed (rm_train.total_steps when it finished)
  // Pairwise accuracy on rm_train.val_files before the first step (a fresh run) and after the
  // last; unset without val_files.
  std::optional<double> val_accuracy_before, val_accuracy_after;
  nlohmann::json last_metrics = nlohmann::json::object();  // the last metrics row
};

// Runs reward-model training as `config` (resolved) describes, on this process's rank of the
// launcher's world. Errors name the key or the file (a malformed pair: file and line) before any
// work where they can.
RmTrainingResult train_reward_model(const config::Config& config, const TrainerHooks& hooks = {});

}  // namespace verlpp::controller
