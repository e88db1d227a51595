// The mlflow backend: MLflow's local file store, laid out as MLflow's FileStore lays it out, so
// `mlflow ui --backend-store-uri <root>` (and mlflow's Python client) read the run:
//   <root>/0/meta.yaml                         the "Default" experiment, made with a new store
//   <root>/.trash/                             where MLflow moves deleted experiments
//   <root>/<experiment_id>/meta.yaml           experiment <project_name>
//   <root>/<experiment_id>/<run_id>/meta.yaml  run <experiment_name>: status, start/end times
//   .../<run_id>/params/<a>/<b>/...            the resolved config, flattened with "/" as verl
//                                              flattens it (a list: list_len, 0, 1, ...)
//   .../<run_id>/metrics/<name>                one "<ms timestamp> <value> <step>" line per step
//   .../<run_id>/tags/<name>                   mlflow.runName, mlflow.user, mlflow.source.*,
//                                              verlpp.run_dir (the run folder, to find the run
//                                              again when it resumes)
// meta.yaml is YAML; it is written with JSON-quoted strings (valid YAML) and read with yaml-cpp.
// A resumed run continues the MLflow run of the same run folder, its metric files cut back to
// the checkpoint's step; a fresh run is a new MLflow run, as verl's is.
#include <verlpp/tracking/metrics_log.hpp>
#include <verlpp/core/error.hpp>

#include "../util/files.hpp"
#include "logger_backends.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <set>
#include <unistd.h>

namespace verlpp::tracking {
namespace {

using json = nlohmann::json;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof(cwd)) == nullptr) throw Error(path, "cannot read the current folder to make it absolute");
  return path == "." ? std::string(cwd) : files::join(cwd, path);
}

std::string quoted(const std::string& s) { return json(s).dump(); }

// What Python's str() gives for a value MLflow stores as text (params) and its float repr for
// metric values: True/False, None, 1e-06, 1.0, nan, inf.
std::string python_text(const json& v) {
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_null()) return "None";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  }
  return v.dump();  // nlohmann writes doubles as Python's repr does (shortest, "1.0", "1e-06")
}

