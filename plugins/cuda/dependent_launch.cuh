// cuda: every kernel of the plugin is launched through launch_kernel, which asks for
// programmatic dependent launch (PDL) on GPUs that have it (compute capability 9.0+).
//
// Why: a decode step is ~250 small kernels, and between two dependent kernels the GPU sits idle
// for about a microsecond while the second one is launched and its blocks are placed (in a
// CUDA graph too). With PDL the next kernel's blocks are placed while the previous kernel's last
// blocks finish, and wait at wait_for_prior_grids() until that kernel has completed and its
// writes are visible. On an H200 (docs/benchmarks.md) the decode steps of a 256 x 512-token
// rollout went from 961 to 907 ms (batch 32: 152 to 137 ms), with the same tokens.
//
// The rule that keeps this correct: every kernel launched here calls wait_for_prior_grids()
// before it reads or writes any global memory. Then nothing it does can overlap the previous
// kernel's work, and since that kernel waited too, nothing before it either; the kernels after
// it (ours or a library's) are ordered as usual. Right after the wait each kernel also lets its
// dependent launch (allow_dependents): that only places the next kernel's blocks early, which
// then wait in their own wait_for_prior_grids() for this grid to complete and flush. It helps
// where one of our kernels follows another (rotary_kv_store -> attention, the sampler's two);
// a library kernel (cuBLAS) is launched without the attribute and starts as before.
//
// VERLPP_CUDA_PDL=0 launches without the attribute (for comparison); HIP has no PDL and uses
// plain launches.
#pragma once

#include "gpu_device.cuh"
#include "workspace_pool.hpp"

#include <cstdlib>
#include <cstring>
#include <utility>

namespace verlpp::cuda {

// Waits for the grids this one depends on (a no-op without PDL: older GPUs, HIP, or a plain
// launch). The first statement of every kernel of the plugin.
__device__ __forceinline__ void wait_for_prior_grids() {
#if !(defined(VERLPP_GPU_HIP) && VERLPP_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel in the stream, if launched with PDL, place its blocks now (they wait in
// wait_for_prior_grids() until this grid has completed). A no-op where PDL is absent.
__device__ __forceinline__ void allow_dependents() {
#if !(defined(VERLPP_GPU_HIP) && VERLPP_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Whether launches on the current device ask for PDL: compute capability 9.0 or later and
// VERLPP_CUDA_PDL not "0". Cached per thread for the last device asked about.
inline bool dependent_launch_enabled() {
  static const bool allowed = [] {
    const char* env = std::getenv("VERLPP_CUDA_PDL");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  if (!allowed) return false;
  thread_local int cached_device = -1;
  thread_local bool cached_value = false;
  int device = 0;
  if (gpuGetDevice(&device) != gpuSuccess) {
    (void)gpuGetLastError();
    return false;
  }
  if (device != cached_device) {
    cached_value = workspace_pool(device).cc_major >= 9;
    cached_device = device;
  }
  return cached_value;
}

// kernel<<<grid, block, shared, stream>>>(args...), with PDL where dependent_launch_enabled();
// returns the launch's error (also left for gpuGetLastError, as a <<<>>> launch would).
template <class... Params, class... Args>
gpuError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, gpuStream_t stream,
                         Args&&... args) {
#if defined(VERLPP_GPU_HIP) && VERLPP_GPU_HIP
  kernel<<<grid, block, shared, stream>>>(std::forward<Args>(args)...);
  return gpuGetLastError();
#else
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = dependent_launch_enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
#endif
}

}  // namespace verlpp::cuda
