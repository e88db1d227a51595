// verlpp-plugin-check against the mistakes a vendor makes starting from the SDK template: each is
// a variant of tests/hw/plugins/sdk_test_plugin.cpp one define away from mistakes/good, which
// passes; each variant must exit 1 with the failing case's own message. Also the host's warning
// for a kernel table shorter than its plugin's minor.
#include <catch2/catch.hpp>

#include "test_paths.hpp"

#include <verlpp/core/log.hpp>
#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/plugin_abi.h>

#include <string>
#include <vector>

using namespace verlpp;

namespace {

struct CheckRun {
  int exit_code = -1;
  std::string output;
  // The table row of case `name` (from its title to the end of the line); "" when absent.
  std::string row(const std::string& name) const {
    const size_t at = output.find(" / " + name);
    if (at == std::string::npos) return "";
    return output.substr(at, output.find('\n', at) - at);
  }
};

CheckRun check_mistake(const std::string& stem) {
  CheckRun run;
  run.exit_code = test::run_command(
      test::bin_dir() + "/verlpp-plugin-check --ranks '' " + test::plugin_case_file("mistakes", stem), run.output);
  return run;
}

// Exit 1, and case `name` failed with a detail containing every one of `parts`.
void require_failed(const CheckRun& run, const std::string& name, const std::vector<std::string>& parts) {
  INFO(run.output);
  CHECK(run.exit_code == 1);
  const std::string row = run.row(name);
  INFO("row: " << row);
  REQUIRE(!row.empty());
  CHECK_THAT(row, Catch::Contains("FAIL"));
  for (const std::string& p : parts) CHECK_THAT(row, Catch::Contains(p));
}

}  // namespace

TEST_CASE("the mistakes' baseline plugin passes every case it offers", "[cli][conformance]") {
  const CheckRun run = check_mistake("good");
  INFO(run.output);
  CHECK(run.exit_code == 0);
  for (const char* name :
       {"kernels that come in pairs are offered together", "table struct_size", "rms_norm rejects bad input",
        "rms_norm with row-strided x is refused or honoured", "silu_mul (+ backward) N=33 F=4864 bfloat16",
        "silu_mul (+ backward) N=5 F=257 float16 (halves",
        "device properties: torch device type, DLPack type and memory"}) {
    INFO(name);
    CHECK_THAT(run.row(name), Catch::Contains("pass"));
  }
}

TEST_CASE("verlpp-plugin-check fails a current-minor plugin whose kernel table has 1.0's size", "[cli][conformance]") {
  require_failed(check_mistake("oldtable"), "table struct_size",
                 {"struct_size is 48 bytes, expected 104", "ABI 1." + std::to_string(VERLPP_PLUGIN_ABI_MINOR),
                  "silu_mul_backward"});
}

TEST_CASE("the host warns about a kernel table shorter than its plugin's minor, with both sizes", "[hw]") {
  std::vector<std::string> lines;
  set_log_sink([&](LogLevel level, const std::string& line) {
    if (level >= LogLevel::warning) lines.push_back(line);
  });
  {
    hw::Plugin plugin = hw::load_plugin_file(test::plugin_case_file("mistakes", "oldtable"));
    hw::Kernels kernels(plugin);
    CHECK(kernels.offers(hw::KernelId::rms_norm));
    CHECK_FALSE(kernels.offers(hw::KernelId::silu_mul));  // past byte 48: the ABI's reading rule
  }
  set_log_sink(nullptr);
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  CHECK_THAT(all, Catch::Contains("kernel table struct_size is 48 bytes") &&
                      Catch::Contains("ABI 1." + std::to_string(VERLPP_PLUGIN_ABI_MINOR)) &&
                      Catch::Contains("defines 104"));
}

TEST_CASE("verlpp-plugin-check fails a silu_mul that skips the bf16 rounding of silu", "[cli][conformance]") {
  require_failed(check_mistake("unrounded"), "silu_mul (+ backward) N=33 F=4864 bfloat16",
                 {"silu_mul out: first bad index", "round(round(silu(gate)) * up)", "outputs differ", "tolerance 0"});
}

TEST_CASE("verlpp-plugin-check fails device properties without torch_device_type", "[cli][conformance]") {
  require_failed(check_mistake("notorchtype"), "device properties: torch device type, DLPack type and memory",
                 {"torch_device_type is '', expected 'cpu'"});
}

TEST_CASE("verlpp-plugin-check fails device properties with DLPack type 0 and no memory", "[cli][conformance]") {
  require_failed(check_mistake("zeroprops"), "device properties: torch device type, DLPack type and memory",
                 {"dl_device_type is 0, expected a DLDeviceType"});
}

TEST_CASE("verlpp-plugin-check fails an rms_norm that ignores row strides", "[cli][conformance]") {
  require_failed(check_mistake("densenorm"), "rms_norm with row-strided x is refused or honoured",
                 {"row stride 40", "first bad index", "tolerance"});
}

TEST_CASE("verlpp-plugin-check fails an rms_norm without argument checks", "[cli][conformance]") {
  require_failed(check_mistake("uncheckednorm"), "rms_norm rejects bad input",
                 {"rms_norm(weight [9] for D = 8) succeeded; expected INVALID_ARGUMENT"});
}

TEST_CASE("verlpp-plugin-check fails a silu_mul offered without its backward", "[cli][conformance]") {
  require_failed(check_mistake("silualone"), "kernels that come in pairs are offered together",
                 {"silu_mul is offered without silu_mul_backward"});
}
