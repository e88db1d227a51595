// cuda: NVIDIA GPUs as verlpp devices (torch type "cuda": the host places tensors of this
// plugin's memory on torch's cuda device with the same index). The plugin class itself is thin:
// probing, memory, streams, kernels and NCCL live in their own files. The NULL stream is the
// legacy default stream of the device the data lives on, and work on it is waited for before
// the call returns, as the ABI requires; it also orders plugin work after LibTorch's work on
// that stream. Every other stream (created, or LibTorch's wrapped with stream_from_native) is
// asynchronous: a call queues its work and returns.
#include "cuda_check.hpp"
#include "device_memory.hpp"
#include "driver_probe.hpp"
#include "kernel_table.hpp"
#include "stream_registry.hpp"
#include "tensor_copy.hpp"

#if VERLPP_CUDA_HAS_NCCL
#include "nccl_communicator.hpp"
#endif
#include <verlpp/sdk/export.hpp>

#include "gpu_runtime.hpp"

#include <map>
#include <mutex>
#include <string>

#ifndef VERLPP_VERSION_STRING
#define VERLPP_VERSION_STRING "0.0.0"
#endif

namespace verlpp::cuda {

using sdk::fail;
using sdk::require;

namespace {

gpuMemcpyKind memcpy_kind(verlpp_copy_kind kind) {
  switch (kind) {
    case VERLPP_COPY_HOST_TO_DEVICE:
      return gpuMemcpyHostToDevice;
    case VERLPP_COPY_DEVICE_TO_HOST:
      return gpuMemcpyDeviceToHost;
    case VERLPP_COPY_DEVICE_TO_DEVICE:
      return gpuMemcpyDeviceToDevice;
    default:
      return gpuMemcpyHostToHost;
  }
}

const char* kind_name(verlpp_copy_kind kind) {
  switch (kind) {
    case VERLPP_COPY_HOST_TO_DEVICE:
      return "host->device";
    case VERLPP_COPY_DEVICE_TO_HOST:
      return "device->host";
    case VERLPP_COPY_DEVICE_TO_DEVICE:
      return "device->device";
    default:
      return "host->host";
  }
}

// The device owning `ptr` when it is CUDA device memory, else `fallback`. Used for work on the
// NULL stream, which must run on the default stream of the device the data lives on.
int32_t device_of(const void* ptr, int32_t fallback) {
  int device = 0;
  return gpu_pointer_device(ptr, &device) ? device : fallback;
}

int32_t current_device() {
  int device = 0;
  return gpuGetDevice(&device) == gpuSuccess ? device : 0;
}

}  // namespace

class CudaPlugin : public sdk::Plugin {
 public:
  static constexpr const char* kName = VERLPP_GPU_PLUGIN_NAME;
  static constexpr const char* kVariant = "";
  static constexpr const char* kVersion = VERLPP_VERSION_STRING;
  static constexpr const char* kTorchDeviceType = "cuda";

  static int32_t probe(std::string& reason) { return probe_score(reason); }

  void init(const verlpp_host_api&) override {
    int count = 0;
    cuda_check(gpuGetDeviceCount(&count),
               VERLPP_GPU_API "GetDeviceCount (does the " VERLPP_GPU_PLATFORM " runtime accept this driver?)");
    if (count <= 0) fail(VERLPP_STATUS_NOT_INITIALIZED, "the " VERLPP_GPU_PLATFORM " runtime sees no device");
    device_count_ = count;
  }

  int32_t device_count() override { return device_count_; }

