// cuda: DeviceMemory (see the header).
#include "device_memory.hpp"
#include "cuda_check.hpp"
#include "stream_registry.hpp"

#include <cuda_runtime_api.h>

#include <string>

namespace verlpp::cuda {

DeviceMemory::~DeviceMemory() {
  for (auto& [ptr, block] : blocks_) {
    if (cudaSetDevice(block.device) == cudaSuccess) (void)cudaFree(block.base);
  }
  for (void* p : pinned_) (void)cudaFreeHost(p);
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
  cudaError_t e = cudaMalloc(&base, request + extra);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    verlpp_status code = e == cudaErrorMemoryAllocation ? VERLPP_STATUS_OUT_OF_MEMORY : status_of(e);
    sdk::fail(code, "cudaMalloc of " + std::to_string(request + extra) + " bytes on device " + std::to_string(device) +
                        " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
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
      sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT, "pointer was not allocated by the cuda plugin's mem_alloc (or was already freed)");
    if (it->second.device != device)
      sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT, "pointer belongs to device " + std::to_string(it->second.device) +
                                                    ", not device " + std::to_string(device));
    block = it->second;
    blocks_.erase(it);
  }
  DeviceGuard device_guard(block.device);
  cuda_check(cudaFree(block.base), "cudaFree on device " + std::to_string(block.device));
}

void* DeviceMemory::allocate_pinned(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    sdk::fail(e == cudaErrorMemoryAllocation ? VERLPP_STATUS_OUT_OF_MEMORY : status_of(e),
              "cudaHostAlloc of " + std::to_string(bytes) + " bytes failed: " + cudaGetErrorName(e));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  pinned_.insert(p);
  return p;
}

void DeviceMemory::deallocate_pinned(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pinned_.erase(ptr) == 0)
      sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT, "pointer was not allocated by host_alloc_pinned (or was already freed)");
  }
  cuda_check(cudaFreeHost(ptr), "cudaFreeHost");
}

}  // namespace verlpp::cuda
