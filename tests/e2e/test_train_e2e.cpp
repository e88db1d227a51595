// `verlpp train CONFIG.json` end to end on the tiny model: GRPO and PPO (gae, with a critic) run
// a few steps with an SFT warm start, write finite metrics with verl's names, validation rows,
// checkpoints and the report; and a run killed with SIGKILL while training, then resumed,
// produces exactly the metrics (timings aside) and the weights of an uninterrupted run.
#include <verlpp/controller/arith_task.hpp>
#include <verlpp/controller/config.hpp>
#include <verlpp/controller/report.hpp>
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

using namespace verlpp;
using json = nlohmann::json;

namespace {

constexpr int64_t kSteps = 6;

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

void copy(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary);
  out << in.rdbuf();
}

// A fresh folder with the tiny model (seeded weights) and small arithmetic splits.
std::string make_fixture(const std::string& name) {
  const std::string dir = "/tmp/verlpp-e2e-" + name;
  REQUIRE(std::system(("rm -rf " + dir + " && mkdir -p " + dir + "/model").c_str()) == 0);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    copy(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/" + f, dir + "/model/" + f);
  model::DecoderLM m(model::load_model_config(dir + "/model"));
  m.init_weights(3);
  model::save_pretrained(m, dir + "/model");
  controller::ArithTaskOptions task;
  task.max_operand = 9;
  task.sft_count = 48;
  task.train_count = 40;
  task.val_count = 12;
  auto splits = controller::make_arith_splits(task);
  controller::write_jsonl(dir + "/sft.jsonl", splits.sft);
  controller::write_jsonl(dir + "/train.jsonl", splits.train);
  controller::write_jsonl(dir + "/val.jsonl", splits.val);
  return dir;
}

// A small run: 6 steps of 4 prompts x 4 samples, a checkpoint every step, validation every 3.
std::string write_config(const std::string& dir, const std::string& run, const std::string& estimator) {
  json c = {
      {"data", {{"train_files", dir + "/train.jsonl"}, {"val_files", dir + "/val.jsonl"}, {"max_prompt_length", 32},
                {"max_response_length", 6}, {"train_batch_size", 4}}},
      {"actor_rollout_ref",
       {{"model", {{"path", dir + "/model"}}},
        {"actor", {{"ppo_mini_batch_size", 2}, {"ppo_micro_batch_size_per_gpu", 4}, {"use_kl_loss", true},
                   {"entropy_coeff", 0.001}, {"optim", {{"lr", 1e-3}}}}},
        {"rollout", {{"n", 4}, {"dtype", "float32"}}}}},
      {"critic", {{"ppo_micro_batch_size_per_gpu", 4}, {"optim", {{"lr", 1e-3}}}}},
      {"algorithm", {{"adv_estimator", estimator}}},
      {"trainer", {{"default_local_dir", run}, {"total_training_steps", kSteps}, {"save_freq", 1}, {"test_freq", 3},
                   {"seed", 5}}},
      {"sft", {{"enable", true}, {"train_files", dir + "/sft.jsonl"}, {"total_steps", 3}, {"batch_size", 8},
               {"micro_batch_size_per_gpu", 8}, {"optim", {{"lr", 3e-3}}}}}};
  const std::string path = run + ".json";
  std::ofstream(path) << c.dump(2);
  return path;
}

// Starts `verlpp train <config>` with output to `log`; returns its pid.
pid_t start_train(const std::string& config, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<std::string> args = {VERLPP_CLI, "train", config};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, VERLPP_CLI, &actions, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

// Waits for `pid`; returns its wait status.
int wait_for(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void run_to_end(const std::string& config, const std::string& log) {
  const int status = wait_for(start_train(config, log));
  INFO(read_file(log));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}

// The rows with measured quantities (times, throughput, memory) removed: what must repeat.
std::vector<json> deterministic_rows(const std::string& run) {
  std::vector<json> rows = controller::read_metrics(run + "/metrics.jsonl");
  for (json& row : rows) {
    json kept = json::object();
    for (const auto& [key, value] : row.items())
      if (key.rfind("timing_s/", 0) != 0 && key.rfind("perf/", 0) != 0 && key.rfind("memory/", 0) != 0) kept[key] = value;
    row = kept;
  }
  return rows;
}

bool finite_number(const json& row, const std::string& key) {
  return row.contains(key) && row[key].is_number() && std::isfinite(row[key].get<double>());
}

}  // namespace

TEST_CASE("verlpp train: GRPO and PPO run end to end with metrics, checkpoints and a report", "[e2e]") {
  const std::string dir = make_fixture("run");
  for (const std::string estimator : {"grpo", "gae"}) {
    const std::string run = dir + "/" + estimator;
    run_to_end(write_config(dir, run, estimator), run + ".log");
    const std::vector<json> rows = controller::read_metrics(run + "/metrics.jsonl");
    REQUIRE(rows.size() == size_t(kSteps + 1));  // step 0 (validation before training) + 6 steps
    CHECK(finite_number(rows[0], "val/acc"));
    CHECK(finite_number(rows[0], "val/arith/acc"));
    for (int64_t step = 1; step <= kSteps; ++step) {
      const json& row = rows[size_t(step)];
      INFO(estimator << " step " << step << ": " << row.dump());
      CHECK(row["step"] == step);
      for (const char* key : {"actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy", "actor/grad_norm",
                              "actor/kl_loss", "critic/score/mean", "critic/rewards/mean", "critic/advantages/mean",
                              "response_length/mean", "timing_s/gen", "timing_s/update_actor", "timing_s/step",
                              "perf/throughput", "memory/gen_gib"})
        CHECK(finite_number(row, key));
      if (estimator == "gae")
        for (const char* key : {"critic/vf_loss", "critic/values/mean", "timing_s/update_critic", "timing_s/values"})
          CHECK(finite_number(row, key));
      CHECK(finite_number(row, "val/acc") == (step % 3 == 0));
      CHECK(exists(run + "/global_step_" + std::to_string(step) + "/actor/model.safetensors"));
      CHECK(exists(run + "/global_step_" + std::to_string(step) + "/actor/optimizer.safetensors"));
      CHECK(exists(run + "/global_step_" + std::to_string(step) + "/critic/model.safetensors") == (estimator == "gae"));
    }
    CHECK(read_file(run + "/latest_checkpointed_iteration.txt").find(std::to_string(kSteps)) != std::string::npos);
    CHECK(exists(run + "/sft_model/model.safetensors"));
    // The saved actor is a Hugging Face folder our loader (and transformers) reads.
    model::DecoderLM saved = model::load_pretrained(run + "/global_step_6/actor");
    CHECK(saved.config().vocab_size == 384);
    const std::string report = read_file(run + "/report.html");
    CHECK(report.find("<svg") != std::string::npos);
    // The training moved the policy: the last checkpoint's weights differ from the SFT result.
    model::SafetensorsFile a(run + "/sft_model/model.safetensors"), b(run + "/global_step_6/actor/model.safetensors");
    CHECK_FALSE(a.tensor("model.layers.0.mlp.up_proj.weight").equal(b.tensor("model.layers.0.mlp.up_proj.weight")));
  }
}

TEST_CASE("verlpp train: SIGKILL mid-run, then resume, repeats the uninterrupted run exactly", "[e2e]") {
  const std::string dir = make_fixture("resume");
  for (const std::string estimator : {"grpo", "gae"}) {
    const std::string whole = dir + "/" + estimator + "-whole", killed = dir + "/" + estimator + "-killed";
    run_to_end(write_config(dir, whole, estimator), whole + ".log");

    const std::string config = write_config(dir, killed, estimator);
    const pid_t pid = start_train(config, killed + ".log");
    // Kill as soon as step 3 is on record: the process is then inside step 4 (or saving it).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (read_file(killed + "/metrics.jsonl").find("\"step\":3") == std::string::npos) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::kill(pid, SIGKILL);
    const int status = wait_for(pid);
    REQUIRE(WIFSIGNALED(status));  // it really died mid-run (a finished run would prove nothing)
    CHECK(controller::read_metrics(killed + "/metrics.jsonl").size() < size_t(kSteps + 1));

    run_to_end(config, killed + "-resumed.log");
    CHECK(read_file(killed + "-resumed.log").find("resumed from") != std::string::npos);
    const auto expected = deterministic_rows(whole), got = deterministic_rows(killed);
    REQUIRE(got.size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      INFO(estimator << " row " << i);
      CHECK(got[i] == expected[i]);
    }
    for (const std::string& role : estimator == "gae" ? std::vector<std::string>{"actor", "critic"} : std::vector<std::string>{"actor"}) {
      model::SafetensorsFile a(whole + "/global_step_6/" + role + "/model.safetensors");
      model::SafetensorsFile b(killed + "/global_step_6/" + role + "/model.safetensors");
      for (const auto& entry : a.entries()) CHECK(a.tensor(entry.name).equal(b.tensor(entry.name)));
    }
  }
}

TEST_CASE("the shipped example configs load and validate", "[e2e]") {
  for (const char* file : {"examples/gsm8k/grpo_qwen2.5_0.5b.json", "examples/gsm8k/ppo_qwen2.5_0.5b.json"}) {
    INFO(file);
    controller::Config c = controller::Config::from_file(std::string(VERLPP_SOURCE_DIR) + "/" + file);
    c.resolve();
    CHECK_NOTHROW(c.validate(1));
  }
  // The embedded default, as `verlpp train` reads it (its "demo" section is the CLI's).
  json given = json::parse(read_file(std::string(VERLPP_SOURCE_DIR) + "/examples/arith/grpo_tiny.json"));
  REQUIRE(given.contains("demo"));
  given.erase("demo");
  controller::Config c = controller::Config::from_json(given, "grpo_tiny.json");
  c.resolve();
  CHECK_NOTHROW(c.validate(1));
  CHECK(c.get<std::string>("data.train_files").find("/data/arith_train.jsonl") != std::string::npos);
}

TEST_CASE("verlpp train: every other estimator runs its family's step", "[e2e]") {
  const std::string dir = make_fixture("estimators");
  for (const std::string estimator :
       {"rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "opo", "gpg", "grpo_passk"}) {
    const std::string run = dir + "/" + estimator;
    const std::string config = write_config(dir, run, estimator);
    // Two steps, no SFT, no checkpoints or validation: the step function alone.
    json c = json::parse(read_file(config));
    c["trainer"]["total_training_steps"] = 2;
    c["trainer"]["save_freq"] = -1;
    c["trainer"]["test_freq"] = -1;
    c["trainer"]["val_before_train"] = false;
    c["sft"]["enable"] = false;
    std::ofstream(config) << c.dump(2);
    run_to_end(config, run + ".log");
    const std::vector<json> rows = controller::read_metrics(run + "/metrics.jsonl");
    REQUIRE(rows.size() == 2);
    for (const json& row : rows) {
      INFO(estimator << ": " << row.dump());
      for (const char* key : {"actor/pg_loss", "actor/grad_norm", "critic/advantages/mean", "critic/score/mean"})
        CHECK(finite_number(row, key));
      CHECK(finite_number(row, "timing_s/gen_max") == (estimator == "remax"));  // remax's greedy baseline
      CHECK_FALSE(row.contains("critic/vf_loss"));                              // no critic
    }
  }
}
