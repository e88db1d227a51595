// Whether this process's LibTorch can place tensors on a plugin's torch device type, and
// LibTorch's current stream as a native handle. Kept apart so that the rest of the hardware
// layer needs no torch headers; the LibTorch version differences of the layer live here.
#pragma once

#include <string>

namespace c10 {
struct Device;
}

namespace verlpp::hw {

// Empty when LibTorch can use `torch_device_type` ("cpu", "cuda", "privateuseone": a backend
// registered in this process), else a plain sentence saying why not (e.g. "this LibTorch build
// has no CUDA").
std::string torch_placement_problem(const std::string& torch_device_type);

// The LibTorch version this library was built against, e.g. "1.13.0".
std::string torch_version();

// Sets `*out_handle` to the native handle (cudaStream_t, hipStream_t, ...) of LibTorch's current
// stream on `device` and returns true, when LibTorch can say it (c10::Stream::native_handle, see
// torch_device.cpp for the version) and the device has streams. The handle may itself be NULL:
// CUDA's legacy default stream, LibTorch's default. False for CPU devices, for an older LibTorch
// and when LibTorch refuses; the caller then keeps the plugin's NULL (synchronous) stream.
bool torch_current_stream_handle(const c10::Device& device, void** out_handle);

}  // namespace verlpp::hw
