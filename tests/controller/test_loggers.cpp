// trainer.logger's backends, read back by readers that share nothing with the writers:
// TensorBoard event files through the protobuf library (tests/log_readers/tb_reader), the MLflow
// store from MLflow's documented layout (tests/log_readers/mlflow_reader), verl's file logger as
// JSON lines. Each must hold every metric of every step once, with its value, also after a resume
// that cuts the run back to a checkpoint; network backends and unknown names are refused.
#include <verlpp/tracking/generation_dump.hpp>
#include <verlpp/tracking/loggers.hpp>
#include <verlpp/core/error.hpp>

#include "mlflow_reader.hpp"
#include "tb_reader.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <dirent.h>
#include <cstdlib>
#include <fstream>
#include <map>
#include <unistd.h>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using Catch::Contains;
using json = nlohmann::json;
using namespace verlpp::tracking;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = "/tmp/verlpp-loggers-test-" + std::to_string(getpid()) + "/" + name;
  REQUIRE(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  return dir;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The metrics of `step`: values of several magnitudes and signs, a few that only some steps have.
json metrics_of(int64_t step) {
  json m = {{"actor/pg_loss", -0.25 / double(step + 1)},
            {"critic/score/mean", 0.125 * double(step)},
            {"perf/throughput", 12345.678 * double(step + 3)},
            {"actor/lr", 1e-6 * double(step + 1)},
            {"training/global_step", step},
            {"step", step}};
  if (step % 2 == 0) m["val/acc"] = 1.0 / double(step + 3);
  return m;
}

LoggerRun run_named(const std::string& dir, std::optional<int64_t> resumed = std::nullopt) {
  LoggerRun run;
  run.project = "proj";
  run.experiment = "exp one";
  run.run_dir = dir + "/run";
  run.config = {{"trainer", {{"logger", {"console", "mlflow"}}, {"experiment_name", "exp one"}, {"seed", 1}}},
                {"actor", {{"lr", 1e-6}, {"use_kl", true}, {"path", nullptr}, {"empty", json::object()}}}};
  run.total_steps = 6;
  run.resumed_step = resumed;
  return run;
}

void log_steps(std::vector<std::unique_ptr<MetricsLogger>>& loggers, int64_t first, int64_t last) {
  for (int64_t step = first; step <= last; ++step)
    for (auto& l : loggers) l->log(metrics_of(step), step);
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (std::string(e->d_name).rfind("events.out.tfevents.", 0) == 0) out.push_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

// (step, tag) -> every value logged for it, from the reader's scalars.
std::map<std::pair<int64_t, std::string>, std::vector<float>> by_step_and_tag(
    const std::vector<verlpp_test::TbScalar>& scalars) {
  std::map<std::pair<int64_t, std::string>, std::vector<float>> out;
  for (const auto& s : scalars) out[{s.step, s.tag}].push_back(s.value);
  return out;
}

// Every metric of steps 0..last appears once, with the value float32 holds of it.
void check_tensorboard(const std::string& dir, int64_t last) {
  const auto got = by_step_and_tag(verlpp_test::read_event_dir(dir));
  size_t expected = 0;
  for (int64_t step = 0; step <= last; ++step) {
    const json metrics = metrics_of(step);  // items() refers into it
    for (const auto& [tag, value] : metrics.items()) {
      if (tag == "step") continue;
      ++expected;
      INFO("step " << step << " " << tag);
      const auto it = got.find({step, tag});
      REQUIRE(it != got.end());
      REQUIRE(it->second.size() == 1);
      CHECK(it->second[0] == float(value.get<double>()));
    }
  }
  CHECK(got.size() == expected);
}

}  // namespace

TEST_CASE("trainer.logger: a name or a list of local backends; network services and unknown names refused",
          "[loggers]") {
  CHECK(logger_backends(json("console"), "trainer.logger") == std::vector<std::string>{"console"});
  CHECK(logger_backends(json{"console", "tensorboard", "console", "file", "mlflow"}, "trainer.logger") ==
        std::vector<std::string>{"console", "tensorboard", "file", "mlflow"});
  CHECK(logger_backends(json::array(), "trainer.logger").empty());
  for (const char* network : {"wandb", "swanlab", "clearml", "vemlp_wandb", "trackio"}) {
    INFO(network);
    CHECK_THROWS_WITH(logger_backends(json{"console", network}, "trainer.logger"),
                      Contains("trainer.logger") && Contains(std::string("'") + network + "'") &&
                          Contains("network service") && Contains("console, file, mlflow, tensorboard"));
  }
  CHECK_THROWS_WITH(logger_backends(json("jsonl"), "trainer.logger"),
                    Contains("'jsonl' is not a logger backend") && Contains("console, file, mlflow, tensorboard"));
  CHECK_THROWS_WITH(logger_backends(json{"console", 3}, "trainer.logger"),
                    Contains("every entry must be a backend name, got 3"));
  CHECK_THROWS_WITH(logger_backends(json{{"a", 1}}, "trainer.logger"), Contains("must be a backend name or a list"));
}

TEST_CASE("a logger a program registers: one line, then trainer.logger names it beside the built-ins", "[loggers]") {
  // Records what it is given, so the test sees make_loggers hand it the run and the steps.
  struct Recording : MetricsLogger {
    std::vector<std::pair<int64_t, double>>* seen;
    explicit Recording(std::vector<std::pair<int64_t, double>>* s) : seen(s) {}
    void log(const json& metrics, int64_t step) override { seen->push_back({step, metrics.at("loss").get<double>()}); }
  };
  static std::vector<std::pair<int64_t, double>> seen;
  static std::string project_seen;
  logger_factories().add("test_recording", [](const LoggerRun& run) -> std::unique_ptr<MetricsLogger> {
    project_seen = run.project;
    return std::make_unique<Recording>(&seen);
  });
  const auto no_logger = [](const LoggerRun&) -> std::unique_ptr<MetricsLogger> { return nullptr; };
  CHECK_THROWS_WITH(logger_factories().add("console", no_logger), Contains("'console' is already registered"));
  CHECK_THROWS_WITH(logger_factories().add("test_empty", nullptr), Contains("'test_empty': the function is empty"));
  CHECK_FALSE(logger_factories().contains("test_empty"));
  CHECK(logger_backends(json{"test_recording", "console"}, "trainer.logger") ==
        std::vector<std::string>{"test_recording", "console"});
  CHECK_THROWS_WITH(logger_backends(json("nope"), "trainer.logger"),
                    Contains("console, file, mlflow, tensorboard, test_recording"));
  LoggerRun run;
  run.project = "proj";
  auto loggers = make_loggers({"test_recording"}, run);
  REQUIRE(loggers.size() == 1);
  loggers[0]->log(json{{"loss", 0.5}}, 3);
  loggers[0]->log(json{{"loss", 0.25}}, 4);
  CHECK(project_seen == "proj");
  CHECK(seen == std::vector<std::pair<int64_t, double>>{{3, 0.5}, {4, 0.25}});
}

TEST_CASE("tensorboard logger: event files the protobuf reader reads; a resume cuts them back to the checkpoint",
          "[loggers]") {
  const std::string dir = fresh_dir("tb");
  ::setenv("TENSORBOARD_DIR", (dir + "/events").c_str(), 1);
  CHECK(tensorboard_dir("p", "e") == dir + "/events");
  {
    auto loggers = make_loggers({"tensorboard"}, run_named(dir));
    log_steps(loggers, 0, 4);
    loggers[0]->sync();
    loggers[0]->finish();
  }
  check_tensorboard(dir + "/events", 4);
  SECTION("resumed at step 2: steps 3 and 4 are dropped and written again, each once") {
    // A kill mid-write left part of a record at the end of the file.
    const std::vector<std::string> names = event_files(dir + "/events");
    REQUIRE(names.size() == 1);
    const std::string file = dir + "/events/" + names[0];
    const std::string whole = read(file);
    std::ofstream(file, std::ios::binary | std::ios::app) << whole.substr(whole.size() - 30, 20);
    CHECK_THROWS(verlpp_test::read_event_file(file));  // the reader sees the torn tail
    std::vector<std::string> notes;
    LoggerRun resumed = run_named(dir, 2);
    resumed.message = [&](const std::string& m) { notes.push_back(m); };
    sleep(1);  // the new file's name (its seconds) sorts after the old one
    auto loggers = make_loggers({"tensorboard"}, resumed);
    log_steps(loggers, 3, 5);
    loggers[0]->finish();
    size_t files = 0;
    verlpp_test::read_event_dir(dir + "/events", &files);
    CHECK(files == 2);
    check_tensorboard(dir + "/events", 5);
    REQUIRE(!notes.empty());
    CHECK_THAT(notes[0],
               Contains("dropped 2 events past the checkpoint of step 2") && Contains("incomplete last record"));
  }
  SECTION("a fresh run replaces the folder's event files") {
    auto loggers = make_loggers({"tensorboard"}, run_named(dir));
    log_steps(loggers, 0, 1);
    loggers[0]->finish();
    size_t files = 0;
    verlpp_test::read_event_dir(dir + "/events", &files);
    CHECK(files == 1);
    check_tensorboard(dir + "/events", 1);
  }
  ::unsetenv("TENSORBOARD_DIR");
  CHECK(tensorboard_dir("p", "e") == "tensorboard_log/p/e");
}

TEST_CASE("mlflow logger: MLflow's file store layout with params, tags and metrics; a resume continues the run",
          "[loggers]") {
  const std::string dir = fresh_dir("mlflow");
  const std::string root = dir + "/mlruns";
  ::setenv("MLFLOW_TRACKING_URI", ("file://" + root).c_str(), 1);
  CHECK(mlflow_root() == root);
  {
    auto loggers = make_loggers({"mlflow"}, run_named(dir));
    log_steps(loggers, 0, 4);
    loggers[0]->sync();
    loggers[0]->finish();
  }
  auto check_store = [&](int64_t last, size_t runs) {
    const verlpp_test::MlflowStore store = verlpp_test::read_mlflow_store(root);
    CHECK(store.has_trash);
    REQUIRE(store.experiments.count("0") == 1);
    CHECK(store.experiments.at("0") == "Default");
    REQUIRE(store.experiments.size() == 2);
    REQUIRE(store.runs.size() == runs);
    const verlpp_test::MlflowRun& run = store.runs.back();
    CHECK(run.experiment_name == "proj");
    CHECK(run.run_name == "exp one");
    CHECK(run.status == 3);  // FINISHED
    CHECK(run.has_end_time);
    CHECK(run.lifecycle_stage == "active");
    CHECK(run.artifact_uri == "file://" + root + "/" + run.experiment_id + "/" + run.run_id + "/artifacts");
    CHECK(run.tags.at("mlflow.runName") == "exp one");
    CHECK(run.tags.at("verlpp.run_dir") == dir + "/run");
    // verl's flattening of the config: "/" between keys, lists as list_len + indices, Python's str().
    CHECK(run.params.at("trainer/logger/list_len") == "2");
    CHECK(run.params.at("trainer/logger/0") == "console");
    CHECK(run.params.at("trainer/logger/1") == "mlflow");
    CHECK(run.params.at("trainer/experiment_name") == "exp one");
    CHECK(run.params.at("trainer/seed") == "1");
    CHECK(run.params.at("actor/lr") == "1e-06");
    CHECK(run.params.at("actor/use_kl") == "True");
    CHECK(run.params.at("actor/path") == "None");
    CHECK(run.params.count("actor/empty") == 0);
    size_t expected = 0;
    for (int64_t step = 0; step <= last; ++step) {
      const json metrics = metrics_of(step);  // items() refers into it
      for (const auto& [name, value] : metrics.items()) {
        if (name == "step") continue;
        ++expected;
        INFO("step " << step << " " << name);
        REQUIRE(run.metrics.count(name) == 1);
        size_t found = 0;
        for (const auto& p : run.metrics.at(name))
          if (p.step == step) {
            ++found;
            CHECK(p.value == value.get<double>());  // the text round-trips the double exactly
            CHECK(p.timestamp > 1700000000000);     // milliseconds since the epoch
          }
        CHECK(found == 1);
      }
    }
    size_t points = 0;
    for (const auto& [name, list] : run.metrics) points += list.size();
    CHECK(points == expected);
  };
  check_store(4, 1);
  SECTION("resumed at step 2: the same run, steps 3 and 4 dropped and written again") {
    std::vector<std::string> notes;
    LoggerRun resumed = run_named(dir, 2);
    resumed.message = [&](const std::string& m) { notes.push_back(m); };
    auto loggers = make_loggers({"mlflow"}, resumed);
    CHECK(verlpp_test::read_mlflow_store(root).runs.back().status == 1);  // RUNNING again
    log_steps(loggers, 3, 5);
    loggers[0]->finish();
    check_store(5, 1);
    REQUIRE(!notes.empty());
    CHECK_THAT(notes[0], Contains("dropped 11 metric values past the checkpoint of step 2"));
  }
  SECTION("a fresh run is a new MLflow run in the same experiment; a run stopped by an error is FAILED") {
    {
      auto loggers = make_loggers({"mlflow"}, run_named(dir));
      log_steps(loggers, 0, 1);
    }
    const verlpp_test::MlflowStore store = verlpp_test::read_mlflow_store(root);
    REQUIRE(store.runs.size() == 2);
    CHECK(store.runs[0].experiment_id == store.runs[1].experiment_id);
    CHECK(((store.runs[0].status == 4) != (store.runs[1].status == 4)));
  }
  for (const char* uri : {"http://localhost:5000", "sqlite:////tmp/mlruns.db", "databricks://profile"}) {
    ::setenv("MLFLOW_TRACKING_URI", uri, 1);
    CHECK_THROWS_WITH(mlflow_root(), Contains("MLFLOW_TRACKING_URI") && Contains(uri) && Contains("local file store") &&
                                         Contains("file:/path/to/mlruns"));
  }
  ::unsetenv("MLFLOW_TRACKING_URI");
  CHECK(mlflow_root() == "mlruns");
}

TEST_CASE("file logger: verl's {step, data} lines at verl's path; a resume cuts them back", "[loggers]") {
  const std::string dir = fresh_dir("file");
  ::setenv("VERL_FILE_LOGGER_ROOT", dir.c_str(), 1);
  CHECK(file_logger_path("proj", "exp one") == dir + "/proj/exp one.jsonl");
  {
    auto loggers = make_loggers({"file"}, run_named(dir));
    log_steps(loggers, 0, 4);
    loggers[0]->finish();
  }
  {
    auto loggers = make_loggers({"file"}, run_named(dir, 2));
    log_steps(loggers, 3, 5);
    loggers[0]->finish();
  }
  std::ifstream in(dir + "/proj/exp one.jsonl");
  std::string line;
  int64_t step = 0;
  while (std::getline(in, line)) {
    const json row = json::parse(line);
    CHECK(row.size() == 2);
    CHECK(row["step"] == step);
    json expected = metrics_of(step);
    expected.erase("step");
    CHECK(row["data"] == expected);
    ++step;
  }
  CHECK(step == 6);
  ::setenv("VERL_FILE_LOGGER_PATH", (dir + "/given.jsonl").c_str(), 1);
  CHECK(file_logger_path("proj", "exp") == dir + "/given.jsonl");
  ::unsetenv("VERL_FILE_LOGGER_PATH");
  ::unsetenv("VERL_FILE_LOGGER_ROOT");
  CHECK(file_logger_path("proj", "exp") == "./proj/exp.jsonl");
}

TEST_CASE("console step line: verl's val-core figures but their spreads", "[loggers]") {
  const json row = {{"val/acc", 0.5},
                    {"val-core/math/acc/mean@4", 0.25},
                    {"val-core/math/acc/maj@4/mean", 0.75},
                    {"val-core/math/acc/maj@4/std", 0.125},
                    {"val-aux/math/acc/std@4", 0.5}};
  const std::string line = console_step_line(row, 2, 6);
  CHECK_THAT(line, Contains("step   2/6") && Contains("val/acc 0.500"));
  CHECK_THAT(line, Contains("val-core/math/acc/mean@4 0.250") && Contains("val-core/math/acc/maj@4/mean 0.750"));
  CHECK_THAT(line, !Contains("maj@4/std") && !Contains("val-aux"));
}

TEST_CASE("console logger: the step line and the validation samples through the message hook", "[loggers]") {
  std::vector<std::string> lines;
  LoggerRun run = run_named(fresh_dir("console"));
  run.message = [&](const std::string& m) { lines.push_back(m); };
  auto loggers = make_loggers({"console"}, run);
  loggers[0]->log(metrics_of(0), 0);
  loggers[0]->log(metrics_of(3), 3);
  loggers[0]->log_val_generations({{"1+2=", "3", 1.0}, {"line\nbreak", "x", 0.0}}, 3);
  REQUIRE(lines.size() == 7);
  CHECK_THAT(lines[0], Contains("before RL") && Contains("val/acc 0.333"));
  CHECK_THAT(lines[0], !Contains("val-core"));
  CHECK_THAT(lines[1], Contains("step   3/6") && Contains("score 0.375") && Contains("pg_loss -0.0625"));
  CHECK_THAT(lines[2], Contains("validation generations at step 3 (2 samples)"));
  CHECK_THAT(lines[3], Contains("[1] score 1") && Contains("input: 1+2="));
  CHECK_THAT(lines[4], Contains("output: 3"));
  CHECK_THAT(lines[5], Contains("input: line break"));  // one line per field
}

TEST_CASE("generation dumps: verl's keys in verl's order, one file per step", "[loggers]") {
  const std::string dir = fresh_dir("dump") + "/rollouts";
  GenerationRecord a{"What is 1+2?", "3", json("3"), 1.0};
  a.extra["advantage"] = 0.5;
  GenerationRecord b{"ünïcode", "x", nullptr, 0.0};
  const std::string path = dump_generations(dir, 7, {a, b});
  CHECK(path == dir + "/7.jsonl");
  std::ifstream in(path);
  std::string line;
  std::vector<nlohmann::ordered_json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::ordered_json::parse(line));
  REQUIRE(rows.size() == 2);
  std::vector<std::string> keys;
  for (const auto& [key, value] : rows[0].items()) keys.push_back(key);
  CHECK(keys == std::vector<std::string>{"input", "output", "gts", "score", "step", "advantage"});
  CHECK(rows[0]["input"] == "What is 1+2?");
  CHECK(rows[0]["gts"] == "3");
  CHECK(rows[0]["step"] == 7);
  CHECK(rows[1]["input"] == "ünïcode");
  CHECK(rows[1]["gts"].is_null());
  CHECK(rows[1].size() == 5);
}

