// The e2e tests' shared pieces: a fixture folder (the tiny model with seeded weights and small
// arithmetic splits), a small run config, and `verlpp train` started as a user starts it.
#pragma once

#include <verlpp/tasks/arith_task.hpp>
#include <verlpp/data/records.hpp>
#include <verlpp/config/config.hpp>
#include <verlpp/tracking/report.hpp>
#include <verlpp/model/checkpoint.hpp>
#include <verlpp/model/safetensors.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

extern char** environ;

namespace verlpp::e2e {

using json = nlohmann::json;

inline constexpr int64_t kSteps = 6;

inline bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

inline void copy(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary);
  out << in.rdbuf();
}

// A fresh folder with the tiny model (seeded weights) and small arithmetic splits.
inline std::string make_fixture(const std::string& name) {
  const std::string dir = "/tmp/verlpp-e2e-" + name;
  REQUIRE(std::system(("rm -rf " + dir + " && mkdir -p " + dir + "/model").c_str()) == 0);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    copy(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/" + f, dir + "/model/" + f);
  model::DecoderLM m(model::load_model_config(dir + "/model"));
  m.init_weights(3);
  model::save_pretrained(m, dir + "/model");
  tasks::ArithTaskOptions task;
  task.max_operand = 9;
  task.sft_count = 48;
  task.train_count = 40;
  task.val_count = 12;
  auto splits = tasks::make_arith_splits(task);
  tasks::register_arith_reward();  // the rows' data_source, for runs in this process
  data::write_jsonl(dir + "/sft.jsonl", splits.sft);
  data::write_jsonl(dir + "/train.jsonl", splits.train);
  data::write_jsonl(dir + "/val.jsonl", splits.val);
  return dir;
}

// A small run: 6 steps of 4 prompts x 4 samples, a checkpoint every step, validation every 3
// (without verl's default gradient checkpointing, which only trades time for memory).
inline std::string write_config(const std::string& dir, const std::string& run, const std::string& estimator) {
  json c = {
      {"data",
       {{"train_files", dir + "/train.jsonl"},
        {"val_files", dir + "/val.jsonl"},
        {"max_prompt_length", 32},
        {"max_response_length", 6},
        {"train_batch_size", 4}}},
      {"actor_rollout_ref",
       {{"model", {{"path", dir + "/model"}, {"enable_gradient_checkpointing", false}}},
        {"actor",
         {{"ppo_mini_batch_size", 2},
          {"ppo_micro_batch_size_per_gpu", 4},
          {"use_kl_loss", true},
          {"entropy_coeff", 0.001},
          {"optim", {{"lr", 1e-3}}}}},
        {"rollout", {{"n", 4}, {"tensor_model_parallel_size", 1}, {"dtype", "float32"}}}}},
      {"critic",
       {{"ppo_micro_batch_size_per_gpu", 4},
        {"model", {{"enable_gradient_checkpointing", false}}},
        {"optim", {{"lr", 1e-3}}}}},
      {"algorithm", {{"adv_estimator", estimator}}},
      {"trainer",
       {{"default_local_dir", run}, {"total_training_steps", kSteps}, {"save_freq", 1}, {"test_freq", 3}, {"seed", 5}}},
      {"sft",
       {{"enable", true},
        {"train_files", dir + "/sft.jsonl"},
        {"total_steps", 3},
        {"batch_size", 8},
        {"micro_batch_size_per_gpu", 8},
        {"optim", {{"lr", 3e-3}}}}}};
  const std::string path = run + ".json";
  std::ofstream(path) << c.dump(2);
  return path;
}

// Starts `verlpp <subcommand> <config> [extra...]` with output to `log`, in this process's
// environment with `env` ("NAME=value" entries) set over it; returns its pid.
inline pid_t start_verlpp(const std::string& subcommand, const std::string& config, const std::string& log,
                          const std::vector<std::string>& extra = {}, const std::vector<std::string>& env = {}) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<std::string> args = {VERLPP_CLI, subcommand, config};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  std::vector<std::string> environment(env.begin(), env.end());
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    bool replaced = false;
    for (const auto& mine : env) replaced = replaced || name_of(mine) == name_of(entry);
    if (!replaced) environment.push_back(entry);
  }
  std::vector<char*> envp;
  for (auto& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, VERLPP_CLI, &actions, nullptr, argv.data(), envp.data()) == 0);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

// `verlpp train <config> [extra...]` (start_verlpp).
inline pid_t start_train(const std::string& config, const std::string& log, const std::vector<std::string>& extra = {},
                         const std::vector<std::string>& env = {}) {
  return start_verlpp("train", config, log, extra, env);
}

// Waits for `pid`; returns its wait status.
inline int wait_for(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void run_to_end(const std::string& config, const std::string& log, const std::vector<std::string>& extra = {},
                       const std::string& subcommand = "train") {
  const int status = wait_for(start_verlpp(subcommand, config, log, extra));
  INFO(read_file(log));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}

// The rows with measured quantities (times, throughput, memory) removed: what must repeat.
inline std::vector<json> deterministic_rows(const std::string& run) {
  std::vector<json> rows = tracking::read_metrics(run + "/metrics.jsonl");
  for (json& row : rows) {
    json kept = json::object();
    for (const auto& [key, value] : row.items())
      if (key.rfind("timing_s/", 0) != 0 && key.rfind("perf/", 0) != 0 && key.rfind("memory/", 0) != 0)
        kept[key] = value;
    row = kept;
  }
  return rows;
}

inline bool finite_number(const json& row, const std::string& key) {
  return row.contains(key) && row[key].is_number() && std::isfinite(row[key].get<double>());
}

// `got` (a run on N ranks) against `want` (the one-rank run), row by row: samples, rewards and
// counts exactly, losses and norms up to float sums taken in another order.
inline void check_close_rows(const std::vector<json>& want, const std::vector<json>& got, const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(what << " row " << i << "\n one rank: " << want[i].dump() << "\n N ranks:  " << got[i].dump());
    for (const auto& [key, value] : want[i].items()) {
      REQUIRE(got[i].contains(key));
      // Means over micro-batches of per-micro-batch means depend on which rows share a
      // micro-batch, which differs with the rank count (as in verl); every loss is a share of
      // the whole mini-batch and must agree.
      if (!value.is_number() || key == "actor/ppo_kl" || key.rfind("actor/pg_clipfrac", 0) == 0 ||
          key == "critic/vpred_mean")
        continue;
      // Samples, rewards and counts agree exactly; losses and norms up to float sums taken in
      // another order. The margin is for means near zero of unit-scale quantities (whitened
      // advantages average ~1e-7 either side of 0).
      CHECK(got[i][key].get<double>() == Approx(value.get<double>()).epsilon(1e-3).margin(1e-5));
    }
  }
}

}  // namespace verlpp::e2e
