// See mlflow_reader.hpp.
#include "mlflow_reader.hpp"

#include <yaml-cpp/yaml.h>

#include <dirent.h>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>

namespace verlpp_test {
namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") out.push_back(name);
    }
    ::closedir(d);
  }
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Every file under `dir`, named by its path relative to `dir` ("a/b/c").
void walk(const std::string& dir, const std::string& prefix, std::map<std::string, std::string>& out) {
  for (const std::string& name : entries(dir)) {
    const std::string path = dir + "/" + name, key = prefix.empty() ? name : prefix + "/" + name;
    if (is_dir(path))
      walk(path, key, out);
    else
      out[key] = slurp(path);
  }
}

}  // namespace

MlflowStore read_mlflow_store(const std::string& root) {
  MlflowStore store;
  store.has_trash = is_dir(root + "/.trash");
  for (const std::string& id : entries(root)) {
    const std::string exp_dir = root + "/" + id;
    if (id == ".trash" || !is_dir(exp_dir)) continue;
    const YAML::Node exp = YAML::LoadFile(exp_dir + "/meta.yaml");
    if (exp["experiment_id"].as<std::string>() != id)
      throw std::runtime_error(exp_dir + "/meta.yaml: experiment_id is not the folder's name");
    store.experiments[id] = exp["name"].as<std::string>();
    for (const std::string& run_id : entries(exp_dir)) {
      const std::string run_dir = exp_dir + "/" + run_id;
      if (!is_dir(run_dir) || run_id == "tags" || run_id == "datasets" || run_id == "traces") continue;
      const YAML::Node meta = YAML::LoadFile(run_dir + "/meta.yaml");
      MlflowRun run;
      run.experiment_id = meta["experiment_id"].as<std::string>();
      run.experiment_name = store.experiments[id];
      run.run_id = meta["run_id"].as<std::string>();
      if (run.run_id != run_id || meta["run_uuid"].as<std::string>() != run_id || run.experiment_id != id)
        throw std::runtime_error(run_dir + "/meta.yaml: run_id, run_uuid or experiment_id does not match its folders");
      run.run_name = meta["run_name"].as<std::string>();
      run.lifecycle_stage = meta["lifecycle_stage"].as<std::string>();
      run.artifact_uri = meta["artifact_uri"].as<std::string>();
      run.status = meta["status"].as<int>();
      run.start_time = meta["start_time"].as<int64_t>();
      run.has_end_time = meta["end_time"] && !meta["end_time"].IsNull();
      walk(run_dir + "/params", "", run.params);
      walk(run_dir + "/tags", "", run.tags);
      std::map<std::string, std::string> metric_files;
      walk(run_dir + "/metrics", "", metric_files);
      for (const auto& [name, text] : metric_files) {
        std::istringstream lines(text);
        std::string line;
        while (std::getline(lines, line)) {
          std::istringstream fields(line);
          MlflowPoint p;
          std::string value, extra;
          if (!(fields >> p.timestamp >> value >> p.step) || (fields >> extra))
            throw std::runtime_error(run_dir + "/metrics/" + name + ": malformed line '" + line + "'");
          p.value = std::stod(value);  // "nan" and "inf" as Python's float() reads them
          run.metrics[name].push_back(p);
        }
      }
      store.runs.push_back(std::move(run));
    }
  }
  return store;
}

}  // namespace verlpp_test
