// The commands as a user runs them: `verlpp plugins` / `verlpp demo` under each
// VERL_HARDWARE_PLUGIN form, verlpp-plugin-check catching a deliberately wrong kernel, and the
// kernel list agreeing with what both commands show.
#include <catch2/catch.hpp>

#include "test_paths.hpp"

#include <verlpp/hw/torch_device.hpp>
#include <verlpp/sdk/kernel_list.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

using namespace verlpp;

namespace {

std::string verlpp_cmd(const std::string& env, const std::string& args) {
  return "env -u VERL_HARDWARE_PLUGIN -u VERLPP_PLUGIN_PATH " + env + " " + test::bin_dir() + "/verlpp " + args;
}

}  // namespace

TEST_CASE("verlpp plugins lists cpu_ref found beside the executable", "[cli]") {
  std::string out;
  REQUIRE(test::run_command(verlpp_cmd("", "plugins"), out) == 0);
  CHECK_THAT(out, Catch::Contains("cpu_ref") && Catch::Contains(test::cpu_ref_path()));
  // cpu_ref's own row (on a GPU host the cuda plugin's row lists a communicator too).
  size_t row = out.find("\ncpu_ref ");
  REQUIRE(row != std::string::npos);
  std::string cpu_ref_row = out.substr(row + 1, out.find('\n', row + 1) - row - 1);
  CHECK((cpu_ref_row.find("communicator") != std::string::npos) == bool(VERLPP_CPU_REF_HAS_GLOO));
}

TEST_CASE("verlpp plugins shows rejected plugins with their reason", "[cli]") {
  std::string out;
  REQUIRE(test::run_command(verlpp_cmd("VERLPP_PLUGIN_PATH=" + test::plugin_case_dir("init_throws"), "plugins"), out) ==
          0);
  CHECK_THAT(out, Catch::Contains("Rejected") && Catch::Contains("boom: init failed on purpose"));
  CHECK_THAT(out, Catch::Contains("cpu_ref"));
}

TEST_CASE("verlpp plugins goes on past a plugin whose probe crashes or hangs", "[cli][probe]") {
  std::string out;
  const std::string dirs = test::plugin_case_dir("probe_segv") + ":" + test::plugin_case_dir("probe_hang");
  REQUIRE(test::run_command(verlpp_cmd("VERLPP_PLUGIN_PROBE_TIMEOUT_MS=2000 VERLPP_PLUGIN_PATH=" + dirs, "plugins"),
                            out) == 0);
  CHECK_THAT(out, Catch::Contains("Rejected") && Catch::Contains("crashed in its probe (signal SIGSEGV)"));
  CHECK_THAT(out, Catch::Contains("its probe did not return within 2000 ms"));
  CHECK_THAT(out, Catch::Contains("cpu_ref"));
  // A bad timeout is named, not taken.
  CHECK(test::run_command(verlpp_cmd("VERLPP_PLUGIN_PROBE_TIMEOUT_MS=soon", "plugins"), out) == 1);
  CHECK_THAT(out, Catch::Contains("VERLPP_PLUGIN_PROBE_TIMEOUT_MS=soon") && Catch::Contains("milliseconds"));
}

TEST_CASE("verlpp-plugin-check fails a plugin whose probe crashes, aborts or hangs as a case, not a crash",
          "[cli][probe]") {
  const std::string json_path = "/tmp/verlpp_check_crashing_probe.json";
  for (const auto& [folder, stem, reason] :
       {std::tuple<std::string, std::string, std::string>{"probe_segv", "probesegv", "signal SIGSEGV"},
        {"probe_abort", "probeabort", "signal SIGABRT"},
        {"probe_hang", "probehang", "did not return within 2000 ms"}}) {
    INFO(folder);
    std::remove(json_path.c_str());
    std::string out;
    const int status =
        test::run_command("VERLPP_PLUGIN_PROBE_TIMEOUT_MS=2000 " + test::bin_dir() + "/verlpp-plugin-check " +
                              test::plugin_case_file(folder, stem) + " --json " + json_path,
                          out);
    CHECK(status == 1);  // a failed suite, not a usage error (2) or a signal
    CHECK_THAT(out, Catch::Contains("abi / load and probe") && Catch::Contains("FAIL") && Catch::Contains(reason));
    CHECK_THAT(out, Catch::Contains("0 passed, 1 failed"));
    std::ifstream in(json_path);
    REQUIRE(in.good());
    const nlohmann::json results = nlohmann::json::parse(in);
    REQUIRE(results["results"].size() == 1);
    CHECK(results["results"][0]["outcome"] == "FAIL");
    CHECK_THAT(results["results"][0]["detail"].get<std::string>(), Catch::Contains(reason));
  }
}

