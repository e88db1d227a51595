// torch_placement_problem: asks LibTorch which device types it was built with.
#include <verlpp/hw/torch_device.hpp>

#include <ATen/Context.h>
#include <torch/version.h>

namespace verlpp::hw {

std::string torch_placement_problem(const std::string& type) {
  if (type == "cpu") return {};
  if (type == "cuda") {
    if (!at::hasCUDA() && !at::hasHIP())
      return "this LibTorch build has no CUDA (it was built for CPU only); use a CUDA build of LibTorch";
    return {};
  }
  if (type == "privateuseone")
    return {};  // registered by the vendor's torch extension at run time; nothing to check here
  return "unknown torch device type '" + type + "' (expected cpu, cuda or privateuseone)";
}

std::string torch_version() { return TORCH_VERSION; }

}  // namespace verlpp::hw
