// The file backend: verl's FileLogger, one JSON line {"step": N, "data": {metrics}} per step, at
// the path verl uses. The same durability as metrics.jsonl (metrics_log.hpp): appended and
// flushed per step, synced before a checkpoint, cut back to the checkpoint on resume.
#include <verlpp/tracking/metrics_log.hpp>
#include <verlpp/core/error.hpp>

#include "../util/files.hpp"
#include "../util/output_file.hpp"
#include "logger_backends.hpp"

namespace verlpp::tracking {
namespace {

using json = nlohmann::json;

class FileLogger : public AppendedFileLogger {
 public:
  explicit FileLogger(const LoggerRun& run) {
    const std::string path = file_logger_path(run.project, run.experiment);
    const size_t slash = path.find_last_of('/');
    if (slash != std::string::npos && slash > 0) files::make_dirs(path.substr(0, slash));
    if (run.resumed_step) {
      for (const std::string& note : trim_metrics(path, *run.resumed_step).notes(path, *run.resumed_step))
        if (run.message) run.message(note);
    } else {
      files::remove_file(path);  // a fresh run starts the file afresh, as verl's does
    }
    open_for_append(path);
    if (run.message) run.message("file logger: " + path);
  }

  void log(const json& metrics, int64_t step) override {
    json data = metrics;
    data.erase("step");
    append(json{{"step", step}, {"data", data}}.dump() + "\n");
  }
};

}  // namespace

std::string file_logger_path(const std::string& project, const std::string& experiment) {
  const std::string given = env_or("VERL_FILE_LOGGER_PATH", "");
  if (!given.empty()) return given;
  std::string root = env_or("VERL_FILE_LOGGER_ROOT", ".");
  if (root == "~" || root.rfind("~/", 0) == 0) root = env_or("HOME", "~") + root.substr(1);  // os.path.expanduser
  return files::join(files::join(root, project), experiment + ".jsonl");
}

// trainer.logger's "file", registered when the library loads.
[[maybe_unused]] const bool kRegistered = logger_factories().add(
    "file", [](const LoggerRun& run) -> std::unique_ptr<MetricsLogger> { return std::make_unique<FileLogger>(run); });

}  // namespace verlpp::tracking