TEST_CASE("verlpp plugins says when this LibTorch cannot place a plugin's cuda tensors", "[cli]") {
  std::string out;
  std::string path = test::plugin_case_file("cuda_type", "cudalike");
  REQUIRE(test::run_command(verlpp_cmd("VERL_HARDWARE_PLUGIN=" + path, "plugins"), out) == 0);
  std::string problem = hw::torch_placement_problem("cuda");
  if (problem.empty()) {
    CHECK_THAT(out, !Catch::Contains("has no CUDA"));
  } else {
    CHECK_THAT(problem, Catch::Contains("this LibTorch build has no CUDA"));
    CHECK_THAT(out, Catch::Contains("note: cudalike: " + problem));
  }
}

TEST_CASE("an explicitly named plugin that fails stops the program", "[cli]") {
  std::string out;
  CHECK(test::run_command(verlpp_cmd("VERL_HARDWARE_PLUGIN=/nonexistent/libverlpp-plugin-x.so", "plugins"), out) == 1);
  CHECK_THAT(out, Catch::Contains("verlpp: error:") && Catch::Contains("/nonexistent/libverlpp-plugin-x.so"));
  std::string initfail = test::plugin_case_file("init_throws", "initfail");
  CHECK(test::run_command(verlpp_cmd("VERL_HARDWARE_PLUGIN=" + initfail, "demo"), out) == 1);
  CHECK_THAT(out, Catch::Contains(initfail) && Catch::Contains("boom"));
  CHECK(test::run_command(verlpp_cmd("VERL_HARDWARE_PLUGIN=cuda_nonexistent", "plugins"), out) == 1);
  CHECK_THAT(out, Catch::Contains("no plugin named 'cuda_nonexistent'"));
}

TEST_CASE("VERL_HARDWARE_PLUGIN=none and the demo", "[cli]") {
  std::string out;
  CHECK(test::run_command(verlpp_cmd("VERL_HARDWARE_PLUGIN=none", "plugins"), out) == 0);
  CHECK_THAT(out, Catch::Contains("disabled"));
  CHECK(test::run_command(verlpp_cmd("VERL_HARDWARE_PLUGIN=cpu_ref", "demo"), out) == 0);
  CHECK_THAT(out,
             Catch::Contains("round trip") && Catch::Contains("identical") && Catch::Contains("all checks passed"));
}

TEST_CASE("verlpp demo runs every kernel a plugin offers against the host's path", "[cli]") {
  std::string out;
  CHECK(test::run_command(verlpp_cmd("VERL_HARDWARE_PLUGIN=cpu_ref", "demo"), out) == 0);
  INFO(out);
  // cpu_ref offers the whole list: one line per kernel, each within the bound.
  for (const auto& k : verlpp::sdk::kKernels) {
    INFO(k.name);
    const size_t at = out.find(std::string("  kernel      ") + k.name + " ");
    REQUIRE(at != std::string::npos);
    const std::string line = out.substr(at, out.find('\n', at) - at);
    CHECK_THAT(line, Catch::Contains("on cpu vs the host's path: max |diff|") && Catch::EndsWith("(ok)"));
  }
  // A plugin whose logprob_entropy computes something else fails the demo on that kernel.
  const std::string wrong = test::plugin_case_file("wrong_kernel", "wrongkernel");
  CHECK(test::run_command(verlpp_cmd("VERL_HARDWARE_PLUGIN=" + wrong, "demo"), out) == 1);
  const size_t at = out.find("  kernel      logprob_entropy ");
  REQUIRE(at != std::string::npos);
  CHECK_THAT(out.substr(at, out.find('\n', at) - at), Catch::Contains("TOO LARGE"));
  CHECK_THAT(out, Catch::Contains("demo: SOME CHECKS FAILED"));
}

