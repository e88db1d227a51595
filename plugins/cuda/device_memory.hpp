// cuda: device and pinned host allocations. cudaMalloc aligns to 256 bytes; a larger alignment
// is met by over-allocating and handing out an aligned pointer inside the block, so the table
// maps each pointer handed out to the block it came from (and its device). Unknown pointers and
// double frees are INVALID_ARGUMENT, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace verlpp::cuda {

class DeviceMemory {
 public:
  static constexpr size_t kNativeAlignment = 256;  // what cudaMalloc guarantees

  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory();  // frees what the host did not (best effort: the driver may be gone)

  // `alignment` 0 = 256. Zero bytes still gets a unique pointer.
  void* allocate(int32_t device, size_t bytes, size_t alignment);
  void deallocate(int32_t device, void* ptr);

  // Page-locked host memory (cudaHostAlloc, portable across devices).
  void* allocate_pinned(size_t bytes);
  void deallocate_pinned(void* ptr);

 private:
  struct Block {
    void* base;
    int32_t device;
  };
  std::mutex mutex_;
  std::unordered_map<void*, Block> blocks_;  // pointer handed out -> its cudaMalloc block
  std::unordered_set<void*> pinned_;
};

}  // namespace verlpp::cuda
