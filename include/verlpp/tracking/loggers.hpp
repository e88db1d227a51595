// The tracking backends of trainer.logger (verl's Tracking): each step's metrics go to every
// backend the list names, in the same step order and with the same resume rules as
// metrics.jsonl (metrics_log.hpp): a step is written (and, when a checkpoint follows, synced)
// before that step's checkpoint is committed, and a resumed run first cuts every backend back to
// the checkpoint's step, so no backend holds a step twice. The backends write local files only:
//   console      the per-step line (and the validation samples of trainer.log_val_generations)
//   file         verl's FileLogger: one {"step": N, "data": {...}} line per step, at
//                $VERL_FILE_LOGGER_PATH, else $VERL_FILE_LOGGER_ROOT (default ".")/<project>/<experiment>.jsonl
//   tensorboard  TensorBoard event files in $TENSORBOARD_DIR, else tensorboard_log/<project>/<experiment>
//   mlflow       an MLflow file store ($MLFLOW_TRACKING_URI as a folder or file: URI, else ./mlruns):
//                experiment <project>, run <experiment>, the resolved config as params, the metrics
// Backends that need a network service (wandb, swanlab, ...) are refused before any work.
#pragma once

#include <verlpp/core/registry.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace verlpp::tracking {

struct LoggerRun;
class MetricsLogger;

// Opens one backend for a run (make_loggers calls it once per run and name).
using LoggerFactory = std::function<std::unique_ptr<MetricsLogger>(const LoggerRun& run)>;
// The backends by name: verlpp's console, file, tensorboard and mlflow, and any a program
// registers in one line (`tracking::logger_factories().add("mine", open_mine)`) before the
// config is read.
Registry<LoggerFactory>& logger_factories();

// trainer.logger (a name or a list of names, verl accepts both) as a list without repeats; an
// Error at `key` (the config key the value came from) for a backend that needs a network
// service (naming the local ones) or an unknown name (listing the registered ones).
std::vector<std::string> logger_backends(const nlohmann::json& value, const std::string& key);
// The backends registered (verlpp's: console, file, mlflow, tensorboard), sorted.
std::vector<std::string> local_logger_backends();

// What every backend knows about the run.
struct LoggerRun {
  std::string project;      // trainer.project_name
  std::string experiment;   // trainer.experiment_name
  std::string run_dir;      // trainer.default_local_dir
  nlohmann::json config;    // the resolved config tree (MLflow's params)
  int64_t total_steps = 0;  // for the console's "step N/T"
  // Set when the run resumes from a checkpoint of this step: each backend drops what it holds
  // past it (and what a kill mid-write left torn) instead of starting afresh.
  std::optional<int64_t> resumed_step;
  std::function<void(const std::string&)> message;  // one line for the run's log (may be empty)
};

// One validation sample of trainer.log_val_generations (verl's [input, output, score]).
struct ValGeneration {
  std::string input, output;
  double score = 0;
};

// One backend.
class MetricsLogger {
 public:
  virtual ~MetricsLogger() = default;
  // The metrics of `step` (a flat object of numbers; a "step" key in it is not a metric).
  // Written through to the operating system before it returns.
  virtual void log(const nlohmann::json& metrics, int64_t step) = 0;
  // The samples of an evaluation at `step` (only the console shows them).
  virtual void log_val_generations(const std::vector<ValGeneration>& samples, int64_t step) {
    (void)samples;
    (void)step;
  }
  // On disk (fsync) everything logged so far: called before a checkpoint is committed.
  virtual void sync() {}
  // The run ended normally (MLflow marks the run FINISHED); the last step is on disk.
  virtual void finish() {}
};

// The backends `names` lists (logger_backends), opened for `run`: a fresh run replaces what a
// backend holds for the same project and experiment (a new MLflow run), a resumed run cuts it
// back to run.resumed_step and appends (the same MLflow run). Errors name the path or variable.
std::vector<std::unique_ptr<MetricsLogger>> make_loggers(const std::vector<std::string>& names, const LoggerRun& run);

// Where the backends write, from the environment as verl reads it.
std::string file_logger_path(const std::string& project, const std::string& experiment);
std::string tensorboard_dir(const std::string& project, const std::string& experiment);
// The MLflow file store's root folder; an Error for a MLFLOW_TRACKING_URI that is not a local
// folder (a server or a database), naming the local alternative.
std::string mlflow_root();

// The per-step console line ("step   3/6 | score 0.250 | ... | 1.2 s"; "before RL" for step 0),
// with validation's val/acc and every val-core/... figure but the /std ones.
std::string console_step_line(const nlohmann::json& metrics, int64_t step, int64_t total_steps);

}  // namespace verlpp::tracking
