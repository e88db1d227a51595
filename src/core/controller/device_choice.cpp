// choose_device: the request, the candidates' torch device types and LibTorch's placement check
// (hw::torch_placement_problem) decide the device; a plugin whose devices LibTorch cannot use
// is an error naming the plugin, not a reason to run on the host instead.
#include <verlpp/controller/device_choice.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>
#include <verlpp/hw/device.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/hw/torch_device.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace verlpp::controller {
namespace {

c10::DeviceType torch_type_of(const std::string& name) {
  if (name == "cuda") return c10::DeviceType::CUDA;
  if (name == "privateuseone") return c10::DeviceType::PrivateUse1;
  return c10::DeviceType::CPU;
}

// The best-scoring candidate accepted by `fits` (the first on ties), or null.
template <class Fits>
const DeviceCandidate* best_of(const std::vector<DeviceCandidate>& candidates, Fits fits) {
  const DeviceCandidate* best = nullptr;
  for (const auto& c : candidates)
    if (fits(c) && (best == nullptr || c.score > best->score)) best = &c;
  return best;
}

}  // namespace

std::vector<DeviceCandidate> device_candidates(const std::vector<hw::Plugin>& loaded) {
  std::vector<DeviceCandidate> out;
  for (const auto& p : loaded) out.push_back({p.name(), p.torch_device_type(), p.score(), p.torch_backend_library()});
  return out;
}

const std::vector<std::string>& device_type_names() {
  static const std::vector<std::string> names = {"cpu", "cuda", "privateuseone"};
  return names;
}

DeviceChoice choose_device(const std::string& wanted, const std::vector<DeviceCandidate>& candidates,
                           int32_t local_rank, const std::string& where) {
  // "type" or "type:index".
  const size_t colon = wanted.find(':');
  const std::string type = wanted.substr(0, colon);
  int64_t index = local_rank;
  if (colon != std::string::npos) {
    const std::string digits = wanted.substr(colon + 1);
    char* end = nullptr;
    errno = 0;
    index = std::strtoll(digits.c_str(), &end, 10);
    if (digits.empty() || *end != '\0' || errno != 0 || index < 0 || index > 127 || type == "auto")
      throw Error(where,
                  fmt::format("'{}': expected a device type, optionally with a device index (e.g. cuda:1)", wanted));
  }
  const auto& types = device_type_names();
  if (type != "auto" && std::find(types.begin(), types.end(), type) == types.end())
    throw Error(where, fmt::format("'{}' is not one of auto, {}", wanted, join(types, ", ")));

  const DeviceCandidate* chosen = nullptr;
  if (type == "auto") {
    chosen = best_of(candidates, [](const DeviceCandidate& c) { return c.torch_device_type != "cpu"; });
    if (chosen == nullptr)
      chosen = best_of(candidates, [](const DeviceCandidate& c) { return c.torch_device_type == "cpu"; });
  } else {
    chosen = best_of(candidates, [&](const DeviceCandidate& c) { return c.torch_device_type == type; });
  }
  DeviceChoice out;
  if (chosen != nullptr) out.plugin = chosen->plugin;
  const std::string device_type = chosen != nullptr ? chosen->torch_device_type : type == "auto" ? "cpu" : type;
  // A plugin may bring its own LibTorch backend (ABI 1.6); it is loaded here, on first use.
  const std::string problem =
      chosen != nullptr ? hw::prepare_torch_backend(chosen->plugin, device_type, chosen->torch_backend_library)
                        : hw::torch_placement_problem(device_type);
  if (!problem.empty()) {
    if (chosen == nullptr) throw Error(where, fmt::format("{} was asked for, but {}", device_type, problem));
    throw Error(where,
                fmt::format("{} chose plugin {}, whose devices are {}, but {}; {}=cpu runs on the host without it",
                            type == "auto" ? "auto" : "'" + wanted + "'", chosen->plugin, device_type, problem, where));
  }
  if (device_type == "cpu") return out;  // one host device, whatever the rank
  out.device = c10::Device(torch_type_of(device_type), c10::DeviceIndex(index));
  return out;
}

DeviceChoice choose_device(const std::string& wanted, int32_t local_rank, const std::string& where) {
  const std::vector<hw::Plugin>& loaded = hw::plugins().loaded;
  DeviceChoice out = choose_device(wanted, device_candidates(loaded), local_rank, where);
  if (out.device.type() != c10::DeviceType::PrivateUse1) return out;
  // An out-of-tree backend: its tensors carry the plugin's DLPack device type in kernel calls,
  // and LibTorch must really compute on it before any work is started there.
  for (const hw::Plugin& p : loaded) {
    if (p.name() != out.plugin) continue;
    c10::Device ready(c10::kCPU);
    const std::string problem = hw::ready_torch_device(p, int32_t(out.device.index()), &ready);
    if (!problem.empty())
      throw Error(where, fmt::format("plugin {}'s device {} cannot be used: {}; {}=cpu runs on the host without it",
                                     out.plugin, out.device.str(), problem, where));
  }
  return out;
}

}  // namespace verlpp::controller