  void device_properties(int32_t device, verlpp_device_properties& out) override {
    gpuDeviceProp prop{};
    cuda_check(gpuGetDeviceProperties(&prop, device),
               VERLPP_GPU_API "GetDeviceProperties(" + std::to_string(device) + ")");
    sdk::copy_string(out.name, sizeof(out.name), prop.name);
    sdk::copy_string(out.torch_device_type, sizeof(out.torch_device_type), kTorchDeviceType);
    out.torch_device_index = device;  // same process, same CUDA_VISIBLE_DEVICES: same ordinal as torch
    out.dl_device_type = VERLPP_GPU_DL_DEVICE;
    uint64_t free_bytes = 0, total = 0;
    memory_info(device, free_bytes, total);
    out.total_memory_bytes = total;
    out.free_memory_bytes = free_bytes;
    out.capabilities = VERLPP_DEVICE_CAP_PINNED_HOST_MEMORY | VERLPP_DEVICE_CAP_ASYNC_STREAMS |
                       VERLPP_DEVICE_CAP_EVENT_TIMING | VERLPP_DEVICE_CAP_FP16;
    if (prop.major >= 8) out.capabilities |= VERLPP_DEVICE_CAP_BF16;
#if VERLPP_CUDA_HAS_NCCL
    if (nccl_problem().empty()) out.capabilities |= VERLPP_DEVICE_CAP_COMMUNICATOR;
#endif
    for (int32_t other = 0; other < device_count_; ++other) {
      int can = 0;
      if (other != device && gpuDeviceCanAccessPeer(&can, device, other) == gpuSuccess && can) {
        out.capabilities |= VERLPP_DEVICE_CAP_PEER_ACCESS;
        break;
      }
    }
    out.compute_major = prop.major;
    out.compute_minor = prop.minor;
    out.multiprocessor_count = prop.multiProcessorCount;
  }

  // Creates the device's primary context if it does not exist yet (as torch.cuda.mem_get_info).
  void memory_info(int32_t device, uint64_t& free_bytes, uint64_t& total_bytes) override {
    DeviceGuard device_guard(device);
    size_t f = 0, t = 0;
    cuda_check(gpuMemGetInfo(&f, &t), VERLPP_GPU_API "MemGetInfo on device " + std::to_string(device));
    free_bytes = f;
    total_bytes = t;
  }

  // A tiny memset on a private stream, waited for: fails if the device is lost or its context
  // carries a sticky error, without waiting for other streams' work. (The word is allocated
  // once per device: cudaFree would synchronise the whole device.)
  void health_check(int32_t device) override {
    DeviceGuard device_guard(device);
    const std::string where = "health check of device " + std::to_string(device);
    cuda_check(gpuPeekAtLastError(), where + ": an earlier error is pending");
    void* word = health_word(device);
    gpuStream_t s = nullptr;
    gpuError_t e = gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking);
    if (e == gpuSuccess) e = gpuMemsetAsync(word, 0, 4, s);
    if (e == gpuSuccess) e = gpuStreamSynchronize(s);
    if (s != nullptr) (void)gpuStreamDestroy(s);
    cuda_check(e, where);
  }

  void synchronize(int32_t device) override {
    DeviceGuard device_guard(device);
    cuda_check(gpuDeviceSynchronize(), VERLPP_GPU_API "DeviceSynchronize on device " + std::to_string(device));
  }

  void* allocate(int32_t device, size_t bytes, size_t alignment) override {
    return memory_.allocate(device, bytes, alignment);
  }
  void deallocate(int32_t device, void* ptr) override { memory_.deallocate(device, ptr); }

  void copy(void* dst, const void* src, size_t bytes, verlpp_copy_kind kind, verlpp_stream stream) override {
    const void* device_side = kind == VERLPP_COPY_DEVICE_TO_HOST ? src : dst;
    StreamTarget target = resolve_stream(
        stream, kind == VERLPP_COPY_HOST_TO_HOST ? current_device() : device_of(device_side, current_device()));
    DeviceGuard device_guard(target.device);
    const std::string what = std::string("copy of ") + std::to_string(bytes) + " bytes " + kind_name(kind);
    cuda_check(gpuMemcpyAsync(dst, src, bytes, memcpy_kind(kind), target.stream), what);
    finish_if_default(target, what.c_str());
  }

  void fill(void* dst, int32_t byte_value, size_t bytes, verlpp_stream stream) override {
    // As memset: only the low byte of `byte_value` counts.
    StreamTarget target = resolve_stream(stream, device_of(dst, current_device()));
    DeviceGuard device_guard(target.device);
    const std::string what = "memset of " + std::to_string(bytes) + " bytes";
    cuda_check(gpuMemsetAsync(dst, byte_value, bytes, target.stream), what);
    finish_if_default(target, what.c_str());
  }

