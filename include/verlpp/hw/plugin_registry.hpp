// Plugin discovery and loading (DESIGN.md §2): VERL_HARDWARE_PLUGIN, else a scan of
// VERLPP_PLUGIN_PATH, the install's plugin folder and the folder beside the executable.
// Loading runs in a fixed order (open, probe, entry symbol, version and size checks, best
// variant per name, init) and every rejection names the file and the reason.
#pragma once

#include <verlpp/hw/plugin.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace verlpp::hw {

// Where and what to load. from_environment() reads the variables; tests set fields directly.
struct DiscoveryOptions {
  // VERL_HARDWARE_PLUGIN: short name | path | comma list | "none"; empty = scan.
  std::string requested;
  // Folders scanned in this order (VERLPP_PLUGIN_PATH entries, install folder, exe folder).
  std::vector<std::string> search_dirs;
  // Open and probe each file in a child process first, so that a plugin that crashes, aborts
  // or hangs there is rejected with that reason instead of ending this process.
  bool isolate_probes = true;
  // How long a child may take to load and probe one file (VERLPP_PLUGIN_PROBE_TIMEOUT_MS).
  int64_t probe_timeout_ms = 10000;

  // Reads VERL_HARDWARE_PLUGIN, VERLPP_PLUGIN_PATH and VERLPP_PLUGIN_PROBE_TIMEOUT_MS and adds
  // the default folders.
  static DiscoveryOptions from_environment();
};

// A plugin file that was found but not loaded, and why.
struct RejectedPlugin {
  std::string path;
  std::string name;  // empty when the file could not be identified
  std::string reason;
};

// The outcome of one discovery.
struct DiscoveryResult {
  std::vector<Plugin> loaded;
  std::vector<RejectedPlugin> rejected;
  std::vector<std::string> searched_dirs;
  bool disabled = false;  // VERL_HARDWARE_PLUGIN=none
};

// Finds and loads plugins. A plugin named explicitly in `requested` that cannot be loaded is
// an Error (naming the path and the loader's reason); during a scan, failures are only listed.
DiscoveryResult discover_plugins(const DiscoveryOptions& options);

// Loads one plugin file by path, or throws Error naming the path and the reason (a probe that
// crashes or hangs in its child process included).
Plugin load_plugin_file(const std::string& path, const DiscoveryOptions& options = DiscoveryOptions{});

// The process-wide plugin set, discovered from the environment on first use.
const DiscoveryResult& plugins();

// The loaded plugin called `name` from plugins(), or an Error listing the loaded ones.
const Plugin& plugin_named(const std::string& name);

// The folder plugins are installed to (compiled in), and the running executable's folder.
std::string install_plugin_dir();
std::string executable_dir();

}  // namespace verlpp::hw
