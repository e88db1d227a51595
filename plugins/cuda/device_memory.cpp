// cuda: DeviceMemory (see the header).
#include "device_memory.hpp"
#include "cuda_check.hpp"
#include "stream_registry.hpp"

#include "gpu_runtime.hpp"

#include <string>

namespace verlpp::cuda {

DeviceMemory::~DeviceMemory() {
  for (auto& [ptr, block] : blocks_) {
    if (gpuSetDevice(block.device) == gpuSuccess) (void)gpuFree(block.base);
  }
  for (void* p : pinned_) (void)gpuFreeHost(p);
}

void* DeviceMemory::allocate(int32_t device, size_t bytes, size_t alignment) {
  size_t align = alignment == 0 ? kNativeAlignment : alignment;
  // Over-allocate only when cudaMalloc's own alignment is not enough.
  size_t extra = align > kNativeAlignment ? align - kNativeAlignment : 0;
  size_t request = bytes == 0 ? kNativeAlignment : bytes;
  if (request + extra < request)
    sdk::fail(VERLPP_STATUS_OUT_OF_MEMORY, "cannot allocate " + std::to_string(bytes) + " bytes with alignment " +
                                               std::to_string(align) + ": the size overflows");
  DeviceGuard device_guard(device);
  void* base = nullptr;
  gpuError_t e = gpuMalloc(&base, request + extra);
  if (e != gpuSuccess) {
    (void)gpuGetLastError();
    verlpp_status code = e == gpuErrorMemoryAllocation ? VERLPP_STATUS_OUT_OF_MEMORY : status_of(e);
    sdk::fail(code, VERLPP_GPU_API "Malloc of " + std::to_string(request + extra) + " bytes on device " +
                        std::to_string(device) + " failed: " + gpuGetErrorName(e) + " (" + gpuGetErrorString(e) + ")");
  }
  auto address = reinterpret_cast<uintptr_t>(base);
  void* aligned = reinterpret_cast<void*>((address + align - 1) / align * align);
  std::lock_guard<std::mutex> lock(mutex_);
  blocks_.emplace(aligned, Block{base, device});
  return aligned;
}

void DeviceMemory::deallocate(int32_t device, void* ptr) {
  Block block{};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end())
      sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT, "pointer was not allocated by the " VERLPP_GPU_PLUGIN_NAME
                                                " plugin's mem_alloc (or was already freed)");
    if (it->second.device != device)
      sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT, "pointer belongs to device " + std::to_string(it->second.device) +
                                                    ", not device " + std::to_string(device));
    block = it->second;
    blocks_.erase(it);
  }
  DeviceGuard device_guard(block.device);
  cuda_check(gpuFree(block.base), VERLPP_GPU_API "Free on device " + std::to_string(block.device));
}

void* DeviceMemory::allocate_pinned(size_t bytes) {
  void* p = nullptr;
  gpuError_t e = gpuHostAlloc(&p, bytes == 0 ? 1 : bytes, gpuHostAllocPortable);
  if (e != gpuSuccess) {
    (void)gpuGetLastError();
    sdk::fail(e == gpuErrorMemoryAllocation ? VERLPP_STATUS_OUT_OF_MEMORY : status_of(e),
              VERLPP_GPU_API "HostAlloc of " + std::to_string(bytes) + " bytes failed: " + gpuGetErrorName(e));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  pinned_.insert(p);
  return p;
}

void DeviceMemory::deallocate_pinned(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pinned_.erase(ptr) == 0)
      sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT,
                "pointer was not allocated by host_alloc_pinned (or was already freed)");
  }
  cuda_check(gpuFreeHost(ptr), VERLPP_GPU_API "FreeHost");
}

}  // namespace verlpp::cuda
