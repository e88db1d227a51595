// Bad input to the commands, as a careless user gives it: each case is refused with one line
// naming what, where and which value, a non-zero exit, and no LibTorch backtrace or JSON library
// code; the work it would have wasted (loading weights, allocating a model) is not started.
#include <verlpp/core/error_text.hpp>

#include "cli_run.hpp"

#include <ATen/ATen.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <unistd.h>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using Catch::Contains;

namespace {

using Run = verlpp::e2e::CliRun;
Run verlpp_run(const std::string& args) { return verlpp::e2e::run_cli(args); }

// A model folder with seeded weights (the tiny model), made by the CLI itself.
std::string tiny_model(const std::string& dir) {
  REQUIRE(std::system(("rm -rf " + dir).c_str()) == 0);
  const Run save =
      verlpp_run("model save " + std::string(VERLPP_SOURCE_DIR) + "/examples/tiny " + dir + " --init-seed 1");
  INFO(save.output);
  REQUIRE(save.status == 0);
  return dir;
}

void no_backtrace(const Run& run) {
  CHECK_THAT(run.output, !Contains("frame #") && !Contains("Exception raised from") && !Contains("json.exception"));
  // One line of error.
  CHECK(run.output.find("error:") == run.output.rfind("error:"));
}

}  // namespace

TEST_CASE("LibTorch's errors reach a user without their backtrace", "[cli][errors]") {
  try {
    at::index_select(at::zeros({3}), 0, at::tensor({7}, at::kLong));
    FAIL("index_select accepted an index out of range");
  } catch (const std::exception& e) {
    const std::string text = verlpp::error_text(e);
    CHECK_THAT(text, Contains("LibTorch: ") && Contains("out of range") && !Contains("frame #") &&
                         !Contains("Exception raised from"));
    CHECK(text.find('\n') == std::string::npos);
  }
}

TEST_CASE("verlpp model: out-of-range ids, corrupt weights and absurd configs are named errors", "[cli][errors]") {
  const std::string model = tiny_model("/tmp/verlpp-cli-errors-model");
  Run ids = verlpp_run("model logits " + model + " --ids 1,2,99999 --out /tmp/verlpp-cli-errors.safetensors");
  CHECK(ids.status == 1);
  CHECK_THAT(ids.output, Contains("--ids: id 99999 (sequence 1, position 3) is outside the vocabulary of " + model) &&
                             Contains("(0..383)"));
  no_backtrace(ids);
  Run negative = verlpp_run("model logits " + model + " --ids 5,-1 --out /tmp/verlpp-cli-errors.safetensors");
  CHECK(negative.status == 1);
  CHECK_THAT(negative.output, Contains("id -1 (sequence 1, position 2)"));

  // A truncated weights file: an error naming it, not "none found" with exit 0.
  const std::string truncated = tiny_model("/tmp/verlpp-cli-errors-truncated");
  REQUIRE(::truncate((truncated + "/model.safetensors").c_str(), 100000) == 0);
  Run info = verlpp_run("model info " + truncated);
  CHECK(info.status == 1);
  CHECK_THAT(info.output, Contains(truncated + "/model.safetensors") && !Contains("none found"));
  // A config-only folder is still fine and says so.
  Run config_only = verlpp_run("model info " + std::string(VERLPP_SOURCE_DIR) + "/examples/tiny");
  CHECK(config_only.status == 0);
  CHECK_THAT(config_only.output, Contains("none found"));

  // 10^8 layers: refused from the field, before any per-layer allocation.
  const std::string huge = "/tmp/verlpp-cli-errors-huge";
  REQUIRE(std::system(("rm -rf " + huge + " && mkdir -p " + huge).c_str()) == 0);
  {
    std::ifstream in(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/config.json");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const size_t at = text.find("\"num_hidden_layers\": 4");
    REQUIRE(at != std::string::npos);
    text.replace(at, 22, "\"num_hidden_layers\": 100000000");
    std::ofstream(huge + "/config.json") << text;
  }
  Run layers = verlpp_run("model info " + huge);
  CHECK(layers.status == 1);
  CHECK_THAT(layers.output, Contains("'num_hidden_layers' = 100000000 is beyond what verlpp supports"));
}

TEST_CASE("verlpp tokenize: a directory as input and unknown ids are named errors", "[cli][errors]") {
  const std::string tokenizer = std::string(VERLPP_SOURCE_DIR) + "/examples/tiny";
  Run dir = verlpp_run("tokenize --tokenizer " + tokenizer + " --file /tmp");
  CHECK(dir.status == 1);
  CHECK_THAT(dir.output, Contains("/tmp: the input file (--file) is a directory, not a file"));
  Run missing = verlpp_run("tokenize --tokenizer " + tokenizer + " --file /nonexistent.jsonl");
  CHECK(missing.status == 1);
  CHECK_THAT(missing.output, Contains("/nonexistent.jsonl") && Contains("No such file or directory"));
  std::ofstream("/tmp/verlpp-cli-errors-ids.jsonl") << "[1, 2, 99999]\n";
  std::ofstream("/tmp/verlpp-cli-errors-good-ids.jsonl") << "[40, 41]\n";
  Run decode = verlpp_run("tokenize --decode --tokenizer " + tokenizer + " < /tmp/verlpp-cli-errors-ids.jsonl");
  CHECK(decode.status == 1);
  CHECK_THAT(decode.output, Contains("<stdin>:1: id [2] = 99999 is not in the vocabulary") && Contains("(ids 0..353)"));
  Run good = verlpp_run("tokenize --decode --tokenizer " + tokenizer + " < /tmp/verlpp-cli-errors-good-ids.jsonl");
  CHECK(good.status == 0);
}

