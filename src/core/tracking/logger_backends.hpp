// What the backends behind make_loggers share (internal). Each is one file that registers itself
// in logger_factories(): logger_console.cpp, logger_file.cpp, logger_tensorboard.cpp,
// logger_mlflow.cpp.
#pragma once

#include <verlpp/tracking/loggers.hpp>
#include <verlpp/tracking/metrics_log.hpp>

#include "../util/output_file.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace verlpp::tracking {

// The numbers of a metrics object in its order, "step" and non-numbers left out (what verl's
// scalar backends can take).
std::vector<std::pair<std::string, double>> numeric_metrics(const nlohmann::json& metrics);

// The environment variable `name`, or `fallback` when it is unset or empty.
std::string env_or(const char* name, const std::string& fallback);

// A backend that appends records to one file (the file logger's JSON lines, TensorBoard's event
// frames): each record written through before log returns, the file synced before a checkpoint
// and committed at the end, as metrics.jsonl is.
class AppendedFileLogger : public MetricsLogger {
 public:
  void sync() override { sync_file(path_); }
  void finish() override {
    out_.commit();
    sync_file(path_);
  }

 protected:
  // Opens `path` for appending; the subclass has already trimmed or removed what it held.
  void open_for_append(std::string path) {
    path_ = std::move(path);
    out_ = files::OutputFile(path_, files::OutputFile::Mode::kAppend);
  }
  // Writes one record and hands it to the operating system.
  void append(const std::string& record) {
    out_.write(record);
    out_.flush();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  files::OutputFile out_;
};

}  // namespace verlpp::tracking
