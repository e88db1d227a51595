// The tests' reader of an MLflow file store, written from MLflow's documented FileStore layout
// (not from verlpp's writer): experiments <root>/<id>/meta.yaml, runs <root>/<id>/<run>/meta.yaml,
// params/, tags/ (one file per name, "/" in a name a subfolder) and metrics/ (one
// "<timestamp> <value> <step>" line per value); meta.yaml read with yaml-cpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace verlpp_test {

struct MlflowPoint {
  int64_t timestamp = 0;
  double value = 0;
  int64_t step = 0;
};

struct MlflowRun {
  std::string experiment_id, experiment_name, run_id, run_name, lifecycle_stage, artifact_uri;
  int status = 0;  // RUNNING 1, SCHEDULED 2, FINISHED 3, FAILED 4, KILLED 5
  int64_t start_time = 0;
  bool has_end_time = false;
  std::map<std::string, std::string> params, tags;
  std::map<std::string, std::vector<MlflowPoint>> metrics;
};

struct MlflowStore {
  std::map<std::string, std::string> experiments;  // id -> name
  std::vector<MlflowRun> runs;
  bool has_trash = false;
};

// Reads the store at `root`; throws std::runtime_error naming the file that breaks the layout
// (a meta.yaml whose id does not match its folder, a malformed metric line, ...).
MlflowStore read_mlflow_store(const std::string& root);

}  // namespace verlpp_test