TEST_CASE("verlpp config: a null where a number is needed and a directory as the file are named", "[cli][errors]") {
  Run null_batch = verlpp_run("config data.train_batch_size=null");
  CHECK(null_batch.status == 1);
  CHECK_THAT(null_batch.output, Contains("'data.train_batch_size' is null (unset); it must be an integer"));
  no_backtrace(null_batch);
  Run dir = verlpp_run("config /tmp");
  CHECK(dir.status == 1);
  CHECK_THAT(dir.output, Contains("/tmp: the config file is a directory, not a file"));
  Run huge_n = verlpp_run("config actor_rollout_ref.rollout.n=1000000000");
  CHECK(huge_n.status == 1);
  CHECK_THAT(huge_n.output, Contains("GiB of host memory") && Contains("this machine has"));
}

TEST_CASE("verlpp config and train: no-effect keys are listed with why; a refused key stops the run naming it",
          "[cli][errors]") {
  const std::string valid =
      "data.train_batch_size=8 actor_rollout_ref.actor.ppo_mini_batch_size=4 "
      "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 critic.ppo_micro_batch_size_per_gpu=2";
  Run noted = verlpp_run("config " + valid + " actor_rollout_ref.rollout.name=vllm");
  CHECK(noted.status == 0);
  CHECK_THAT(noted.output, Contains("config: 1 key(s) set here have no effect in verlpp:") &&
                               Contains("actor_rollout_ref.rollout.name = \"vllm\": verlpp generates with its own"));
  Run quiet = verlpp_run("config " + valid);
  CHECK(quiet.status == 0);
  CHECK_THAT(quiet.output, !Contains("no effect"));
  Run refused = verlpp_run("config " + valid + " actor_rollout_ref.actor.calculate_entropy=true");
  CHECK(refused.status == 1);
  CHECK_THAT(refused.output, Contains("actor_rollout_ref.actor.calculate_entropy = true is refused: not implemented"));
  no_backtrace(refused);
  Run keys = verlpp_run("config --keys " + valid);
  CHECK(keys.status == 0);
  CHECK_THAT(keys.output,
             Contains("actor_rollout_ref.actor.fsdp_config.full_determinism = false  [no effect: ") &&
                 Contains("\nactor_rollout_ref.actor.fsdp_config.param_offload = false\n") &&
                 Contains("actor_rollout_ref.actor.calculate_entropy = false  [refused unless left at its default: ") &&
                 Contains("\nalgorithm.adv_estimator = \"gae\"\n"));
  // `verlpp train` prints the same block once at start, then refuses before any work.
  Run train = verlpp_run("train " + valid +
                         " actor_rollout_ref.model.path=/nonexistent/model data.train_files=/nonexistent/train.jsonl "
                         "trainer.default_local_dir=/tmp/verlpp-cli-refused actor_rollout_ref.rollout.name=vllm "
                         "actor_rollout_ref.actor.calculate_entropy=true");
  CHECK(train.status == 1);
  CHECK_THAT(train.output, Contains("actor_rollout_ref.rollout.name = \"vllm\": verlpp generates with its own") &&
                               Contains("actor_rollout_ref.actor.calculate_entropy = true is refused: "));
  CHECK(train.output.find("have no effect") == train.output.rfind("have no effect"));
}

TEST_CASE("verlpp train: overrides alone start from verl's defaults, which name no model; --demo takes no config",
          "[cli][errors]") {
  // As verl's main_ppo: the overrides apply to verl's defaults, so the demo's inputs are not written.
  const std::string dir = "/tmp/verlpp-cli-no-inputs";
  REQUIRE(std::system(("rm -rf " + dir).c_str()) == 0);
  Run bare = verlpp_run("train trainer.total_training_steps=1 trainer.default_local_dir=" + dir);
  CHECK(bare.status == 1);
  CHECK_THAT(bare.output,
             Contains("actor_rollout_ref.model.path is not set") && Contains("verlpp train --demo [overrides ...]"));
  no_backtrace(bare);
  CHECK(std::system(("test -e " + dir).c_str()) != 0);
  // With a model and no data, the data key is named.
  Run no_data = verlpp_run("train actor_rollout_ref.model.path=" + tiny_model("/tmp/verlpp-cli-no-inputs-model"));
  CHECK(no_data.status == 1);
  CHECK_THAT(no_data.output, Contains("data.train_files is not set"));
  no_backtrace(no_data);
  Run both = verlpp_run("train --demo " + std::string(VERLPP_SOURCE_DIR) + "/examples/arith/grpo_tiny.json");
  CHECK(both.status == 1);
  CHECK_THAT(both.output,
             Contains("--demo: runs the embedded demo's config;") && Contains("grpo_tiny.json is another"));
  no_backtrace(both);
}

TEST_CASE("verlpp train: a reward function that cannot be had is named by the key it came from", "[cli][errors]") {
  const std::string run = "/tmp/verlpp-reward-key-" + std::to_string(::getpid());
  const std::string demo = "train --demo trainer.default_local_dir=" + run;
  // The reward layer names the file or the function; the controller adds the key.
  const Run python = verlpp::e2e::run_cli(demo + " custom_reward_function.path=/x/reward.py");
  CHECK(python.status == 1);
  CHECK_THAT(python.output, Contains("custom_reward_function.path=/x/reward.py: is a Python file") &&
                                Contains("C symbol in a shared library"));
  const Run missing = verlpp::e2e::run_cli(demo + " reward_manager.name=batch custom_reward_function.name=nope");
  CHECK(missing.status == 1);
  CHECK_THAT(missing.output, Contains("custom_reward_function.name=nope: no batch reward function 'nope'") &&
                                 Contains("registered: none"));
  std::system(("rm -rf " + run).c_str());
}
