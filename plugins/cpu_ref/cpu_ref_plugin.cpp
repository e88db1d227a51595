// cpu_ref: the host CPU as one verlpp device (torch type "cpu"). The correctness reference for
// every other plugin: simple, synchronous, and strict about bad input (unknown pointers, double
// frees and foreign handles are errors, never crashes). Streams and events are bookkeeping:
// work runs synchronously on the caller's thread, events record wall-clock time. ABI 1.1's native
// stream interop is offered for the contract's sake (the conformance suite and the SDK path run
// without a GPU): with no native runtime behind it, a stream's "native handle" is its own record,
// and a wrapper is a second, non-owning record. The host never wraps LibTorch CPU streams.
#include "host_memory.hpp"
#include "reference_kernels.hpp"

#if VERLPP_CPU_REF_HAS_GLOO
#include "gloo_communicator.hpp"
#endif
#include <verlpp/sdk/export.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#ifndef VERLPP_VERSION_STRING
#define VERLPP_VERSION_STRING "0.0.0"
#endif

namespace verlpp::cpu_ref {

using sdk::fail;
using sdk::require;

struct CpuStream {
  int32_t device;
  const void* native = nullptr;  // a wrapper's native handle (NULL: the default stream); owned: unused
  bool is_wrapper = false;       // made by stream_from_native: destroying it destroys nothing else
};
struct CpuEvent {
  std::chrono::steady_clock::time_point when{};
  bool recorded = false;
};

class CpuRefPlugin : public sdk::Plugin {
 public:
  static constexpr const char* kName = "cpu_ref";
  static constexpr const char* kVariant = "";
  static constexpr const char* kVersion = VERLPP_VERSION_STRING;
  static constexpr const char* kTorchDeviceType = "cpu";
  static constexpr size_t kDefaultAlignment = 64;

  // Always usable; a low score so that nothing prefers it over a real accelerator by accident.
  static int32_t probe(std::string&) { return 1; }

  ~CpuRefPlugin() override {
    for (auto& [ptr, size] : allocations_) std::free(ptr);
    for (void* p : pinned_) std::free(p);
  }

  int32_t device_count() override { return 1; }

  void device_properties(int32_t, verlpp_device_properties& out) override {
    sdk::copy_string(out.name, sizeof(out.name), read_cpu_model());
    sdk::copy_string(out.torch_device_type, sizeof(out.torch_device_type), kTorchDeviceType);
    out.torch_device_index = 0;
    out.dl_device_type = kDLCPU;
    HostMemory m = read_host_memory();
    out.total_memory_bytes = m.total_bytes;
    out.free_memory_bytes = m.available_bytes;
    // Its kernels define the math the conformance suite holds other plugins to; runs use
    // LibTorch's faster path on the CPU instead.
    out.capabilities =
        VERLPP_DEVICE_CAP_EVENT_TIMING | VERLPP_DEVICE_CAP_HOST_ADDRESSABLE | VERLPP_DEVICE_CAP_REFERENCE_KERNELS;
#if VERLPP_CPU_REF_HAS_GLOO
    out.capabilities |= VERLPP_DEVICE_CAP_COMMUNICATOR;
#endif
    unsigned cores = std::thread::hardware_concurrency();
    out.multiprocessor_count = int32_t(cores == 0 ? 1 : cores);
  }

  void memory_info(int32_t, uint64_t& free_bytes, uint64_t& total_bytes) override {
    HostMemory m = read_host_memory();
    free_bytes = m.available_bytes;
    total_bytes = m.total_bytes;
  }

