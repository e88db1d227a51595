// `verlpp plan` as a user runs it (the embedded default; a 7B-shaped folder planned for a 140 GiB
// device), and `verlpp train` refusing, before any work, a model whose resident training state
// cannot fit this machine.
#include "../model_shapes.hpp"
#include "cli_run.hpp"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

using Catch::Matchers::Contains;

namespace {

// A model folder holding only config.json (the tiny model's, with `changes`) and the tiny tokenizer.
std::string shape_folder(const std::string& dir, const nlohmann::json& changes) {
  REQUIRE(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()) == 0);
  const std::string tiny = std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/";
  std::ifstream in(tiny + "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config.update(changes);
  std::ofstream(dir + "/config.json") << config.dump(2);
  REQUIRE(std::system(("cp " + tiny + "tokenizer.json " + tiny + "tokenizer_config.json " + dir + "/").c_str()) == 0);
  return dir;
}

}  // namespace

TEST_CASE("verlpp plan: the default run fits; a 7B shape on one 140 GiB device does not, and says what would",
          "[cli][plan]") {
  const auto plain = verlpp::e2e::run_cli("plan");
  INFO(plain.output);
  CHECK(plain.status == 0);
  CHECK_THAT(plain.output,
             Contains("actor AdamW moments") && Contains("actor_update ") && Contains("peak: ") && Contains("- fits"));

  const std::string dir =
      shape_folder("/tmp/verlpp-plan-7b-" + std::to_string(::getpid()), verlpp::test::qwen2_5_7b_fields());
  const std::string args =
      "plan " + std::string(VERLPP_SOURCE_DIR) + "/examples/arith/grpo_tiny.json actor_rollout_ref.model.path=" + dir +
      " actor_rollout_ref.actor.use_kl_loss=true actor_rollout_ref.rollout.dtype=bfloat16"
      " actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16"
      " actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 trainer.device=cuda --device-memory-gib 140";
  const auto seven = verlpp::e2e::run_cli(args);
  INFO(seven.output);
  CHECK(seven.status == 0);
  CHECK_THAT(seven.output, Contains("does NOT fit") &&
                               Contains("would fit with actor_rollout_ref.actor.fsdp_config.optimizer_offload=true") &&
                               Contains("trainer.zero_stage=3 on 2 ranks"));
  const auto offloaded = verlpp::e2e::run_cli(args + " actor_rollout_ref.actor.fsdp_config.optimizer_offload=true");
  INFO(offloaded.output);
  CHECK_THAT(offloaded.output, Contains("in host memory (offloaded") && Contains("actor AdamW moments") &&
                                   Contains("- fits") && !Contains("would fit with"));
  const auto sharded = verlpp::e2e::run_cli(args + " trainer.zero_stage=3 --nproc 2");
  INFO(sharded.output);
  CHECK_THAT(sharded.output, Contains("actor weight shard") && Contains("actor AdamW moments, shard") &&
                                 Contains("gathered units") && !Contains("would fit with"));
  // A split engine holds one rank's slice (7B: 28 heads, 4 KV heads split over 2 ranks).
  const auto split = verlpp::e2e::run_cli(
      args + " trainer.zero_stage=3 actor_rollout_ref.rollout.tensor_model_parallel_size=2 --nproc 2");
  INFO(split.output);
  CHECK_THAT(split.output, Contains("1 rollout engine(s) of 2 ranks") &&
                               Contains("rollout engine weights (1/2 slice, bfloat16)") &&
                               Contains("tensor_model_parallel_size 2") && !Contains("would fit with"));
  // The reference alone on a pool of its own: the plan is the actor pool's 2 ranks, without it.
  const auto pools =
      verlpp::e2e::run_cli(args +
                           " trainer.zero_stage=3 --nproc 4 trainer.n_gpus_per_node=4"
                           " 'trainer.resource_pools=[{name: a, n_gpus_per_node: 2}, {name: r, n_gpus_per_node: 2}]'"
                           " trainer.role_pools.ref=r");
  INFO(pools.output);
  CHECK(pools.status == 0);
  CHECK_THAT(pools.output, Contains("resource pools: a (ranks 0-1): actor_rollout; r (ranks 2-3): ref; the plan "
                                    "below is the actor pool's (2 rank(s))") &&
                               Contains(", 2 rank(s), ZeRO stage 3") && Contains("actor weight shard") &&
                               !Contains("reference weight"));
  CHECK(std::system(("rm -rf " + dir).c_str()) == 0);
}

