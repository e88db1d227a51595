// cuda: the probe through the driver API, opened with dlopen so that a machine without the
// NVIDIA driver gets a reason ("libcuda.so.1 cannot be loaded: ...") instead of a loader error,
// and so that probing creates no CUDA context (cuInit only initialises the driver).
#include "driver_probe.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>  // CUDART_VERSION: the runtime this plugin was built with
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#ifndef VERLPP_CUDA_ARCHITECTURES_STRING
#define VERLPP_CUDA_ARCHITECTURES_STRING "80,90"
#endif

namespace verlpp::cuda {
namespace {

using InitFn = CUresult (*)(unsigned int);
using DriverGetVersionFn = CUresult (*)(int*);
using DeviceGetCountFn = CUresult (*)(int*);
using DeviceGetFn = CUresult (*)(CUdevice*, int);
using DeviceGetAttributeFn = CUresult (*)(int*, CUdevice_attribute, CUdevice);
using GetErrorNameFn = CUresult (*)(CUresult, const char**);
using PrimaryCtxGetStateFn = CUresult (*)(CUdevice, unsigned int*, int*);

// Driver entry points kept for use after the probe (set by read_driver_info).
DeviceGetFn g_device_get = nullptr;
PrimaryCtxGetStateFn g_primary_ctx_state = nullptr;

std::string version_text(int32_t v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

DriverInfo read_driver_info() {
  DriverInfo info;
  // The handle is kept: unloading the driver after cuInit is not supported by it, and the CUDA
  // runtime opens the same library again when the plugin is used.
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    info.problem =
        std::string("no NVIDIA driver: libcuda.so.1 cannot be loaded (") + (why ? why : "unknown reason") + ")";
    return info;
  }
  auto sym = [&](const char* name) { return dlsym(lib, name); };
  auto init = reinterpret_cast<InitFn>(sym("cuInit"));
  auto get_version = reinterpret_cast<DriverGetVersionFn>(sym("cuDriverGetVersion"));
  auto get_count = reinterpret_cast<DeviceGetCountFn>(sym("cuDeviceGetCount"));
  auto get_device = reinterpret_cast<DeviceGetFn>(sym("cuDeviceGet"));
  auto get_attribute = reinterpret_cast<DeviceGetAttributeFn>(sym("cuDeviceGetAttribute"));
  auto error_name = reinterpret_cast<GetErrorNameFn>(sym("cuGetErrorName"));
  g_device_get = get_device;
  g_primary_ctx_state = reinterpret_cast<PrimaryCtxGetStateFn>(sym("cuDevicePrimaryCtxGetState"));
  if (!init || !get_version || !get_count || !get_device || !get_attribute) {
    info.problem = "libcuda.so.1 lacks the driver API entry points (cuInit, cuDeviceGetCount, ...)";
    return info;
  }
  auto name_of = [&](CUresult r) {
    const char* text = nullptr;
    if (error_name == nullptr || error_name(r, &text) != CUDA_SUCCESS || text == nullptr) return std::to_string(int(r));
    return std::string(text);
  };
  CUresult r = init(0);
  if (r != CUDA_SUCCESS) {
    info.problem = "the NVIDIA driver failed to initialise: cuInit returned " + name_of(r);
    if (r == CUDA_ERROR_NO_DEVICE)
      info.problem = "the NVIDIA driver reports no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE)";
    if (r == CUDA_ERROR_STUB_LIBRARY) info.problem = "libcuda.so.1 is the toolkit's stub library, not a real driver";
    return info;
  }
  int version = 0;
  if (get_version(&version) == CUDA_SUCCESS) info.driver_version = version;
  int count = 0;
  r = get_count(&count);
  if (r != CUDA_SUCCESS) {
    info.problem = "cuDeviceGetCount returned " + name_of(r);
    return info;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice device = 0;
    int major = 0, minor = 0;
    if (get_device(&device, i) != CUDA_SUCCESS ||
        get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) != CUDA_SUCCESS ||
        get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device) != CUDA_SUCCESS) {
      info.problem = "cannot read the compute capability of device " + std::to_string(i);
      return info;
    }
    info.compute_capabilities.push_back(major * 10 + minor);
  }
  info.loaded = true;
  return info;
}

}  // namespace

const DriverInfo& driver_info() {
  static const DriverInfo info = read_driver_info();
  return info;
}

bool primary_context_active(int32_t ordinal) {
  if (!driver_info().loaded || g_device_get == nullptr || g_primary_ctx_state == nullptr) return true;
  CUdevice device = 0;
  unsigned int flags = 0;
  int active = 0;
  if (g_device_get(&device, ordinal) != CUDA_SUCCESS || g_primary_ctx_state(device, &flags, &active) != CUDA_SUCCESS)
    return true;
  return active != 0;
}

std::vector<int32_t> parse_architectures(const std::string& list) {
  std::vector<int32_t> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    int32_t value = std::atoi(item.c_str());  // "90a" -> 90, "90-real" -> 90
    if (value > 0) out.push_back(value);
  }
  return out;
}

int32_t architecture_fit(int32_t cc, const std::vector<int32_t>& built) {
  int32_t best = 0;
  for (int32_t arch : built) {
    if (arch == cc)
      best = std::max(best, 3);
    else if (arch / 10 == cc / 10 && arch < cc)
      best = std::max(best, 2);
    else if (arch < cc)
      best = std::max(best, 1);
  }
  return best;
}

int32_t probe_score(std::string& reason) {
  const DriverInfo& info = driver_info();
  if (!info.loaded) {
    reason = info.problem;
    return 0;
  }
  if (info.compute_capabilities.empty()) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    reason = "the NVIDIA driver " + version_text(info.driver_version) + " reports no CUDA device" +
             (visible ? std::string(" (CUDA_VISIBLE_DEVICES='") + visible + "')" : std::string());
    return 0;
  }
  // A runtime of a newer major than the driver refuses to start (cudaErrorInsufficientDriver).
  if (info.driver_version / 1000 < CUDART_VERSION / 1000) {
    reason = "the NVIDIA driver supports CUDA " + version_text(info.driver_version) +
             ", this plugin was built with CUDA " + version_text(CUDART_VERSION) +
             "; update the driver or rebuild the plugin with an older toolkit";
    return 0;
  }
  std::vector<int32_t> built = parse_architectures(VERLPP_CUDA_ARCHITECTURES_STRING);
  // Every device must be able to run the kernels; the least suited one sets the score.
  int32_t worst = 3;
  for (size_t i = 0; i < info.compute_capabilities.size(); ++i) {
    int32_t cc = info.compute_capabilities[i];
    int32_t fit = architecture_fit(cc, built);
    if (fit == 0) {
      reason = "device " + std::to_string(i) + " has compute capability " + std::to_string(cc / 10) + "." +
               std::to_string(cc % 10) + ", older than every architecture this plugin was built for (" +
               VERLPP_CUDA_ARCHITECTURES_STRING + "); rebuild with -DVERLPP_CUDA_ARCHITECTURES=" + std::to_string(cc);
      return 0;
    }
    worst = std::min(worst, fit);
  }
  // 10..30: always above cpu_ref's 1, so a usable GPU is preferred to the CPU reference.
  return 10 * worst;
}

}  // namespace verlpp::cuda