  void* allocate(int32_t, size_t bytes, size_t alignment) override {
    size_t align = alignment == 0 ? kDefaultAlignment : std::max(alignment, sizeof(void*));
    // aligned_alloc wants a size that is a multiple of the alignment; zero bytes still gets a
    // unique pointer so that every allocation can be freed.
    size_t rounded = ((bytes + align - 1) / align) * align;
    if (rounded < bytes) fail(VERLPP_STATUS_OUT_OF_MEMORY, "size " + std::to_string(bytes) + " overflows");
    if (rounded == 0) rounded = align;
    void* p = std::aligned_alloc(align, rounded);
    if (p == nullptr)
      fail(VERLPP_STATUS_OUT_OF_MEMORY, "cannot allocate " + std::to_string(bytes) + " bytes of host memory");
    std::lock_guard<std::mutex> lock(mutex_);
    allocations_.emplace(p, bytes);
    return p;
  }

  void deallocate(int32_t, void* ptr) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = allocations_.find(ptr);
    if (it == allocations_.end())
      fail(VERLPP_STATUS_INVALID_ARGUMENT, "pointer was not allocated by cpu_ref mem_alloc (or was already freed)");
    allocations_.erase(it);
    std::free(ptr);
  }

  void copy(void* dst, const void* src, size_t bytes, verlpp_copy_kind, verlpp_stream stream) override {
    check_stream(stream);
    std::memmove(dst, src, bytes);
  }

  void fill(void* dst, int32_t byte_value, size_t bytes, verlpp_stream stream) override {
    check_stream(stream);
    std::memset(dst, byte_value, bytes);
  }

  // Host memory is host memory: "pinned" allocations are plain aligned blocks (the capability
  // bit stays off), offered so that callers exercise one code path on every plugin.
  void* allocate_pinned(size_t bytes) override {
    void* p = std::aligned_alloc(
        kDefaultAlignment, ((bytes + kDefaultAlignment - 1) / kDefaultAlignment + (bytes == 0)) * kDefaultAlignment);
    if (p == nullptr) fail(VERLPP_STATUS_OUT_OF_MEMORY, "cannot allocate " + std::to_string(bytes) + " bytes");
    std::lock_guard<std::mutex> lock(mutex_);
    pinned_.insert(p);
    return p;
  }
  void deallocate_pinned(void* ptr) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pinned_.erase(ptr) == 0)
      fail(VERLPP_STATUS_INVALID_ARGUMENT, "pointer was not allocated by host_alloc_pinned (or was already freed)");
    std::free(ptr);
  }

  verlpp_stream create_stream(int32_t device) override {
    auto* s = new CpuStream{device};
    std::lock_guard<std::mutex> lock(mutex_);
    streams_.insert(s);
    return reinterpret_cast<verlpp_stream>(s);
  }
  void destroy_stream(verlpp_stream s) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto* cs = reinterpret_cast<CpuStream*>(s);
    if (streams_.erase(cs) == 0) fail(VERLPP_STATUS_INVALID_ARGUMENT, "unknown stream handle");
    delete cs;
  }
  void synchronize_stream(verlpp_stream s) override { check_stream(s); }  // work is synchronous

  // The native handle must be NULL (the default stream) or one stream_native_handle gave for a
  // live stream of this plugin on `device`: cpu_ref is strict where a GPU runtime cannot be.
  verlpp_stream stream_from_native(int32_t device, void* native_handle) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (native_handle != nullptr) {
      auto* owner = static_cast<CpuStream*>(native_handle);
      if (streams_.count(owner) == 0 || owner->is_wrapper)
        fail(VERLPP_STATUS_INVALID_ARGUMENT, "native handle is not one of a live cpu_ref stream");
      require(owner->device == device,
              "native stream is on device " + std::to_string(owner->device) + ", not " + std::to_string(device));
    }
    auto* s = new CpuStream{device, native_handle, true};
    streams_.insert(s);
    return reinterpret_cast<verlpp_stream>(s);
  }
  void* native_stream_handle(verlpp_stream s) override {
    check_stream(s);
    auto* cs = reinterpret_cast<CpuStream*>(s);
    return cs->is_wrapper ? const_cast<void*>(cs->native) : static_cast<void*>(cs);
  }
  void stream_wait_event(verlpp_stream s, verlpp_event e) override {
    check_stream(s);
    event_of(e);
  }

  verlpp_event create_event(int32_t) override {
    auto* e = new CpuEvent{};
    std::lock_guard<std::mutex> lock(mutex_);
    events_.insert(e);
    return reinterpret_cast<verlpp_event>(e);
  }
  void destroy_event(verlpp_event e) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto* ce = reinterpret_cast<CpuEvent*>(e);
    if (events_.erase(ce) == 0) fail(VERLPP_STATUS_INVALID_ARGUMENT, "unknown event handle");
    delete ce;
  }
  void record_event(verlpp_event e, verlpp_stream s) override {
    check_stream(s);
    CpuEvent& ce = event_of(e);
    ce.when = std::chrono::steady_clock::now();
    ce.recorded = true;
  }
  void synchronize_event(verlpp_event e) override { event_of(e); }
  bool query_event(verlpp_event e) override { return event_of(e).recorded; }
  float elapsed_ms(verlpp_event a, verlpp_event b) override {
    CpuEvent& start = event_of(a);
    CpuEvent& end = event_of(b);
    require(start.recorded && end.recorded, "elapsed_ms needs two recorded events");
    return std::chrono::duration<float, std::milli>(end.when - start.when).count();
  }

  void copy_tensor(const DLTensor& src, DLTensor& dst, verlpp_stream stream) override {
    check_stream(stream);
    require(src.device.device_type == kDLCPU && dst.device.device_type == kDLCPU, "cpu_ref copies host tensors only");
    size_t elem = sdk::dtype_size(src.dtype);
    int64_t n = sdk::numel(src);
    if (n == 0) return;
    if (sdk::is_contiguous(src) && sdk::is_contiguous(dst)) {
      std::memmove(sdk::data_ptr(dst), sdk::data_ptr(src), size_t(n) * elem);
      return;
    }
    // Strided copy: walk a multi-index over the shape.
    std::vector<int64_t> index(size_t(src.ndim), 0);
    auto offset = [](const DLTensor& t, const std::vector<int64_t>& idx) {
      int64_t off = 0, stride = 1;
      for (int d = t.ndim - 1; d >= 0; --d) {
        off += idx[size_t(d)] * (t.strides ? t.strides[d] : stride);
        stride *= t.shape[d];
      }
      return off;
    };
    const char* s = static_cast<const char*>(sdk::data_ptr(src));
    char* d = static_cast<char*>(sdk::data_ptr(dst));
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(d + offset(dst, index) * int64_t(elem), s + offset(src, index) * int64_t(elem), elem);
      for (int dim = src.ndim - 1; dim >= 0; --dim) {
        if (++index[size_t(dim)] < src.shape[dim]) break;
        index[size_t(dim)] = 0;
      }
    }
  }

