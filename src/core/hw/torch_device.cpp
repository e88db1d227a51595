// torch_placement_problem: asks LibTorch which device types it was built with (or, for
// privateuseone, has had registered);
// torch_current_stream_handle: LibTorch's current stream, where this LibTorch can name it.
#include <verlpp/hw/torch_device.hpp>

#include <ATen/Context.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>

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
