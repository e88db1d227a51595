// `verlpp train [CONFIG.json|CONFIG.yaml] [overrides ...]`: RL post-training (RlTrainer). Without a config
// it runs the embedded default, the main job: the tiny model (examples/tiny, initialised from a
// seed) is warm-started by SFT on generated arithmetic problems, then trained by GRPO on a
// held-apart set with the `arith` reward (examples/arith/grpo_tiny.json). The run folder gets
// the data files, the initial model, metrics.jsonl, checkpoints and report.html.
#include "commands.hpp"
#include "progress.hpp"
#include "run_setup.hpp"

#include "../core/util/files.hpp"  // the library's POSIX file helpers (is_file)

#include <verlpp/config/keys.hpp>
#include <verlpp/config/config.hpp>
#include <verlpp/tracking/report.hpp>
#include <verlpp/controller/rl_trainer.hpp>
#include <verlpp/config/run_settings.hpp>
#include <verlpp/core/error.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>

namespace verlpp::apps {
namespace {

using json = nlohmann::json;
constexpr const char* kDefaultConfig = "examples/arith/grpo_tiny.json";

// Overrides without a config file start from verl's defaults, as verl's own entry point does, so
// a verl run script's lines mean what they mean there; those defaults name no model and no data.
void require_run_inputs(const config::Config& config) {
  for (const char* key : {config::keys::kModelPath, config::keys::kDataTrainFiles})
    if (config.is_null(key))
      throw Error("verlpp train",
                  fmt::format("{} is not set: without a config file the overrides apply to verl's defaults, which "
                              "name no model and no data. Set it, give a config file first, or run the embedded "
                              "demo with `verlpp train --demo [overrides ...]`",
                              key));
}

void run_train(const std::vector<std::string>& args, int nproc, bool demo) {
  const auto start = std::chrono::steady_clock::now();
  CommandConfig given = command_config(args, demo, /*embedded_when_empty=*/true, kDefaultConfig);
  config::Config config = std::move(given.config);
  const bool needs_inputs_check = !given.embedded && !given.from_file;
  if (launch_ranks_if_asked("train", config, nproc, demo, args, [&] {
        if (needs_inputs_check) require_run_inputs(config);
      }))
    return;

  Progress progress;
  controller::TrainerHooks hooks;
  // The per-step line comes from the console logger (trainer.logger) through on_message.
  hooks.on_message = [&](const std::string& text) { progress.line(text); };
  hooks.on_progress = [&](const std::string& phase, int64_t done, int64_t all) { progress.update(phase, done, all); };
  controller::RlTrainer trainer(std::move(config), hooks);
  json last = trainer.fit();
  if (trainer.rank() != 0) return;  // rank 0 reports for the run

  // The report, from everything metrics.jsonl holds (a resumed run included).
  const std::string metrics_path = trainer.run_dir() + "/metrics.jsonl";
  std::vector<json> rows = tracking::read_metrics(metrics_path);
  std::optional<double> before, after;
  for (const json& row : rows)
    if (row.contains("val/acc") && row["val/acc"].is_number()) {
      if (!before) before = row["val/acc"].get<double>();
      after = row["val/acc"].get<double>();
    }
  tracking::ReportInfo info;
  info.title = fmt::format("verlpp train: {} ({})", trainer.settings().trainer.experiment_name,
                           trainer.settings().algorithm.adv_estimator);
  const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 60.0;
  info.summary = {{"steps", fmt::format("{} of {}", trainer.global_step(), trainer.total_steps())},
                  {"wall time (this invocation)", fmt::format("{:.1f} min", minutes)}};
  if (before) info.summary.push_back({"validation accuracy before RL", fmt::format("{:.1f}%", *before * 100)});
  if (after) info.summary.push_back({"validation accuracy after RL", fmt::format("{:.1f}%", *after * 100)});
  info.config = trainer.config().tree();
  // The validation samples of trainer.log_val_generations, one row per evaluation.
  const std::string samples_path = trainer.run_dir() + "/val_generations.jsonl";
  if (files::is_file(samples_path)) info.val_generations = tracking::read_metrics(samples_path);
  const std::string report = trainer.run_dir() + "/report.html";
  tracking::write_report(rows, report, info);

  std::cout << fmt::format("\ntrained {} steps in {:.1f} min\n", trainer.global_step(), minutes);
  if (before && after)
    std::cout << fmt::format("validation accuracy: {:.1f}% before RL -> {:.1f}% after ({:+.1f} points)\n",
                             *before * 100, *after * 100, (*after - *before) * 100);
  std::cout << fmt::format("metrics: {}\nreport:  {}\n", metrics_path, report);
  (void)last;
}

}  // namespace

void register_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train",
                                 "RL post-training (PPO, GRPO, ...); with no arguments (or --demo), the embedded demo: "
                                 "SFT then GRPO of the tiny model on arithmetic");
  auto args = std::make_shared<std::vector<std::string>>();
  auto nproc = std::make_shared<int>(1);
  auto demo = std::make_shared<bool>(false);
  cmd->add_option("args", *args,
                  "an optional CONFIG.json or CONFIG.yaml (verl's keys), then overrides in Hydra's grammar (key=value, "
                  "+key=value, ++key=value, ~key); overrides without a config apply to verl's defaults, as "
                  "verl's main_ppo takes them");
  cmd->add_flag("--demo", *demo,
                "the overrides apply to the embedded demo's config (what `verlpp train` alone runs) instead of "
                "verl's defaults");
  cmd->add_option("--nproc", *nproc,
                  "ranks to start on this machine (data parallel; one process per device). Under "
                  "mpirun, srun or torchrun leave it out: the launcher's environment gives the ranks");
  cmd->callback([=] { run_train(*args, *nproc, *demo); });
}

}  // namespace verlpp::apps
