// `verlpp plugins`: which plugins loaded (name, variant, ABI, devices, torch device type,
// capabilities, path) and which were rejected, with the reason. A plugin named explicitly in
// VERL_HARDWARE_PLUGIN that fails to load is an error (exit 1), as everywhere else.
#include "commands.hpp"
#include "text_table.hpp"

#include <verlpp/hw/device.hpp>
#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/hw/torch_device.hpp>

#include <c10/core/Device.h>
#include <fmt/format.h>
#include <verlpp/core/strings.hpp>

#include <iostream>

namespace verlpp::apps {
namespace {

std::string gib(uint64_t bytes) { return fmt::format("{:.1f} GiB", double(bytes) / double(1ull << 30)); }

void run_plugins() {
  const hw::DiscoveryResult& result = hw::plugins();
  if (result.disabled) {
    std::cout << "VERL_HARDWARE_PLUGIN=none: plugins are disabled.\n";
    return;
  }
  std::cout << fmt::format("verlpp {} (plugin ABI {}.{}, LibTorch {})\n\n", VERLPP_VERSION_STRING,
                           VERLPP_PLUGIN_ABI_MAJOR, VERLPP_PLUGIN_ABI_MINOR, hw::torch_version());
  TextTable loaded(
      {"plugin", "variant", "version", "ABI", "devices", "torch", "memory", "capabilities", "kernels", "path"});
  std::vector<std::string> notes;
  for (const auto& p : result.loaded) {
    int32_t n = hw::device_count(p);
    std::string memory = "-", caps = "-";
    if (n > 0) {
      hw::DeviceProperties props = hw::Device(p, 0).properties();
      memory = gib(props.total_memory_bytes);
      caps = hw::capability_names(props.capabilities);
    }
    auto kernels = hw::Kernels(p).available();
    loaded.add_row({p.name(), p.variant().empty() ? "-" : p.variant(), p.version(), fmt::format("1.{}", p.abi_minor()),
                    std::to_string(n), p.torch_device_type(), memory, caps, kernels.empty() ? "-" : join(kernels, ","),
                    p.path()});
    if (!kernels.empty())
      notes.push_back(
          hw::run_uses_kernels(p)
              ? fmt::format("{}: a run on its devices calls all {} of its kernels", p.display_name(), kernels.size())
              : fmt::format("{}: its kernels are a reference implementation (for verlpp-plugin-check); a "
                            "run on its devices uses LibTorch's path instead",
                            p.display_name()));
    // A privateuseone plugin's own LibTorch backend (ABI 1.6) is loaded and tried here, as a run
    // would, so the listing says whether a run on its devices can start.
    const std::string problem = hw::prepare_torch_backend(p.name(), p.torch_device_type(), p.torch_backend_library());
    if (problem.empty() && p.torch_device_type() == "privateuseone" && n > 0) {
      c10::Device device(c10::kCPU);
      const std::string smoke = hw::ready_torch_device(p, 0, &device);  // the backend is ready: the smoke test
      const std::string through = p.torch_backend_library().empty()
                                      ? std::string("the PrivateUse1 backend this process has")
                                      : "its torch backend " + p.torch_backend_library();
      notes.push_back(fmt::format("{}: {}", p.display_name(),
                                  smoke.empty() ? "LibTorch computes on privateuseone:0 through " + through
                                                : through + " is registered, but " + smoke));
    }
    if (!problem.empty()) notes.push_back(fmt::format("{}: {}", p.display_name(), problem));
  }
  std::cout << "Loaded plugins:\n";
  if (loaded.empty())
    std::cout << "  (none)\n";
  else
    loaded.print(std::cout);
  for (const auto& note : notes) std::cout << "note: " << note << "\n";
  if (!result.rejected.empty()) {
    std::cout << "\nRejected:\n";
    TextTable rejected({"file", "plugin", "reason"});
    for (const auto& r : result.rejected) rejected.add_row({r.path, r.name.empty() ? "?" : r.name, r.reason});
    rejected.print(std::cout);
  }
  std::cout << "\nSearched: " << join(result.searched_dirs, ":") << "\n";
}

}  // namespace

void register_plugins_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plugins", "List loaded and rejected hardware plugins");
  cmd->callback(run_plugins);
}

}  // namespace verlpp::apps
