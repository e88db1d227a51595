// cuda: workspace_pool (workspace_pool.hpp).
#include "workspace_pool.hpp"

#include <cstdint>
#include <map>
#include <mutex>

namespace verlpp::cuda {

WorkspacePool workspace_pool(int device) {
  static std::mutex mutex;
  static std::map<int, WorkspacePool> pools;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = pools.find(device);
  if (found != pools.end()) return found->second;
  WorkspacePool state;
  if (gpuDeviceGetAttribute(&state.sms, gpuDevAttrMultiProcessorCount, device) != gpuSuccess) state.sms = 0;
  if (gpuDeviceGetAttribute(&state.cc_major, gpuDevAttrComputeCapabilityMajor, device) != gpuSuccess)
    state.cc_major = 0;
  gpuMemPoolProps props{};
  props.allocType = gpuMemAllocationTypePinned;
  props.location.type = gpuMemLocationTypeDevice;
  props.location.id = device;
  if (gpuMemPoolCreate(&state.pool, &props) == gpuSuccess) {
    uint64_t keep = uint64_t(64) << 20;  // kept mapped between calls
    (void)gpuMemPoolSetAttribute(state.pool, gpuMemPoolAttrReleaseThreshold, &keep);
  } else {
    state.pool = nullptr;
  }
  (void)gpuGetLastError();  // a failed query only disables the workspace paths
  pools.emplace(device, state);
  return state;
}

}  // namespace verlpp::cuda
