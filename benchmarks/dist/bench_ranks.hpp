// The distributed benches' two halves (verlpp-bench-dist, verlpp-bench-reshard): started plainly
// a bench is the launcher, which starts N ranks of itself (launch_local, as `verlpp train
// --nproc` does) with --result-file appended and reads back the JSON rank 0 wrote there; a rank
// (RANK set) joins the process group over the plugin's communicator.
#pragma once

#include <verlpp/controller/launcher.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/hw/process_group.hpp>
#include <verlpp/hw/world.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace verlpp::bench {

// Starts `nproc` ranks of this program with `argv` (argv[0] ignored) plus "--result-file F", and
// returns the JSON rank 0 wrote to F; an Error naming `name` when a rank fails.
inline nlohmann::json launch_bench_ranks(const std::string& name, std::vector<std::string> argv, int nproc) {
  controller::LaunchOptions l;
  l.nproc = nproc;
  l.argv = std::move(argv);
  l.argv[0] = "/proc/self/exe";
  l.grace = std::chrono::milliseconds(10000);
  const std::string result_file = fmt::format("/tmp/{}-{}.json", name, ::getpid());
  l.argv.insert(l.argv.end(), {"--result-file", result_file});
  const controller::LaunchResult r = controller::launch_local(l);
  if (!r.ok()) throw Error(name, r.summary());
  std::ifstream in(result_file);
  if (!in) throw Error(name, fmt::format("rank 0 wrote no results to {}", result_file));
  nlohmann::json results = nlohmann::json::parse(in);
  std::remove(result_file.c_str());
  return results;
}

// This rank's process group (RANK, WORLD_SIZE, ... from the launcher) over `plugin`'s
// communicator: cpu_ref's ranks share its one host device, an accelerator's take LOCAL_RANK's.
inline std::unique_ptr<hw::ProcessGroup> join_bench_group(const std::string& plugin,
                                                          std::chrono::milliseconds timeout) {
  const hw::WorldInfo world = hw::world_from_environment();
  const hw::Plugin& p = hw::plugin_named(plugin);
  const int32_t device = p.torch_device_type() == "cpu" ? 0 : world.local_rank;
  hw::ProcessGroupOptions options;
  options.timeout = timeout;
  return hw::ProcessGroup::create(world, hw::Device(p, device), options);
}

}  // namespace verlpp::bench
