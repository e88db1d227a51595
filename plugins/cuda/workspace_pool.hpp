// cuda: per device, the SM count, the compute capability and one memory pool for the kernels' temporary workspaces (the
// decode attention's split-K partials, the sampler's per-slice partials). Workspaces come from
// the pool stream-ordered on the launch stream (gpuMallocFromPoolAsync / gpuFreeAsync), so a call
// stays asynchronous on any stream and can be captured in a graph; the pool's release threshold
// keeps a few MB mapped between calls (the device's default pool would hand them back at every
// synchronise).
#pragma once

#include "gpu_runtime.hpp"

namespace verlpp::cuda {

struct WorkspacePool {
  int sms = 0;                  // multiprocessors (0: unknown)
  int cc_major = 0;             // compute capability major version (0: unknown; ROCm: HIP's figure)
  gpuMemPool_t pool = nullptr;  // NULL: no stream-ordered allocator; callers then run without a workspace
};

// Made once per device (thread-safe) and kept for the life of the process. A failed query only
// leaves `sms` 0 or `pool` NULL.
WorkspacePool workspace_pool(int device);

}  // namespace verlpp::cuda
