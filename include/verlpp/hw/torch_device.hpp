// Whether this process's LibTorch can place tensors on a plugin's torch device type, and
// LibTorch's current stream as a native handle. Kept apart so that the rest of the hardware
// layer needs no torch headers; the LibTorch version differences of the layer live here.
#pragma once

#include <cstdint>
#include <string>

namespace c10 {
struct Device;
}

namespace verlpp::hw {

class Plugin;

// Empty when LibTorch can use `torch_device_type` ("cpu", "cuda", "privateuseone": a backend
// registered in this process), else a plain sentence saying why not (e.g. "this LibTorch build
// has no CUDA").
std::string torch_placement_problem(const std::string& torch_device_type);

// Makes LibTorch able to place tensors on the devices of plugin `plugin` (its name, for messages),
// whose torch device type is `torch_device_type` and whose LibTorch extension (ABI 1.6's
// torch_backend_library, "" = none) is `backend_library`: for privateuseone without a registered
// PrivateUse1 backend it loads that library into the process (once, symbols global). Returns ""
// when the type is usable afterwards (torch_placement_problem), else a sentence saying why not:
// the loader's message, a library that registered no backend, or no library named.
std::string prepare_torch_backend(const std::string& plugin, const std::string& torch_device_type,
                                  const std::string& backend_library);

// "" when LibTorch can create a small tensor on `device`, write it and copy it back to the host
// with the values intact; else what failed, in one line (LibTorch's message without backtrace).
// Run before a command's first real work on a device whose backend LibTorch does not ship.
std::string torch_device_smoke_problem(const c10::Device& device);

// Plugin `plugin`'s device `index` as a LibTorch device ready for work: the backend made usable
// (prepare_torch_backend), for privateuseone the process's DLPack type taken from the device's
// properties (set_privateuse1_dl_device_type), and torch_device_smoke_problem passed. "" with
// `*device` set (the host for a "cpu" plugin), else why not, in one sentence.
std::string ready_torch_device(const Plugin& plugin, int32_t index, c10::Device* device);

// The DLPack device type that tensors of the process's PrivateUse1 backend carry in plugin calls
// (the chosen plugin's verlpp_device_properties.dl_device_type); 0 = not set yet.
void set_privateuse1_dl_device_type(int32_t dl_device_type);
int32_t privateuse1_dl_device_type();

// The LibTorch version this library was built against, e.g. "1.13.0".
std::string torch_version();

// Sets `*out_handle` to the native handle (cudaStream_t, hipStream_t, ...) of LibTorch's current
// stream on `device` and returns true, when LibTorch can say it (c10::Stream::native_handle, see
// torch_device.cpp for the version) and the device has streams. The handle may itself be NULL:
// CUDA's legacy default stream, LibTorch's default. False for CPU devices, for an older LibTorch
// and when LibTorch refuses; the caller then keeps the plugin's NULL (synchronous) stream.
bool torch_current_stream_handle(const c10::Device& device, void** out_handle);

}  // namespace verlpp::hw
