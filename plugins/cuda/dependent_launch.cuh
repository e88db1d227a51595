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
// a library kernel (cuBLAS) is launched without the attribute and starts as before. Behind a
// library kernel, in a CUDA graph, our kernel can launch at that kernel's launch completion
// (follow_foreign_kernel_early below; opt-in).
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

#if !(defined(VERLPP_GPU_HIP) && VERLPP_GPU_HIP) && defined(CUDART_VERSION) && CUDART_VERSION >= 13000
// Early launch behind library kernels, in stream capture (CUDA graphs). A kernel launched with
// PDL is captured behind its predecessor with a programmatic edge, which fires when the
// predecessor calls launch_dependents or ends. Ours call it at once, but a library kernel (a
// cuBLAS GEMM, a LibTorch op) never does, so the kernel of ours after it was placed only once it
// had drained: 4 such boundaries a decode layer. When the node our launch would follow is such a
// kernel, the dependency is made a programmatic edge fired at its launch completion (all its
// blocks have started) and our kernel is launched without the PDL attribute (which would set
// the edge back to the programmatic port): its blocks are placed while the library kernel runs
// and wait in wait_for_prior_grids() for it to complete and flush, as every kernel of ours does
// before it touches memory, so the order of memory accesses is what it was. Eager launches and
// launches after our own kernels are unchanged.
// Off unless VERLPP_GRAPH_EARLY_LAUNCH=1: on the H200 (docs/benchmarks-log.md) it gained 1.5-2% at
// batch 32 but lost 1.0-1.4% at batch 256 (also when only grids of at most one block per SM
// launched early), where the blocks waiting beside a GEMM slow it; an RL rollout's batches are
// mostly large.
// (Editing the edges after capture is not an option: CUDA refuses to remove edges from a graph
// with memory-allocation nodes, which the workspace pool's stream-ordered allocations add.)

// The node of this thread's last launch into a capture (capture id and node).
struct CapturedLaunch {
  unsigned long long capture = 0;
  cudaGraphNode_t node = nullptr;
};
inline CapturedLaunch& last_captured_launch() {
  thread_local CapturedLaunch last;
  return last;
}

// The capture `stream` is in (id), and the one node the next captured work would follow; false
// when it is not capturing or that work would follow more or fewer than one node.
struct CaptureTail {
  unsigned long long capture = 0;
  cudaGraphNode_t node = nullptr;
  cudaGraphEdgeData edge{};  // the edge that work would get (default: zeroed)
};
inline bool capture_tail(cudaStream_t stream, CaptureTail& tail) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* data = nullptr;
  size_t count = 0;
  if (cudaStreamGetCaptureInfo(stream, &status, &tail.capture, nullptr, &deps, &data, &count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (status != cudaStreamCaptureStatusActive || count != 1) return false;
  tail.node = deps[0];
  tail.edge = data != nullptr ? data[0] : cudaGraphEdgeData{};
  return true;
}

// VERLPP_GRAPH_EARLY_LAUNCH=1 (read once): without it launch_kernel asks nothing about captures.
inline bool early_launch_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("VERLPP_GRAPH_EARLY_LAUNCH");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }();
  return enabled;
}

// Makes `stream`'s capture dependency on a foreign kernel fire at that kernel's launch
// completion; true when it did (the launch must then go without the PDL attribute).
inline bool follow_foreign_kernel_early(cudaStream_t stream) {
  CaptureTail tail;
  if (!capture_tail(stream, tail)) return false;
  const CapturedLaunch& last = last_captured_launch();
  if (last.capture == tail.capture && last.node == tail.node) return false;  // our own kernel: PDL as usual
  if (tail.edge.type != cudaGraphDependencyTypeDefault || tail.edge.from_port != 0) return false;
  cudaGraphNodeType type;
  if (cudaGraphNodeGetType(tail.node, &type) != cudaSuccess || type != cudaGraphNodeTypeKernel) {
    (void)cudaGetLastError();
    return false;
  }
  cudaGraphNode_t node = tail.node;
  cudaGraphEdgeData early{};
  early.from_port = cudaGraphKernelNodePortLaunchCompletion;
  early.type = cudaGraphDependencyTypeProgrammatic;
  if (cudaStreamUpdateCaptureDependencies(stream, &node, &early, 1, cudaStreamSetCaptureDependencies) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

// After a launch into a capture: remembers its node (the stream's one dependency now).
inline void remember_captured_launch(cudaStream_t stream) {
  CaptureTail tail;
  if (capture_tail(stream, tail)) last_captured_launch() = CapturedLaunch{tail.capture, tail.node};
}
#define VERLPP_CUDA_EARLY_LAUNCH 1
#else
#define VERLPP_CUDA_EARLY_LAUNCH 0
#endif

// kernel<<<grid, block, shared, stream>>>(args...), with PDL where dependent_launch_enabled()
// (in a capture behind a foreign kernel: the early edge above instead); returns the launch's
// error (also left for gpuGetLastError, as a <<<>>> launch would).
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
  const bool pdl = dependent_launch_enabled();
#if VERLPP_CUDA_EARLY_LAUNCH
  const bool watch = pdl && early_launch_enabled();  // off: no capture queries on this hot path
  const bool early = watch && follow_foreign_kernel_early(stream);
  config.numAttrs = pdl && !early ? 1 : 0;
  const cudaError_t launched = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (watch && launched == cudaSuccess) remember_captured_launch(stream);
  return launched;
#else
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
#endif
#endif
}

}  // namespace verlpp::cuda
