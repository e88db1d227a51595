// Device memory as LibTorch's caching allocator counts it (what PyTorch's
// torch.cuda.memory_allocated / max_memory_allocated report), for the per-stage memory metrics.
// Kept apart from the plugin ABI: the trainer's tensors come from LibTorch's allocator, not from
// the plugin's, so only LibTorch can say how much of the device they take.
#pragma once

#include <cstdint>

namespace c10 {
struct Device;
}

namespace verlpp::hw {

// Bytes of one device, since the last reset_torch_memory_peak for the peaks.
struct TorchMemoryStats {
  int64_t allocated = 0;       // held by live tensors now
  int64_t reserved = 0;        // taken from the device by the allocator (allocated + cached)
  int64_t peak_allocated = 0;  // the most `allocated` has been
  int64_t peak_reserved = 0;
};

// True, with `*out` filled, where LibTorch's allocator for `device` keeps statistics (a
// c10::DeviceAllocator: CUDA and ROCm in LibTorch 2.9+, and backends that register one); false
// for the host, an older LibTorch and allocators without them.
bool torch_memory_stats(const c10::Device& device, TorchMemoryStats* out);
// Starts the peaks again from the current figures (nothing where there are no statistics).
void reset_torch_memory_peak(const c10::Device& device);

}  // namespace verlpp::hw
