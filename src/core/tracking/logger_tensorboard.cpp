// The tensorboard backend: TensorBoard event files in verl's folder (TENSORBOARD_DIR, else
// tensorboard_log/<project>/<experiment>), named as TensorBoard's own writer names them
// (events.out.tfevents.<seconds>.<host>.<pid>.<n>), one Event per step holding one scalar per
// metric. A resumed run first rewrites the folder's event files without the events past the
// checkpoint's step (and without a record a kill left torn), then starts a new file; a fresh run
// removes the folder's event files, which would otherwise show a second curve over the same steps.
#include <verlpp/tracking/metrics_log.hpp>
#include <verlpp/core/error.hpp>

#include "../util/files.hpp"
#include "../util/output_file.hpp"
#include "logger_backends.hpp"
#include "tensorboard_events.hpp"

#include <fmt/format.h>

#include <chrono>
#include <unistd.h>

namespace verlpp::tracking {
namespace {

using json = nlohmann::json;

constexpr const char* kPrefix = "events.out.tfevents.";

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const std::string& name : files::list_dir(dir))
    if (name.rfind(kPrefix, 0) == 0 && files::is_file(files::join(dir, name))) out.push_back(name);
  return out;
}

// Rewrites `path` without the events past `step` and without a torn tail; returns what went.
std::string trim_event_file(const std::string& path, int64_t step) {
  const std::string bytes = files::read_text(path);
  const tensorboard::RecordScan scan = tensorboard::scan_records(bytes);
  std::string kept;
  size_t dropped = 0;
  for (const tensorboard::RecordSpan& r : scan.records) {
    if (r.step > step)
      ++dropped;
    else
      kept.append(bytes, r.begin, r.end - r.begin);
  }
  if (dropped == 0 && scan.complete) return "";
  files::write_text(path + ".tmp", kept);
  sync_file(path + ".tmp");
  files::rename_path(path + ".tmp", path);
  std::string what = fmt::format("{}: dropped {} events past the checkpoint of step {}", path, dropped, step);
  if (!scan.complete) what += " and an incomplete last record (the run was stopped while writing it)";
  return what;
}

class TensorboardLogger : public AppendedFileLogger {
 public:
  explicit TensorboardLogger(const LoggerRun& run) : dir_(tensorboard_dir(run.project, run.experiment)) {
    files::make_dirs(dir_);
    const std::vector<std::string> existing = event_files(dir_);
    if (run.resumed_step) {
      for (const std::string& name : existing) {
        const std::string note = trim_event_file(files::join(dir_, name), *run.resumed_step);
        if (!note.empty() && run.message) run.message(note);
      }
    } else {
      for (const std::string& name : existing) files::remove_file(files::join(dir_, name));
      if (!existing.empty() && run.message)
        run.message(fmt::format("{}: removed {} event files of an earlier run (a fresh run starts them afresh)", dir_,
                                existing.size()));
    }
    static int counter = 0;  // TensorBoard's writer numbers the files of one process too
    const double now = wall_time();
    open_for_append(files::join(
        dir_, fmt::format("{}{:010d}.{}.{}.{}", kPrefix, int64_t(now), host_name(), ::getpid(), counter++)));
    append(tensorboard::frame_record(tensorboard::file_version_event(now)));
    if (run.message) run.message("tensorboard logger: " + dir_);
  }

  void log(const json& metrics, int64_t step) override {
    std::vector<std::pair<std::string, float>> values;
    for (const auto& [name, value] : numeric_metrics(metrics)) values.emplace_back(name, float(value));
    append(tensorboard::frame_record(tensorboard::scalars_event(wall_time(), step, values)));
  }

 private:
  std::string dir_;
};

}  // namespace

std::string tensorboard_dir(const std::string& project, const std::string& experiment) {
  return env_or("TENSORBOARD_DIR", files::join(files::join("tensorboard_log", project), experiment));
}

// trainer.logger's "tensorboard", registered when the library loads.
[[maybe_unused]] const bool kRegistered = logger_factories().add(
    "tensorboard",
    [](const LoggerRun& run) -> std::unique_ptr<MetricsLogger> { return std::make_unique<TensorboardLogger>(run); });

}  // namespace verlpp::tracking