  void* allocate_pinned(size_t bytes) override { return memory_.allocate_pinned(bytes); }
  void deallocate_pinned(void* ptr) override { memory_.deallocate_pinned(ptr); }

  verlpp_stream create_stream(int32_t device) override { return cuda::create_stream(device); }
  void destroy_stream(verlpp_stream s) override { cuda::destroy_stream(s); }
  // ABI 1.1: LibTorch's current stream (cudaStream_t; NULL = the legacy default stream) as a
  // verlpp_stream, so that kernels run on it asynchronously and in order with LibTorch's work.
  verlpp_stream stream_from_native(int32_t device, void* native_handle) override {
    return cuda::wrap_native_stream(device, static_cast<gpuStream_t>(native_handle));
  }
  void* native_stream_handle(verlpp_stream s) override { return static_cast<void*>(lookup_stream(s).stream); }
  void synchronize_stream(verlpp_stream s) override {
    StreamTarget target = resolve_stream(s, current_device());
    DeviceGuard device_guard(target.device);
    cuda_check(gpuStreamSynchronize(target.stream), VERLPP_GPU_API "StreamSynchronize");
  }
  void stream_wait_event(verlpp_stream s, verlpp_event e) override {
    CudaEvent event = lookup_event(e);
    StreamTarget target = resolve_stream(s, event.device);
    DeviceGuard device_guard(target.device);
    cuda_check(gpuStreamWaitEvent(target.stream, event.event, 0), VERLPP_GPU_API "StreamWaitEvent");
  }

  verlpp_event create_event(int32_t device) override { return cuda::create_event(device); }
  void destroy_event(verlpp_event e) override { cuda::destroy_event(e); }
  void record_event(verlpp_event e, verlpp_stream s) override {
    CudaEvent event = lookup_event(e);
    StreamTarget target = resolve_stream(s, event.device);
    require(target.device == event.device, "event of device " + std::to_string(event.device) +
                                               " recorded on a stream of device " + std::to_string(target.device));
    DeviceGuard device_guard(target.device);
    cuda_check(gpuEventRecord(event.event, target.stream), VERLPP_GPU_API "EventRecord");
  }
  void synchronize_event(verlpp_event e) override {
    CudaEvent event = lookup_event(e);
    cuda_check(gpuEventSynchronize(event.event), VERLPP_GPU_API "EventSynchronize");
  }
  bool query_event(verlpp_event e) override {
    CudaEvent event = lookup_event(e);
    gpuError_t r = gpuEventQuery(event.event);
    if (r == gpuErrorNotReady) {
      (void)gpuGetLastError();
      return false;
    }
    cuda_check(r, VERLPP_GPU_API "EventQuery");
    return true;
  }
  float elapsed_ms(verlpp_event a, verlpp_event b) override {
    CudaEvent start = lookup_event(a), end = lookup_event(b);
    float ms = 0.0f;
    cuda_check(gpuEventElapsedTime(&ms, start.event, end.event),
               VERLPP_GPU_API "EventElapsedTime (were both events recorded and complete?)");
    return ms;
  }

  void copy_tensor(const DLTensor& src, DLTensor& dst, verlpp_stream stream) override {
    cuda::copy_tensor(src, dst, stream);
  }

#if VERLPP_CUDA_HAS_NCCL
  // Declared only with NCCL's header: without it the SDK leaves the communicator slots NULL.
  std::unique_ptr<sdk::Communicator> create_communicator(const verlpp_comm_config& config) override {
    return make_nccl_communicator(config);
  }
#endif

  static const verlpp_kernel_table* kernels() { return cuda_kernels(); }

 private:
  // The health check's 4-byte scratch on `device`, allocated on first use, freed with memory_.
  void* health_word(int32_t device) {
    std::lock_guard<std::mutex> lock(mutex_);
    void*& word = health_words_[device];
    if (word == nullptr) word = memory_.allocate(device, 4, 0);
    return word;
  }

  int32_t device_count_ = 0;
  DeviceMemory memory_;
  std::mutex mutex_;
  std::map<int32_t, void*> health_words_;
};

}  // namespace verlpp::cuda

VERLPP_PLUGIN(verlpp::cuda::CudaPlugin)
