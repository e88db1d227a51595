// A vendor's plugin drives real runs: "counting" (tests/e2e/counting_plugin: host memory, torch
// device type cpu, every kernel of the list, a call counter per kernel) named by
// VERL_HARDWARE_PLUGIN. A `verlpp train` step and a `verlpp generate` run on its device call its
// kernels (the counters say which), and the start-up lines name them; cpu_ref, which marks its
// kernels a reference, is never called by a run.
#include <dirent.h>

#include <map>
#include <set>
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
  CHECK(tracking::read_metrics(run + "/metrics.jsonl").size() == 1);

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

namespace {

// A one-step GRPO run without the SFT warm start or validation, its config written under `dir`.
std::string one_step_run_config(const std::string& dir, const std::string& run) {
  const std::string path = write_config(dir, run, "grpo");
  json c = json::parse(read_file(path));
  c["sft"]["enable"] = false;
  c["trainer"]["total_training_steps"] = 1;
  c["trainer"]["val_before_train"] = false;
  std::ofstream(path) << c.dump(2);
  return path;
}

// The environment of a run on counting_pu1 (privateuseone devices) whose torch backend library is
// `backend` ("" = it names none), with cpu_ref loaded beside it.
std::vector<std::string> pu1_env(const std::string& dir, const std::string& backend) {
  std::vector<std::string> env = {std::string("VERL_HARDWARE_PLUGIN=") + VERLPP_COUNTING_PU1_PLUGIN + ",cpu_ref",
                                  "VERLPP_COUNTING_PLUGIN_OUT=" + dir + "/calls"};
  if (!backend.empty()) env.push_back("COUNTING_TORCH_BACKEND=" + backend);
  return env;
}

// What makes a run on an accelerator-typed device compute what a run on the host computes: fp32
// everywhere (an accelerator's default is bf16) and the host's split projections; a small KV pool
// (a device's is sized from its memory).
const std::vector<std::string> kHostMath = {
    "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32", "actor_rollout_ref.rollout.dtype=float32",
    "verlpp.model.fused_training_projections=false", "actor_rollout_ref.rollout.gpu_memory_utilization=0.02"};

std::vector<std::string> with_host_math(std::vector<std::string> overrides) {
  overrides.insert(overrides.end(), kHostMath.begin(), kHostMath.end());
  return overrides;
}

// The test backend's file name: a bare name, which the host resolves in the plugin's folder.
std::string host_backend_name() {
  const std::string path = VERLPP_HOST_PRIVATEUSE1;
  return path.substr(path.rfind('/') + 1);
}

// The metrics of a run's only step, without its timings and process memory (which differ between
// any two runs).
json step_metrics(const std::string& run) {
  const auto rows = tracking::read_metrics(run + "/metrics.jsonl");
  REQUIRE(rows.size() == 1);
  json out = json::object();
  for (const auto& [key, value] : rows.front().items())
    if (key.rfind("timing", 0) != 0 && key.rfind("perf/", 0) != 0 && key.rfind("memory/", 0) != 0) out[key] = value;
  return out;
}

}  // namespace

TEST_CASE("verlpp train on a plugin's privateuseone device through the LibTorch backend the plugin names (ABI 1.6)",
          "[e2e][vendor][device]") {
  // counting_pu1 names the test backend (a file beside it, by bare name) as its torch backend library:
  // the host loads it, the run lands on privateuseone:0 and calls the plugin's kernels there.
  const std::string dir = make_fixture("vendor-privateuse1");
  const std::string run = dir + "/run";
  const int status = wait_for(start_train(one_step_run_config(dir, run), run + ".log",
                                          with_host_math({"trainer.device=auto"}), pu1_env(dir, host_backend_name())));
  const std::string log = read_file(run + ".log");
  INFO(log);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(log.find("device privateuseone:0 (plugin counting_pu1)") != std::string::npos);
  const auto calls = kernel_calls(dir, "calls");
  INFO(described(calls));
  for (const char* kernel : {"logprob_entropy", "logprob_backward", "sample", "silu_mul", "adamw_update"}) {
    INFO(kernel);
    CHECK((calls.count(kernel) == 1 && calls.at(kernel) > 0));
  }

  // The backend computes on host memory with LibTorch's CPU kernels, so the same step on the
  // counting plugin's cpu device (the same kernels) gives the same numbers.
  const std::string cpu_dir = make_fixture("vendor-privateuse1-cpu");
  const std::string cpu_run = cpu_dir + "/run";
  const int cpu_status = wait_for(start_train(one_step_run_config(cpu_dir, cpu_run), cpu_run + ".log",
                                              with_host_math({"trainer.device=cpu"}),
                                              {std::string("VERL_HARDWARE_PLUGIN=") + VERLPP_COUNTING_PLUGIN}));
  INFO(read_file(cpu_run + ".log"));
  REQUIRE((WIFEXITED(cpu_status) && WEXITSTATUS(cpu_status) == 0));
  CHECK(step_metrics(run) == step_metrics(cpu_run));
}

