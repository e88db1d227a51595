// cuda: the probe. Asks the driver (libcuda.so.1, opened with dlopen) for its version, the
// devices and their compute capabilities, without creating a context and without touching the
// CUDA runtime, then scores how well this build's architectures fit those devices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace verlpp::cuda {

// What the driver says about this machine.
struct DriverInfo {
  bool loaded = false;                        // libcuda.so.1 was opened and cuInit succeeded
  std::string problem;                        // why not, when !loaded
  int32_t driver_version = 0;                 // e.g. 13000 for CUDA 13.0
  std::vector<int32_t> compute_capabilities;  // per device: major * 10 + minor (90 = sm_90)
};

// Reads DriverInfo (cached after the first call; the driver cannot appear later).
const DriverInfo& driver_info();

// "80,90" -> {80, 90}; entries such as "90a" or "90-real" keep their number.
std::vector<int32_t> parse_architectures(const std::string& list);

// How well code built for `built` architectures runs on a device of compute capability `cc`:
// 3 = machine code for exactly this architecture, 2 = machine code for an older minor of the
// same major (runs as is), 1 = only PTX of an older architecture (the driver compiles it at
// load time), 0 = cannot run. (Every architecture CMake builds carries both, so PTX exists for
// each listed one.)
int32_t architecture_fit(int32_t cc, const std::vector<int32_t>& built);

// Whether device `ordinal` already has an active primary context (driver API; true when the
// driver cannot say, so that callers err on the side of their usual behaviour).
bool primary_context_active(int32_t ordinal);

// The probe's answer: a score (0 = unusable) and, when 0, the reason.
int32_t probe_score(std::string& reason);

// The shared sources call only probe_score and primary_context_active; the rocm plugin defines
// those two in plugins/rocm/kfd_probe.cpp instead of compiling this file's driver_probe.cpp.

}  // namespace verlpp::cuda
