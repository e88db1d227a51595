// `verlpp train-rm [CONFIG.json|CONFIG.yaml] [overrides ...]`: reward-model training on preference
// pairs (controller/rm_training.hpp) from the config's rm_train.* section. The chain's example,
// examples/arith/ppo_rm_tiny.json, trains a reward model on arithmetic pairs after the SFT step,
// and `verlpp train` on the same config then runs PPO with it (docs/training.md).
#include "commands.hpp"
#include "progress.hpp"
#include "run_setup.hpp"

#include <verlpp/controller/rm_training.hpp>
#include <verlpp/config/run_settings.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/hw/world.hpp>

#include <fmt/format.h>

#include <chrono>
#include <iostream>

namespace verlpp::apps {
namespace {

void run_train_rm(const std::vector<std::string>& args, int nproc) {
  if (args.empty())
    throw Error("verlpp train-rm",
                "needs a config (or overrides on verl's defaults) naming rm_train.train_files; the example: "
                "`verlpp train-rm examples/arith/ppo_rm_tiny.json`");
  CommandConfig given = command_config(args, /*demo=*/false, /*embedded_when_empty=*/false, "");
  const config::Config& config = given.config;
  if (launch_ranks_if_asked("train-rm", config, nproc, /*demo=*/false, args,
                            [&] { (void)config::parse_rm_train_settings(config); }))
    return;
  Progress progress;
  controller::TrainerHooks hooks;
  hooks.on_message = [&](const std::string& text) { progress.line(text); };
  hooks.on_progress = [&](const std::string& phase, int64_t done, int64_t all) { progress.update(phase, done, all); };
  const auto start = std::chrono::steady_clock::now();
  const controller::RmTrainingResult result = controller::train_reward_model(config, hooks);
  if (hw::world_from_environment().rank != 0) return;  // rank 0 reports for the run
  const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 60.0;
  std::cout << fmt::format("\ntrained the reward model for {} steps in {:.1f} min\n", result.steps, minutes);
  if (result.val_accuracy_before && result.val_accuracy_after)
    std::cout << fmt::format("held-out pairwise accuracy: {:.1f}% before -> {:.1f}% after\n",
                             *result.val_accuracy_before * 100, *result.val_accuracy_after * 100);
  else if (result.val_accuracy_after)
    std::cout << fmt::format("held-out pairwise accuracy: {:.1f}%\n", *result.val_accuracy_after * 100);
  std::cout << fmt::format(
      "reward model: {} (a PPO run's reward_model.model.path)\nmetrics: {}/metrics.jsonl\n"
      "report:  {}/report.html\n",
      result.model_dir, result.run_dir, result.run_dir);
}

}  // namespace

void register_train_rm_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train-rm",
                                 "reward-model training on preference pairs (prompt, chosen, rejected) with the "
                                 "Bradley-Terry loss; writes a Hugging Face ...ForSequenceClassification folder");
  auto args = std::make_shared<std::vector<std::string>>();
  auto nproc = std::make_shared<int>(1);
  cmd->add_option("args", *args,
                  "a CONFIG.json or CONFIG.yaml (rm_train.* and the run's trainer.*, data.tokenizer, sft.*), then "
                  "overrides in Hydra's grammar; overrides without a config apply to verl's defaults");
  cmd->add_option("--nproc", *nproc,
                  "ranks to start on this machine (data parallel). Under mpirun, srun or torchrun leave it out");
  cmd->callback([=] { run_train_rm(*args, *nproc); });
}

}  // namespace verlpp::apps