TEST_CASE("log_val_generations picks verl's samples: sorted by input, numpy's RandomState(42) shuffle, the first N",
          "[loggers]") {
  // numpy 2.5.2's np.random.RandomState(42).shuffle(list(range(n))), run on the GPU host: the
  // peer this choice must equal (verl's _maybe_log_val_generations shuffles with it).
  const std::map<int, std::vector<int>> numpy = {
      {2, {1, 0}},
      {3, {0, 1, 2}},
      {5, {1, 4, 2, 0, 3}},
      {12, {10, 9, 0, 8, 5, 2, 1, 11, 4, 7, 3, 6}},
      {20, {0, 17, 15, 1, 8, 5, 11, 3, 18, 16, 13, 2, 9, 19, 4, 12, 7, 10, 14, 6}}};
  for (const auto& [n, order] : numpy) {
    INFO("n = " << n);
    // Inputs given in reverse: the sort by input comes first, so sample k (input "in<kk>") is the
    // k-th after sorting, and the shuffle is numpy's permutation of those.
    std::vector<ValGeneration> samples;
    for (int k = n - 1; k >= 0; --k) samples.push_back({fmt::format("in{:02d}", k), "out", double(k)});
    const std::vector<ValGeneration> all = pick_val_generations(samples, n);
    REQUIRE(all.size() == size_t(n));
    for (int i = 0; i < n; ++i) CHECK(all[size_t(i)].score == double(order[size_t(i)]));
    const std::vector<ValGeneration> first = pick_val_generations(samples, 2);
    REQUIRE(first.size() == 2);
    CHECK(first[1].input == all[1].input);
  }
  CHECK(pick_val_generations({{"a", "b", 1.0}}, 0).empty());
}
