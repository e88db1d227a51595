// The torch device a run computes on, chosen once from the loaded plugins and the user's request
// (trainer.device, a command's --device). The run lands on the chosen plugin's torch device type
// whatever it is (cpu, cuda, privateuseone), or the choice fails saying why this LibTorch cannot
// place tensors there: it never puts the CPU in the place of a device it cannot use.
#pragma once

#include <verlpp/hw/plugin.hpp>

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

namespace verlpp::controller {

// A loaded plugin as the choice sees it.
struct DeviceCandidate {
  std::string plugin;                 // its name
  std::string torch_device_type;      // what it says its devices are: "cpu", "cuda", "privateuseone", ...
  int32_t score = 0;                  // its probe score (higher = better suited to this machine)
  std::string torch_backend_library;  // its LibTorch extension for privateuseone ("" = none)
};

// The candidates of `loaded`, in their order.
std::vector<DeviceCandidate> device_candidates(const std::vector<hw::Plugin>& loaded);

struct DeviceChoice {
  c10::Device device = c10::Device(c10::kCPU);
  std::string plugin;  // the plugin whose devices these are ("" = none loaded for this type)
};

// The torch device types a request may name, besides "auto".
const std::vector<std::string>& device_type_names();

// `wanted`: "auto" picks the best-scoring plugin whose devices are not the host's, else the
// best cpu plugin, else the CPU without a plugin; a type ("cpu", "cuda", "privateuseone",
// optionally ":index") picks the best plugin of that type, or none. Accelerator devices get
// index `local_rank` (one process per device) unless `wanted` gives one. Error naming `where`
// (the setting, e.g. "trainer.device") for an unknown request, or when this LibTorch cannot
// place tensors on the chosen type (hw::prepare_torch_backend, which first loads the plugin's own
// LibTorch backend where it names one), naming the plugin.
DeviceChoice choose_device(const std::string& wanted, const std::vector<DeviceCandidate>& candidates,
                           int32_t local_rank, const std::string& where);

// choose_device over the process's loaded plugins (hw::plugins()). For a privateuseone device it
// also records the plugin's DLPack device type for kernel calls and checks that LibTorch can
// compute there (hw::torch_device_smoke_problem), else an Error naming the plugin and the device.
DeviceChoice choose_device(const std::string& wanted, int32_t local_rank, const std::string& where);

}  // namespace verlpp::controller