#if VERLPP_CPU_REF_HAS_GLOO
  // Declared only with Gloo: without it the SDK leaves the communicator slots NULL.
  std::unique_ptr<sdk::Communicator> create_communicator(const verlpp_comm_config& config) override {
    return make_gloo_communicator(config);
  }
#endif

  static const verlpp_kernel_table* kernels() { return reference_kernels(); }

 private:
  void check_stream(verlpp_stream s) {
    if (s == nullptr) return;  // the default stream
    std::lock_guard<std::mutex> lock(mutex_);
    if (streams_.count(reinterpret_cast<CpuStream*>(s)) == 0)
      fail(VERLPP_STATUS_INVALID_ARGUMENT, "unknown stream handle");
  }
  CpuEvent& event_of(verlpp_event e) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto* ce = reinterpret_cast<CpuEvent*>(e);
    if (events_.count(ce) == 0) fail(VERLPP_STATUS_INVALID_ARGUMENT, "unknown event handle");
    return *ce;
  }

  std::mutex mutex_;
  std::unordered_map<void*, size_t> allocations_;
  std::unordered_set<void*> pinned_;
  std::unordered_set<CpuStream*> streams_;
  std::unordered_set<CpuEvent*> events_;
};

}  // namespace verlpp::cpu_ref

VERLPP_PLUGIN(verlpp::cpu_ref::CpuRefPlugin)