// verl's _MlflowLoggingAdapter: "@" -> "_at_", runs of "/" -> one, and every character MLflow
// refuses in a metric name (not alphanumeric, "_", "/", ".", "-", ":", " ") -> "_".
std::string metric_file_name(const std::string& key) {
  std::string s;
  for (size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    if (c == '@')
      s += "_at_";
    else if (c == '/' && !s.empty() && s.back() == '/')
      continue;
    else if (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_/.-: ", c) != nullptr)
      s += c;
    else
      s += '_';
  }
  return s;
}

// verl's _compute_mlflow_params_from_objects: nested keys joined with "/", a list as
// {list_len, 0, 1, ...}, an empty object contributing nothing.
void flatten_params(const json& v, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& out) {
  auto child = [&](const std::string& key) { return prefix.empty() ? key : prefix + "/" + key; };
  if (v.is_object()) {
    for (const auto& [key, value] : v.items()) flatten_params(value, child(key), out);
  } else if (v.is_array()) {
    out.emplace_back(child("list_len"), std::to_string(v.size()));
    for (size_t i = 0; i < v.size(); ++i) flatten_params(v[i], child(std::to_string(i)), out);
  } else {
    out.emplace_back(prefix, python_text(v));
  }
}

void write_file(const std::string& path, const std::string& text) {
  const size_t slash = path.find_last_of('/');
  files::make_dirs(path.substr(0, slash));
  files::write_text(path, text);
}

// A random 32-hex-digit id (uuid4().hex, as MLflow names runs).
std::string new_run_id() {
  std::random_device rd;
  std::mt19937_64 g((uint64_t(rd()) << 32) ^ rd() ^ uint64_t(now_ms()));
  uint64_t hi = g(), lo = g();
  hi = (hi & ~0xF000ULL) | 0x4000ULL;                         // version 4
  lo = (lo & 0x3FFFFFFFFFFFFFFFULL) | 0x8000000000000000ULL;  // variant 1
  return fmt::format("{:016x}{:016x}", hi, lo);
}

std::string yaml_string(const YAML::Node& node, const char* key) {
  const YAML::Node v = node[key];
  return v && v.IsScalar() ? v.as<std::string>() : std::string();
}

class MlflowLogger : public MetricsLogger {
 public:
  explicit MlflowLogger(const LoggerRun& run) : root_(absolute(mlflow_root())), run_dir_(absolute(run.run_dir)) {
    open_store();
    experiment_id_ = find_or_create_experiment(run.project);
    bool continued = false;
    if (run.resumed_step) {
      const std::string found = find_run(run.experiment);
      if (!found.empty()) {
        run_id_ = found;
        continued = true;
        trim_metrics_to(*run.resumed_step, run);
        read_run_meta();
        write_run_meta(1, std::nullopt);
      } else if (run.message) {
        run.message(fmt::format("mlflow: no run of {} in experiment {} of {}; this resumed run starts a new one",
                                run_dir_, run.project, root_));
      }
    }
    if (!continued) create_run(run);
    if (run.message) run.message(fmt::format("mlflow logger: {} (run {})", run_path(), run_id_));
  }

  ~MlflowLogger() override {
    if (finished_) return;
    try {
      write_run_meta(4, now_ms());  // FAILED: the run stopped on an error
    } catch (...) {
    }
  }

  void log(const json& metrics, int64_t step) override {
    const int64_t ts = now_ms();
    for (const auto& [name, value] : numeric_metrics(metrics)) {
      const std::string path = files::join(run_path(), "metrics/" + metric_file_name(name));
      if (written_.insert(path).second) files::make_dirs(path.substr(0, path.find_last_of('/')));
      append(path, fmt::format("{} {} {}\n", ts, python_text(json(value)), step));
      unsynced_.insert(path);
    }
  }

  void sync() override {
    for (const std::string& path : unsynced_) sync_file(path);
    unsynced_.clear();
  }

  void finish() override {
    sync();
    write_run_meta(3, now_ms());  // FINISHED
    finished_ = true;
  }

 private:
  std::string experiment_path() const { return files::join(root_, experiment_id_); }
  std::string run_path() const { return files::join(experiment_path(), run_id_); }

  static void append(const std::string& path, const std::string& line) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) throw Error(path, fmt::format("cannot open it to append a metric: {}", std::strerror(errno)));
    const ssize_t n = ::write(fd, line.data(), line.size());
    const int err = errno;
    ::close(fd);
    if (n != ssize_t(line.size()))
      throw Error(path, fmt::format("writing a metric failed: {}", n < 0 ? std::strerror(err) : "short write"));
  }

  std::string experiment_meta(const std::string& id, const std::string& name) const {
    const int64_t t = now_ms();
    return fmt::format(
        "artifact_location: {}\ncreation_time: {}\nexperiment_id: {}\nlast_update_time: {}\nlifecycle_stage: "
        "active\nname: {}\n",
        quoted("file://" + files::join(root_, id)), t, quoted(id), t, quoted(name));
  }

  // A new store gets the Default experiment (id 0), as MLflow's FileStore makes it.
  void open_store() {
    if (!files::is_dir(root_)) {
      files::make_dirs(root_);
      write_file(files::join(root_, "0/meta.yaml"), experiment_meta("0", "Default"));
    }
    files::make_dirs(files::join(root_, ".trash"));
  }

  std::string find_or_create_experiment(const std::string& name) {
    std::set<std::string> ids;
    for (const std::string& id : files::list_dir(root_)) {
      const std::string meta = files::join(files::join(root_, id), "meta.yaml");
      if (id == ".trash" || !files::is_file(meta)) continue;
      ids.insert(id);
      try {
        const YAML::Node node = YAML::LoadFile(meta);
        if (yaml_string(node, "name") == name && yaml_string(node, "lifecycle_stage") != "deleted") return id;
      } catch (const YAML::Exception&) {
        // MLflow skips a malformed experiment too.
      }
    }
    std::random_device rd;
    std::mt19937_64 g((uint64_t(rd()) << 32) ^ rd() ^ uint64_t(now_ms()));
    std::string id;
    do id = std::to_string(100000000000000000ULL + g() % 900000000000000000ULL);
    while (ids.count(id) != 0);
    write_file(files::join(files::join(root_, id), "meta.yaml"), experiment_meta(id, name));
    return id;
  }

  // The newest run of this experiment named `run_name` whose verlpp.run_dir tag is this run folder.
  std::string find_run(const std::string& run_name) const {
    std::string best;
    int64_t best_start = -1;
    for (const std::string& id : files::list_dir(experiment_path())) {
      const std::string dir = files::join(experiment_path(), id);
      const std::string tags = files::join(dir, "tags");
      if (!files::is_file(files::join(tags, "verlpp.run_dir")) || !files::is_file(files::join(tags, "mlflow.runName")))
        continue;
      if (files::read_text(files::join(tags, "verlpp.run_dir")) != run_dir_ ||
          files::read_text(files::join(tags, "mlflow.runName")) != run_name)
        continue;
      int64_t start = 0;
      try {
        start = YAML::LoadFile(files::join(dir, "meta.yaml"))["start_time"].as<int64_t>();
      } catch (const YAML::Exception&) {
        continue;
      }
      if (start > best_start) {
        best_start = start;
        best = id;
      }
    }
    return best;
  }

  void read_run_meta() {
    const YAML::Node node = YAML::LoadFile(files::join(run_path(), "meta.yaml"));
    run_name_ = yaml_string(node, "run_name");
    user_ = yaml_string(node, "user_id");
    start_time_ = node["start_time"].as<int64_t>();
  }

  void write_run_meta(int status, std::optional<int64_t> end_time) const {
    if (run_id_.empty()) return;
    const std::string text = fmt::format(
        "artifact_uri: {}\ndeleted_time: null\nend_time: {}\nentry_point_name: ''\nexperiment_id: {}\n"
        "lifecycle_stage: active\nrun_id: {}\nrun_name: {}\nrun_uuid: {}\nsource_name: ''\nsource_type: 4\n"
        "source_version: ''\nstart_time: {}\nstatus: {}\ntags: []\nuser_id: {}\n",
        quoted("file://" + files::join(run_path(), "artifacts")), end_time ? std::to_string(*end_time) : "null",
        quoted(experiment_id_), run_id_, quoted(run_name_), run_id_, start_time_, status, quoted(user_));
    files::write_text(files::join(run_path(), "meta.yaml"), text);
  }

  void create_run(const LoggerRun& run) {
    run_id_ = new_run_id();
    run_name_ = run.experiment;
    user_ = env_or("USER", env_or("LOGNAME", "unknown"));
    start_time_ = now_ms();
    for (const char* sub : {"metrics", "params", "artifacts", "tags"}) files::make_dirs(files::join(run_path(), sub));
    write_run_meta(1, std::nullopt);  // RUNNING
    const std::vector<std::pair<std::string, std::string>> tags = {{"mlflow.runName", run_name_},
                                                                   {"mlflow.user", user_},
                                                                   {"mlflow.source.name", "verlpp"},
                                                                   {"mlflow.source.type", "LOCAL"},
                                                                   {"verlpp.run_dir", run_dir_}};
    for (const auto& [name, value] : tags) write_file(files::join(run_path(), "tags/" + name), value);
    std::vector<std::pair<std::string, std::string>> params;
    flatten_params(run.config, "", params);
    for (const auto& [name, value] : params) write_file(files::join(run_path(), "params/" + name), value);
  }

  // Drops the metric lines past `step` (and an unterminated last line) from every metric file.
  void trim_metrics_to(int64_t step, const LoggerRun& run) {
    size_t dropped = 0;
    trim_folder(files::join(run_path(), "metrics"), step, dropped);
    if (dropped > 0 && run.message)
      run.message(fmt::format("mlflow: dropped {} metric values past the checkpoint of step {} from run {}", dropped,
                              step, run_id_));
  }

  static void trim_folder(const std::string& dir, int64_t step, size_t& dropped) {
    if (!files::is_dir(dir)) return;
    for (const std::string& name : files::list_dir(dir)) {
      const std::string path = files::join(dir, name);
      if (files::is_dir(path)) {
        trim_folder(path, step, dropped);
        continue;
      }
      const std::string text = files::read_text(path);
      std::string kept;
      bool changed = false;
      size_t begin = 0;
      while (begin < text.size()) {
        const size_t end = text.find('\n', begin);
        if (end == std::string::npos) {
          changed = true;  // torn by a kill mid-write
          break;
        }
        const std::string line = text.substr(begin, end - begin);
        begin = end + 1;
        const size_t last_space = line.find_last_of(' ');
        int64_t line_step = 0;
        try {
          line_step = last_space == std::string::npos ? 0 : std::stoll(line.substr(last_space + 1));
        } catch (const std::exception&) {
          throw Error(path, fmt::format("a metric line that is not \"<timestamp> <value> <step>\": {}", line));
        }
        if (line_step > step) {
          ++dropped;
          changed = true;
          continue;
        }
        kept += line + "\n";
      }
      if (!changed) continue;
      files::write_text(path + ".tmp", kept);
      sync_file(path + ".tmp");
      files::rename_path(path + ".tmp", path);
    }
  }

  std::string root_, run_dir_, experiment_id_, run_id_, run_name_, user_;
  int64_t start_time_ = 0;
  bool finished_ = false;
  std::set<std::string> written_, unsynced_;
};

}  // namespace

std::string mlflow_root() {
  const std::string uri = env_or("MLFLOW_TRACKING_URI", "mlruns");
  if (uri.rfind("file://", 0) == 0) return uri.substr(7);
  if (uri.rfind("file:", 0) == 0) return uri.substr(5);
  const size_t colon = uri.find(':');
  const size_t slash = uri.find('/');
  if (colon != std::string::npos && (slash == std::string::npos || colon < slash))
    throw Error("MLFLOW_TRACKING_URI",
                fmt::format("'{}' names a tracking server or database; verlpp writes MLflow's local file store: set it "
                            "to a folder (file:/path/to/mlruns) or leave it unset (./mlruns), then read it with "
                            "`mlflow ui --backend-store-uri <folder>`",
                            uri));
  return uri;
}

// trainer.logger's "mlflow", registered when the library loads.
[[maybe_unused]] const bool kRegistered = logger_factories().add(
    "mlflow",
    [](const LoggerRun& run) -> std::unique_ptr<MetricsLogger> { return std::make_unique<MlflowLogger>(run); });

}  // namespace verlpp::tracking
