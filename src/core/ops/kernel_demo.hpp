// ops: every kernel a plugin offers, run once on one of its devices and compared with the
// host's own path for the same operation (the ops functions with no kernels: LibTorch on that
// device), for `verlpp demo`. One small fp32 case per kernel with fixed inputs; a quick
// demonstration that a run's kernel calls work on this machine, not the conformance suite
// (verlpp-plugin-check tests every dtype, shape class and tolerance of the contracts).
#pragma once

#include <c10/core/Device.h>

#include <string>
#include <vector>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::ops {

// The outcome for one kernel of the ABI's list.
struct KernelDemoResult {
  std::string kernel;    // its name in the list
  bool offered = false;  // false: the plugin leaves it NULL (the host's path runs instead)
  bool ok = false;       // offered and within `tolerance` of the host's path
  std::string shape;     // the case, e.g. "[37 x 1009]"
  double worst = 0;      // the largest |kernel - host| over the compared outputs
  double tolerance = 0;  // the bound it was held to (0 = bit for bit)
  std::string error;     // what a failing call said (empty when it returned)
};

// Runs each kernel the plugin offers on `device` (a device of the plugin's torch type), in the
// list's order, one result per kernel of the list.
std::vector<KernelDemoResult> demo_kernels(const hw::Kernels& kernels, const c10::Device& device);

}  // namespace verlpp::ops
