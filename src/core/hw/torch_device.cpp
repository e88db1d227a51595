// torch_placement_problem: asks LibTorch which device types it was built with (or, for
// privateuseone, has had registered);
// torch_current_stream_handle: LibTorch's current stream, where this LibTorch can name it;
// prepare_torch_backend / torch_device_smoke_problem: a plugin's own LibTorch backend (ABI 1.6).
#include <verlpp/hw/torch_device.hpp>

#include <verlpp/core/error_text.hpp>
#include <verlpp/hw/device.hpp>
#include <verlpp/hw/plugin.hpp>

#include <ATen/Context.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <torch/version.h>

#include <boost/dll/shared_library.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

// c10::Stream::native_handle (through the device guard's getStreamNativeHandle) is absent from
// LibTorch 1.13 and present in the 2.x releases the GPU hosts use; 2.4 is a conservative floor.
// A build may set VERLPP_TORCH_HAS_STREAM_NATIVE_HANDLE=0/1 to override it.
#ifndef VERLPP_TORCH_HAS_STREAM_NATIVE_HANDLE
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define VERLPP_TORCH_HAS_STREAM_NATIVE_HANDLE 1
#else
#define VERLPP_TORCH_HAS_STREAM_NATIVE_HANDLE 0
#endif
#endif

namespace verlpp::hw {

std::string torch_placement_problem(const std::string& type) {
  if (type == "cpu") return {};
  if (type == "cuda") {
    if (!at::hasCUDA() && !at::hasHIP())
      return "this LibTorch build has no CUDA (it was built for CPU only); use a CUDA build of LibTorch";
    return {};
  }
  if (type == "privateuseone") {
    // An out-of-tree backend is registered at run time by the vendor's torch extension (a
    // library the program links or loads), whose device guard every placement goes through.
    if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::PrivateUse1))
      return "this LibTorch has no PrivateUse1 backend registered (the vendor's torch extension registers it when "
             "the program loads it)";
    return {};
  }
  return "unknown torch device type '" + type + "' (expected cpu, cuda or privateuseone)";
}

namespace {

// Loads a vendor's LibTorch extension once per path, for the life of the process (its static
// initialisers have registered kernels that must never be unloaded). RTLD_GLOBAL: the extension
// may export symbols other vendor libraries resolve against. "" on success, else the loader's
// message (remembered, so a second ask gets the same answer).
std::string load_extension_once(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::string> outcome;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = outcome.find(path);
  if (found != outcome.end()) return found->second;
  std::string problem;
  try {
    auto* library =
        new boost::dll::shared_library(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_global);
    (void)library;  // kept loaded on purpose
  } catch (const std::exception& e) {
    problem = e.what();
  }
  outcome.emplace(path, problem);
  return problem;
}

std::atomic<int32_t> g_privateuse1_dl_type{0};

}  // namespace

std::string prepare_torch_backend(const std::string& plugin, const std::string& type, const std::string& library) {
  if (type != "privateuseone" || c10::impl::hasDeviceGuardImpl(c10::DeviceType::PrivateUse1))
    return torch_placement_problem(type);
  if (library.empty())
    return torch_placement_problem(type) + "; plugin " + plugin +
           " names no torch backend library (ABI 1.6's torch_backend_library) for the host to load";
  const std::string load_problem = load_extension_once(library);
  if (!load_problem.empty())
    return "plugin " + plugin + "'s torch backend library " + library + " could not be loaded: " + load_problem;
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::PrivateUse1))
    return "plugin " + plugin + "'s torch backend library " + library +
           " loaded, but it registered no PrivateUse1 backend (no device guard for privateuseone)";
  return {};
}

std::string torch_device_smoke_problem(const c10::Device& device) {
  if (device.is_cpu()) return {};
  try {
    const at::Tensor host = at::arange(16, at::TensorOptions().dtype(at::kFloat));
    const at::Tensor there = host.to(device);
    if (there.device() != device)
      return "LibTorch put a tensor asked for on " + device.str() + " on " + there.device().str();
    const at::Tensor back = there.mul(2).to(c10::kCPU);
    if (!at::equal(back, host.mul(2)))
      return "a tensor copied to " + device.str() + ", doubled there and copied back came back with other values";
    return {};
  } catch (const std::exception& e) {
    return "LibTorch cannot compute on " + device.str() + ": " + error_text(e);
  }
}

std::string ready_torch_device(const Plugin& plugin, int32_t index, c10::Device* device) {
  const std::string& type = plugin.torch_device_type();
  const std::string problem = prepare_torch_backend(plugin.name(), type, plugin.torch_backend_library());
  if (!problem.empty()) return problem;
  if (type == "cpu") {
    *device = c10::Device(c10::kCPU);
    return {};
  }
  if (index < 0 || index >= device_count(plugin))
    return "plugin " + plugin.name() + " has no device " + std::to_string(index);
  const c10::Device there(type == "cuda" ? c10::DeviceType::CUDA : c10::DeviceType::PrivateUse1,
                          c10::DeviceIndex(index));
  if (there.type() == c10::DeviceType::PrivateUse1)
    set_privateuse1_dl_device_type(Device(plugin, index).properties().dl_device_type);
  const std::string smoke = torch_device_smoke_problem(there);
  if (smoke.empty()) *device = there;
  return smoke;
}

void set_privateuse1_dl_device_type(int32_t dl_device_type) { g_privateuse1_dl_type.store(dl_device_type); }
int32_t privateuse1_dl_device_type() { return g_privateuse1_dl_type.load(); }

std::string torch_version() { return TORCH_VERSION; }

bool torch_current_stream_handle(const c10::Device& device, void** out_handle) {
  *out_handle = nullptr;
  if (device.is_cpu()) return false;
#if VERLPP_TORCH_HAS_STREAM_NATIVE_HANDLE
  try {
    const c10::Stream stream = c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
    *out_handle = stream.native_handle();
    return true;
  } catch (const std::exception&) {  // no guard for this device type, or no native handle
    *out_handle = nullptr;
    return false;
  }
#else
  return false;
#endif
}

}  // namespace verlpp::hw
