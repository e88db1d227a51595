// Whether this process's LibTorch can place tensors on a plugin's torch device type.
// Kept apart so that the rest of the hardware layer needs no torch headers.
#pragma once

#include <string>

namespace verlpp::hw {

// Empty when LibTorch can use `torch_device_type` ("cpu", "cuda", "privateuseone"), else a
// plain sentence saying why not (e.g. "this LibTorch build has no CUDA").
std::string torch_placement_problem(const std::string& torch_device_type);

// The LibTorch version this library was built against, e.g. "1.13.0".
std::string torch_version();

}  // namespace verlpp::hw