TEST_CASE("verlpp train: a model whose plan cannot fit is refused before any work", "[cli][plan]") {
  // A 72B-like shape: its fp32 masters alone exceed any host this runs on.
  const std::string dir =
      shape_folder("/tmp/verlpp-plan-72b-" + std::to_string(::getpid()), verlpp::test::qwen_72b_like_fields());
  const std::string run = dir + "-run";
  const auto r = verlpp::e2e::run_cli("train --demo trainer.default_local_dir=" + run +
                                      " actor_rollout_ref.model.path=" + dir + " sft.enable=false");
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK_THAT(r.output, Contains("memory plan") && Contains("stage needs") &&
                           Contains("largest item: actor AdamW moments") && Contains("`verlpp plan`"));
  CHECK_THAT(r.output, !Contains("terminate called") && !Contains("Exception raised from"));
  CHECK(std::system(("rm -rf " + dir + " " + run).c_str()) == 0);
}

TEST_CASE("the examples from a fresh clone: plan and config work before the demo ever ran", "[cli][plan]") {
  // A fresh working folder: no checkpoints/ with the demo's model in it.
  const std::string cwd = "/tmp/verlpp-fresh-" + std::to_string(::getpid());
  REQUIRE(std::system(("rm -rf " + cwd + " && mkdir -p " + cwd).c_str()) == 0);
  const std::string in_fresh = "cd " + cwd + " && " + std::string(VERLPP_CLI) + " ";
  const std::string examples = std::string(VERLPP_SOURCE_DIR) + "/examples/";
  for (const char* example : {"arith/grpo_tiny.json", "arith/ppo_rm_tiny.json"}) {
    INFO(example);
    const auto plan = verlpp::e2e::run_shell_line(in_fresh + "plan " + examples + example + " 2>&1");
    INFO(plan.output);
    CHECK(plan.status == 0);
    CHECK_THAT(plan.output, Contains("(0.001B parameters)") && Contains("- fits"));
  }
  for (const char* example : {"arith/grpo_tiny.json", "arith/ppo_rm_tiny.json", "gsm8k/grpo_qwen2.5_0.5b.json",
                              "gsm8k/ppo_qwen2.5_0.5b.json"}) {
    INFO(example);
    const auto config = verlpp::e2e::run_shell_line(in_fresh + "config " + examples + example + " 2>&1");
    CHECK(config.status == 0);
    CHECK_THAT(config.output, Contains("\"actor_rollout_ref\""));
  }
  // --demo as `verlpp train` takes it: the embedded run, overrides after it; not beside a file.
  const auto demo = verlpp::e2e::run_shell_line(in_fresh + "plan --demo actor_rollout_ref.rollout.n=4 2>&1");
  INFO(demo.output);
  CHECK(demo.status == 0);
  CHECK_THAT(demo.output, Contains("arith_grpo_tiny/tiny_init") && Contains("- fits"));
  const auto both = verlpp::e2e::run_shell_line(in_fresh + "plan --demo " + examples + "arith/grpo_tiny.json 2>&1");
  CHECK(both.status != 0);
  CHECK_THAT(both.output, Contains("--demo") && Contains("give one of the two"));
  // Nothing was written: plan and config only read.
  CHECK(verlpp::e2e::run_shell_line("ls -A " + cwd).output.empty());
  std::system(("rm -rf " + cwd).c_str());
}
