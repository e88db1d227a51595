// A vendor's plugin drives real runs: "counting" (tests/e2e/counting_plugin: host memory, torch
// device type cpu, every kernel of the list, a call counter per kernel) named by
// VERL_HARDWARE_PLUGIN. A `verlpp train` step and a `verlpp generate` run on its device call its
// kernels (the counters say which), and the start-up lines name them; cpu_ref, which marks its
// kernels a reference, is never called by a run.
#include <dirent.h>

#include <map>
#include <sstream>

// Catch2 (through e2e_util.hpp) last: LibTorch 2.x headers define glog's CHECK.
#include "e2e_util.hpp"

using namespace verlpp;
using namespace verlpp::e2e;

namespace {

// Sums the "<kernel> <calls>" files the plugin wrote at exit (one per process), `dir`/`stem`.<pid>.
std::map<std::string, uint64_t> kernel_calls(const std::string& dir, const std::string& stem) {
  std::map<std::string, uint64_t> calls;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind(stem + ".", 0) != 0) continue;
      std::istringstream in(read_file(dir + "/" + name));
      std::string kernel;
      uint64_t count = 0;
      while (in >> kernel >> count) calls[kernel] += count;
    }
    ::closedir(d);
  }
  return calls;
}

std::string described(const std::map<std::string, uint64_t>& calls) {
  std::string out;
  for (const auto& [k, n] : calls) out += k + "=" + std::to_string(n) + " ";
  return out;
}

}  // namespace

TEST_CASE("verlpp train: a step on a vendor plugin's cpu device calls the plugin's kernels", "[e2e][vendor]") {
  const std::string dir = make_fixture("vendor-train");
  const std::string run = dir + "/run";
  const std::string path = write_config(dir, run, "grpo");
  json c = json::parse(read_file(path));
  c["sft"]["enable"] = false;
  c["trainer"]["total_training_steps"] = 1;
  c["trainer"]["val_before_train"] = false;
  std::ofstream(path) << c.dump(2);
  const int status = wait_for(start_train(
      path, run + ".log", {"trainer.device=cpu"},
      {std::string("VERL_HARDWARE_PLUGIN=") + VERLPP_COUNTING_PLUGIN, "VERLPP_COUNTING_PLUGIN_OUT=" + dir + "/calls"}));
  const std::string log = read_file(run + ".log");
  INFO(log);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(log.find("device cpu (plugin counting)") != std::string::npos);
  CHECK(log.find("kernels from plugin counting: logprob_entropy, rms_norm") != std::string::npos);
  const auto calls = kernel_calls(dir, "calls");
  INFO(described(calls));
  // The engine's sampling and decode attention, the trainer's log-probs, norms, MLP and
  // optimizer step went through it.
  for (const char* kernel : {"logprob_entropy", "logprob_backward", "sample", "silu_mul", "silu_mul_backward",
                             "add_rms_norm", "rotary_paged_attention_decode", "adamw_update"}) {
    INFO(kernel);
    CHECK(calls.count(kernel) == 1);
    CHECK((calls.count(kernel) == 1 && calls.at(kernel) > 0));
  }
  CHECK(controller::read_metrics(run + "/metrics.jsonl").size() == 1);

  // cpu_ref on the same run: its kernels are a reference, so the run says none are called.
  const std::string ref_run = dir + "/cpu_ref";
  const std::string ref_config = write_config(dir, ref_run, "grpo");
  json rc = json::parse(read_file(ref_config));
  rc["sft"]["enable"] = false;
  rc["trainer"]["total_training_steps"] = 1;
  rc["trainer"]["val_before_train"] = false;
  std::ofstream(ref_config) << rc.dump(2);
  const int ref_status =
      wait_for(start_train(ref_config, ref_run + ".log", {"trainer.device=cpu"}, {"VERL_HARDWARE_PLUGIN=cpu_ref"}));
  const std::string ref_log = read_file(ref_run + ".log");
  INFO(ref_log);
  REQUIRE(WIFEXITED(ref_status));
  CHECK(WEXITSTATUS(ref_status) == 0);
  CHECK(ref_log.find("kernels: none called (plugin cpu_ref's are a reference implementation)") != std::string::npos);
}

TEST_CASE("verlpp generate honours VERL_HARDWARE_PLUGIN and calls the plugin's kernels", "[e2e][vendor]") {
  const std::string dir = make_fixture("vendor-generate");
  std::ofstream(dir + "/prompts.jsonl") << R"({"text": "12+34="})"
                                        << "\n"
                                        << R"({"text": "5+6="})"
                                        << "\n";
  const std::string generate = std::string(VERLPP_CLI) + " generate --model " + std::string(VERLPP_SOURCE_DIR) +
                               "/examples/tiny --init-seed 3 --prompts " + dir +
                               "/prompts.jsonl --max-new-tokens 4 --n 2";
  const std::string env =
      std::string("VERL_HARDWARE_PLUGIN=") + VERLPP_COUNTING_PLUGIN + " VERLPP_COUNTING_PLUGIN_OUT=" + dir + "/calls ";
  const int status = std::system((env + generate + " --output " + dir + "/out.jsonl 2> " + dir + "/log").c_str());
  const std::string log = read_file(dir + "/log");
  INFO(log);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(log.find("device cpu (plugin counting), kernels: logprob_entropy, rms_norm") != std::string::npos);
  const auto calls = kernel_calls(dir, "calls");
  INFO(described(calls));
  for (const char* kernel : {"sample", "add_rms_norm", "silu_mul", "rotary_paged_attention_decode"}) {
    INFO(kernel);
    CHECK(calls.count(kernel) == 1);
    CHECK((calls.count(kernel) == 1 && calls.at(kernel) > 0));
  }
  // A plugin path that does not exist is an error, not a silent CPU run.
  const int missing = std::system(("VERL_HARDWARE_PLUGIN=/nonexistent/libverlpp-plugin-x.so " + generate +
                                   " > /dev/null 2> " + dir + "/missing.log")
                                      .c_str());
  CHECK((WIFEXITED(missing) && WEXITSTATUS(missing) == 1));
  CHECK(read_file(dir + "/missing.log").find("/nonexistent/libverlpp-plugin-x.so") != std::string::npos);
}
