// cuda: turning CUDA runtime results into plugin errors. Every runtime call goes through
// cuda_check(), which names the call and the value involved and maps the CUDA error to the
// closest verlpp_status (allocation failures are OUT_OF_MEMORY, bad values INVALID_ARGUMENT,
// everything else DEVICE_ERROR), so the host's message says what failed and where.
#pragma once

#include <verlpp/sdk/errors.hpp>

#include "gpu_runtime.hpp"

#include <string>

namespace verlpp::cuda {

// The verlpp status a CUDA runtime error maps to.
inline verlpp_status status_of(gpuError_t error) {
  switch (error) {
    case gpuErrorMemoryAllocation:
      return VERLPP_STATUS_OUT_OF_MEMORY;
    case gpuErrorInvalidValue:
    case gpuErrorInvalidDevice:
    case gpuErrorInvalidDevicePointer:
    case gpuErrorInvalidMemcpyDirection:
    case gpuErrorInvalidResourceHandle:
      return VERLPP_STATUS_INVALID_ARGUMENT;
    case gpuErrorInsufficientDriver:
    case gpuErrorNoDevice:
      return VERLPP_STATUS_NOT_INITIALIZED;
    default:
      return VERLPP_STATUS_DEVICE_ERROR;
  }
}

// Throws a PluginError for `error` (unless cudaSuccess) naming `what`. Non-sticky errors are
// cleared from the thread's last-error slot so that they do not resurface in a later call.
inline void cuda_check(gpuError_t error, const std::string& what) {
  if (error == gpuSuccess) return;
  (void)gpuGetLastError();
  sdk::fail(status_of(error), what + ": " + gpuGetErrorName(error) + " (" + gpuGetErrorString(error) + ")");
}

}  // namespace verlpp::cuda
