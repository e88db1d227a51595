// LibTorch's allocator statistics (torch_memory.hpp). c10::DeviceAllocator, the device-generic
// interface to them, is in LibTorch 2.9 and later; before it only backend libraries
// (c10_cuda's CUDACachingAllocator) had them, which the hardware layer does not link.
#include <verlpp/hw/torch_memory.hpp>

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <torch/version.h>

#ifndef VERLPP_TORCH_HAS_DEVICE_ALLOCATOR
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
#define VERLPP_TORCH_HAS_DEVICE_ALLOCATOR 1
#else
#define VERLPP_TORCH_HAS_DEVICE_ALLOCATOR 0
#endif
#endif

#if VERLPP_TORCH_HAS_DEVICE_ALLOCATOR
#include <c10/core/CachingDeviceAllocator.h>
#endif

namespace verlpp::hw {
namespace {

#if VERLPP_TORCH_HAS_DEVICE_ALLOCATOR
// The device's allocator when it keeps statistics, else null (never throws: a backend without
// an allocator, or with a plain one, just has none).
c10::DeviceAllocator* stats_allocator(const c10::Device& device) {
  if (device.is_cpu()) return nullptr;
  try {
    auto* allocator = dynamic_cast<c10::DeviceAllocator*>(c10::GetAllocator(device.type()));
    return allocator != nullptr && allocator->initialized() ? allocator : nullptr;
  } catch (const std::exception&) {
    return nullptr;
  }
}
#endif

}  // namespace

bool torch_memory_stats(const c10::Device& device, TorchMemoryStats* out) {
#if VERLPP_TORCH_HAS_DEVICE_ALLOCATOR
  c10::DeviceAllocator* allocator = stats_allocator(device);
  if (allocator == nullptr) return false;
  const c10::DeviceIndex index = device.has_index() ? device.index() : c10::DeviceIndex(0);
  const auto stats = allocator->getDeviceStats(index);
  constexpr size_t kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  out->allocated = stats.allocated_bytes[kAll].current;
  out->reserved = stats.reserved_bytes[kAll].current;
  out->peak_allocated = stats.allocated_bytes[kAll].peak;
  out->peak_reserved = stats.reserved_bytes[kAll].peak;
  return true;
#else
  (void)device;
  (void)out;
  return false;
#endif
}

void reset_torch_memory_peak(const c10::Device& device) {
#if VERLPP_TORCH_HAS_DEVICE_ALLOCATOR
  if (c10::DeviceAllocator* allocator = stats_allocator(device))
    allocator->resetPeakStats(device.has_index() ? device.index() : c10::DeviceIndex(0));
#else
  (void)device;
#endif
}

}  // namespace verlpp::hw