TEST_CASE("verlpp generate on a plugin's privateuseone device gives the samples of the same plugin on the host",
          "[e2e][vendor][device]") {
  const std::string dir = make_fixture("vendor-privateuse1-generate");
  std::ofstream(dir + "/prompts.jsonl") << R"({"text": "12+34="})"
                                        << "\n"
                                        << R"({"text": "5+6="})"
                                        << "\n";
  const std::string generate = std::string(VERLPP_CLI) + " generate --model " + std::string(VERLPP_SOURCE_DIR) +
                               "/examples/tiny --init-seed 3 --prompts " + dir +
                               "/prompts.jsonl --max-new-tokens 4 --n 2 --temperature 1";
  std::string env;
  for (const std::string& e : pu1_env(dir, host_backend_name())) env += e + " ";
  const int status = std::system((env + generate + " --output " + dir + "/pu1.jsonl 2> " + dir + "/log").c_str());
  const std::string log = read_file(dir + "/log");
  INFO(log);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK(log.find("device privateuseone:0 (plugin counting_pu1)") != std::string::npos);
  const auto calls = kernel_calls(dir, "calls");
  INFO(described(calls));
  CHECK((calls.count("sample") == 1 && calls.at("sample") > 0));
  const int cpu = std::system((std::string("VERL_HARDWARE_PLUGIN=") + VERLPP_COUNTING_PLUGIN + " " + generate +
                               " --output " + dir + "/cpu.jsonl 2> " + dir + "/cpu.log")
                                  .c_str());
  REQUIRE((WIFEXITED(cpu) && WEXITSTATUS(cpu) == 0));
  // Rows come in completion order; compare them as sets of lines.
  auto lines_of = [](const std::string& text) {
    std::multiset<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.insert(line);
    return lines;
  };
  const auto pu1 = lines_of(read_file(dir + "/pu1.jsonl"));
  CHECK(pu1.size() == 4);
  CHECK(pu1 == lines_of(read_file(dir + "/cpu.jsonl")));
}

TEST_CASE("a privateuseone plugin whose LibTorch backend is missing, fails to load or cannot compute is refused",
          "[e2e][vendor][device]") {
  struct Case {
    std::string backend, message;
  };
  const std::vector<Case> cases = {
      {"",
       "this LibTorch has no PrivateUse1 backend registered (the vendor's torch extension registers it when the "
       "program loads it); plugin counting_pu1 names no torch backend library (ABI 1.6's torch_backend_library)"},
      {"/nonexistent/libvendor_torch.so",
       "plugin counting_pu1's torch backend library /nonexistent/libvendor_torch.so could not be loaded: "},
      {VERLPP_FAKE_PRIVATEUSE1,
       "plugin counting_pu1's device privateuseone:0 cannot be used: LibTorch cannot compute on privateuseone:0: "},
  };
  const std::string dir = make_fixture("vendor-privateuse1-refused");
  int n = 0;
  for (const Case& c : cases) {
    INFO("COUNTING_TORCH_BACKEND=" << c.backend);
    const std::string run = dir + "/run" + std::to_string(n++);
    const int status = wait_for(
        start_train(one_step_run_config(dir, run), run + ".log", {"trainer.device=auto"}, pu1_env(dir, c.backend)));
    const std::string log = read_file(run + ".log");
    INFO(log);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 1));
    CHECK(log.find("verlpp: error: trainer.device: ") != std::string::npos);
    CHECK(log.find(c.message) != std::string::npos);
    CHECK_FALSE(exists(run + "/metrics.jsonl"));
    // `verlpp plugins` says the same about the plugin.
    std::string env;
    for (const std::string& e : pu1_env(dir, c.backend)) env += e + " ";
    const int listed = std::system((env + VERLPP_CLI + " plugins > " + run + ".plugins").c_str());
    CHECK((WIFEXITED(listed) && WEXITSTATUS(listed) == 0));
    const std::string listing = read_file(run + ".plugins");
    INFO(listing);
    CHECK(listing.find("note: counting_pu1: ") != std::string::npos);
    CHECK(listing.find(c.backend.empty() ? "names no torch backend library" : c.backend) != std::string::npos);
  }
}
