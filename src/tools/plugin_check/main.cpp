// verlpp-plugin-check <name-or-path>: the conformance suite a plugin must pass. Loads the plugin
// the way the host does, runs every case (ABI promises, error paths, memory, streams, tensor
// copies, every collective with 2 and 4 processes, every kernel against reference math) and
// prints a pass/fail table. The kernel cases come from the ABI's kernel list (one group of cases
// per kernel; the JSON output names each case's kernel). Exit 0 only when nothing failed, 1 when a
// case failed (a plugin that cannot be loaded or whose probe crashes fails the first case), 2 for
// a usage error (no such file or plugin name); "n/a" marks optional capabilities the plugin does
// not offer (listed, never counted as passes).
#include "check_context.hpp"

#include "../../apps/checked_stdout.hpp"
#include "../../core/util/files.hpp"
#include "../../core/util/output_file.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/hw/plugin_registry.hpp>

#include <CLI/CLI.hpp>
#include <boost/dll/runtime_symbol_info.hpp>
#include <verlpp/core/strings.hpp>
#include <nlohmann/json.hpp>

#include <iostream>
#include <optional>
#include <stdexcept>

#include <unistd.h>

using namespace verlpp;

namespace {

hw::Plugin load(const std::string& arg) {
  bool is_path = arg.find('/') != std::string::npos || (arg.size() > 3 && arg.compare(arg.size() - 3, 3, ".so") == 0);
  // As the host loads plugins: probed in a child, with VERLPP_PLUGIN_PROBE_TIMEOUT_MS.
  hw::DiscoveryOptions options = hw::DiscoveryOptions::from_environment();
  if (is_path) return hw::load_plugin_file(arg, options);
  options.requested = arg;
  hw::DiscoveryResult result = hw::discover_plugins(options);
  if (result.loaded.empty()) throw std::out_of_range(fmt::format("{}: no plugin of that name was found", arg));
  return result.loaded.front();
}

const char* label(conformance::Outcome o) {
  switch (o) {
    case conformance::Outcome::pass:
      return "pass";
    case conformance::Outcome::fail:
      return "FAIL";
    default:
      return "n/a";
  }
}

// Prints the pass/fail table and the totals, writes the JSON when asked (a failed write is an
// error); returns the exit status (0 only when nothing failed).
int report(const std::vector<conformance::CaseResult>& results, const std::string& name, const std::string& path,
           const std::string& json_path) {
  size_t passed = 0, failed = 0, absent = 0, width = 0;
  for (const auto& r : results) width = std::max(width, r.group.size() + r.name.size() + 3);
  for (const auto& r : results) {
    std::string title = r.group + " / " + r.name;
    std::cout << fmt::format("{:<{}}  {:<4}  {}\n", title, width, label(r.outcome), r.detail);
    passed += r.outcome == conformance::Outcome::pass;
    failed += r.outcome == conformance::Outcome::fail;
    absent += r.outcome == conformance::Outcome::not_offered;
  }
  std::cout << fmt::format("\n{}: {} passed, {} failed, {} not offered\n", name, passed, failed, absent);
  if (!json_path.empty()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& r : results)
      j.push_back({{"group", r.group},
                   {"case", r.name},
                   {"kernel", r.kernel},
                   {"outcome", label(r.outcome)},
                   {"detail", r.detail}});
    files::write_text(json_path, nlohmann::json{{"plugin", name}, {"path", path}, {"results", j}}.dump(2));
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"verlpp-plugin-check: the verlpp plugin conformance suite"};
  std::string plugin_arg, json_path, ranks = "2,4";
  int64_t timeout_ms = 60000;
  bool worker = false;
  int rank = 0, world = 1, port = 0;
  std::string store_host = "127.0.0.1";
  app.add_option("plugin", plugin_arg, "plugin short name (e.g. cpu_ref) or path to its .so")->required();
  app.add_option("--json", json_path, "also write the results as JSON to this file");
  app.add_option("--ranks", ranks, "process counts for the communicator cases (comma list; empty to skip)");
  app.add_option("--timeout-ms", timeout_ms, "communicator timeout per operation");
  app.add_flag("--comm-worker", worker, "internal: run as a communicator worker")->group("");
  bool missing_peer = false;
  app.add_flag("--missing-peer-case", missing_peer, "internal: the worker whose peer never starts")->group("");
  app.add_option("--rank", rank)->group("");
  app.add_option("--world", world)->group("");
  app.add_option("--store-port", port)->group("");
  app.add_option("--store-host", store_host)->group("");
  CLI11_PARSE(app, argc, argv);

  // The table (and a worker's JSON lines) through the checked standard output: a refused write
  // is an error, never a silent pass.
  apps::CheckedStdout standard_output;
  auto check = [&]() -> int {
    if (!json_path.empty()) files::require_output(json_path, "--json");  // before the suite runs
    std::optional<hw::Plugin> loaded;
    try {
      loaded = load(plugin_arg);
    } catch (const std::exception& e) {
      // No such file, or no plugin of that name: a usage error, not a plugin that failed.
      const bool missing = plugin_arg.find('/') != std::string::npos
                               ? ::access(plugin_arg.c_str(), F_OK) != 0
                               : dynamic_cast<const std::out_of_range*>(&e) != nullptr;
      if (worker || missing) throw;
      // A plugin that cannot be loaded, or whose probe crashes, aborts or hangs (the host probes
      // it in a child process), fails the suite's first case; nothing else can run.
      std::cout << fmt::format("verlpp-plugin-check: {}\n\n", plugin_arg);
      conformance::CaseResult failed{"abi", "load and probe", conformance::Outcome::fail, e.what(), ""};
      return report({failed}, plugin_arg, plugin_arg, json_path);
    }
    hw::Plugin& plugin = *loaded;
    if (worker && missing_peer) return conformance::missing_peer_worker_main(plugin, store_host, port);
    if (worker) return conformance::comm_worker_main(plugin, rank, world, store_host, port, timeout_ms);

    std::cout << fmt::format("verlpp-plugin-check: {} {} ({}), ABI 1.{}, table {} bytes\n\n", plugin.display_name(),
                             plugin.version(), plugin.path(), plugin.abi_minor(), plugin.plugin_table_size());
    conformance::CheckContext ctx(plugin);
    conformance::run_abi_cases(ctx);
    conformance::run_memory_cases(ctx);
    conformance::run_stream_cases(ctx);
    conformance::run_kernel_table_cases(ctx);
#define VERLPP_CONFORMANCE_RUN_KERNEL(name, minor) ctx.run_kernel(#name, &conformance::run_##name##_cases);
    VERLPP_KERNEL_LIST(VERLPP_CONFORMANCE_RUN_KERNEL)
#undef VERLPP_CONFORMANCE_RUN_KERNEL
    std::vector<int> worlds;
    for (const std::string& w : split(ranks, ',')) worlds.push_back(std::stoi(w));
    std::string self = boost::dll::program_location().string();
    conformance::run_comm_cases(ctx, self, plugin.path(), worlds, timeout_ms);
    return report(ctx.results(), plugin.display_name(), plugin.path(), json_path);
  };
  try {
    const int status = check();
    standard_output.finish();
    return status;
  } catch (const std::exception& e) {
    try {
      standard_output.finish();  // what was printed before the error
    } catch (const std::exception&) {
      // the first error is the one to report
    }
    std::cerr << "verlpp-plugin-check: error: " << e.what() << "\n";
    return 2;
  }
}