TEST_CASE("verlpp-plugin-check catches a wrong kernel", "[cli][conformance]") {
  std::string out;
  std::string path = test::plugin_case_file("wrong_kernel", "wrongkernel");
  CHECK(test::run_command(test::bin_dir() + "/verlpp-plugin-check --ranks '' " + path, out) == 1);
  CHECK_THAT(out, Catch::Contains("FAIL") && Catch::Contains("logprob_entropy") && Catch::Contains("first bad index"));
  // The interleaved (GPT-J) RoPE layout fails the f32 rotary cases on the values, not on a refusal.
  const size_t row = out.find("rotary_embedding N=7 H=4 K=2 S=64 float32");
  REQUIRE(row != std::string::npos);
  const std::string line = out.substr(row, out.find('\n', row) - row);
  CHECK_THAT(line, Catch::Contains("FAIL") && Catch::Contains("first bad index"));
  CHECK(test::run_command(test::bin_dir() + "/verlpp-plugin-check /nonexistent.so", out) == 2);
  CHECK_THAT(out, Catch::Contains("/nonexistent.so") && Catch::Contains("does not exist"));
}

TEST_CASE("JSON nested 10^5 deep is refused with the file named, never a crash", "[cli][json]") {
  const std::string dir = "/tmp/verlpp-test-deep-json-" + std::to_string(::getpid());
  REQUIRE(std::system(("mkdir -p " + dir).c_str()) == 0);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::ofstream(dir + "/config.json") << "{\"trainer\": " << deep << "}";
  std::ofstream(dir + "/lines.jsonl") << "[1, 2]\n" << deep << "\n";
  std::string out;
  CHECK(test::run_command(verlpp_cmd("", "config " + dir + "/config.json"), out) == 1);
  CHECK_THAT(out, Catch::Contains(dir + "/config.json") && Catch::Contains("JSON nested deeper than 512 levels"));
  CHECK(test::run_command(verlpp_cmd("", "tokenize --tokenizer " + std::string(VERLPP_SOURCE_DIR) +
                                             "/examples/tiny --decode --file " + dir + "/lines.jsonl"),
                          out) == 1);
  CHECK_THAT(out, Catch::Contains(dir + "/lines.jsonl:2") && Catch::Contains("JSON nested deeper than 512 levels"));
  REQUIRE(std::system(("rm -rf " + dir).c_str()) == 0);
}

TEST_CASE("the kernel list, the conformance registration and verlpp plugins agree", "[cli][conformance][kernels]") {
  // The list's names, in its order: what cpu_ref (which implements every entry) must show.
  std::vector<std::string> listed;
  for (const sdk::KernelInfo& k : sdk::kKernels) listed.push_back(k.name);
  REQUIRE(listed.size() == 12);
  CHECK(listed.front() == "logprob_entropy");
  CHECK(listed.back() == "rotary_paged_attention_decode");

  // verlpp plugins: cpu_ref's kernels column is the list, comma-joined.
  std::string out;
  REQUIRE(test::run_command(verlpp_cmd("VERL_HARDWARE_PLUGIN=cpu_ref", "plugins"), out) == 0);
  std::string joined;
  for (const std::string& name : listed) joined += (joined.empty() ? "" : ",") + name;
  const size_t row = out.find("\ncpu_ref ");
  REQUIRE(row != std::string::npos);
  CHECK_THAT(out.substr(row + 1, out.find('\n', row + 1) - row - 1), Catch::Contains(" " + joined + " "));

  // The conformance suite: every listed kernel has cases, each of which passes on cpu_ref, and
  // no case names a kernel outside the list.
  const std::string json = test::bin_dir() + "/kernel_list_agreement.json";
  REQUIRE(test::run_command(
              test::bin_dir() + "/verlpp-plugin-check --ranks '' --json " + json + " " + test::cpu_ref_path(), out) ==
          0);
  std::ifstream in(json);
  const nlohmann::json report = nlohmann::json::parse(in);
  std::map<std::string, int> passed;
  for (const auto& r : report.at("results")) {
    const std::string kernel = r.at("kernel").get<std::string>();
    if (kernel.empty()) continue;
    INFO("case " << r.at("case").get<std::string>());
    CHECK(std::find(listed.begin(), listed.end(), kernel) != listed.end());
    CHECK(r.at("outcome").get<std::string>() == "pass");
    ++passed[kernel];
  }
  for (const std::string& name : listed) {
    INFO("kernel " << name);
    CHECK(passed[name] >= 1);
  }
}
