// Device, Stream, Event and buffer wrappers; the fallbacks for optional plugin slots live here.
#include <verlpp/hw/device.hpp>
#include <verlpp/sdk/dlpack_util.hpp>

#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace verlpp::hw {

std::string capability_names(uint64_t caps) {
  static const std::pair<uint64_t, const char*> names[] = {{VERLPP_DEVICE_CAP_PINNED_HOST_MEMORY, "pinned_host_memory"},
                                                           {VERLPP_DEVICE_CAP_ASYNC_STREAMS, "async_streams"},
                                                           {VERLPP_DEVICE_CAP_EVENT_TIMING, "event_timing"},
                                                           {VERLPP_DEVICE_CAP_COMMUNICATOR, "communicator"},
                                                           {VERLPP_DEVICE_CAP_BF16, "bf16"},
                                                           {VERLPP_DEVICE_CAP_FP16, "fp16"},
                                                           {VERLPP_DEVICE_CAP_HOST_ADDRESSABLE, "host_addressable"},
                                                           {VERLPP_DEVICE_CAP_PEER_ACCESS, "peer_access"},
                                                           {VERLPP_DEVICE_CAP_REFERENCE_KERNELS, "reference_kernels"}};
  std::string out;
  for (const auto& [bit, name] : names)
    if (caps & bit) out += (out.empty() ? "" : ",") + std::string(name);
  return out.empty() ? "-" : out;
}

// ---- Stream

Stream::Stream(const Plugin& plugin, verlpp_stream handle, bool owned)
    : plugin_(&plugin), handle_(handle), owned_(owned) {}
Stream::Stream(Stream&& o) noexcept : plugin_(o.plugin_), handle_(o.handle_), owned_(o.owned_) { o.owned_ = false; }
Stream& Stream::operator=(Stream&& o) noexcept {
  std::swap(plugin_, o.plugin_);
  std::swap(handle_, o.handle_);
  std::swap(owned_, o.owned_);
  return *this;
}
Stream::~Stream() {
  if (owned_ && handle_ != nullptr && plugin_->api().stream_destroy != nullptr) {
    verlpp_error* e = plugin_->api().stream_destroy(handle_);
    if (e != nullptr) plugin_->api().error_free(e);  // a destructor must not throw
  }
}
void Stream::synchronize() const {
  if (plugin_->api().stream_synchronize != nullptr)
    plugin_->check(plugin_->api().stream_synchronize(handle_), "stream_synchronize");
}
void Stream::wait(const Event& event) const {
  plugin_->require_slot(reinterpret_cast<const void*>(plugin_->api().stream_wait_event), "stream_wait_event");
  plugin_->check(plugin_->api().stream_wait_event(handle_, event.handle()), "stream_wait_event");
}

// ---- Event

Event::Event(const Plugin& plugin, verlpp_event handle) : plugin_(&plugin), handle_(handle) {}
Event::Event(Event&& o) noexcept : plugin_(o.plugin_), handle_(o.handle_) { o.handle_ = nullptr; }
Event& Event::operator=(Event&& o) noexcept {
  std::swap(plugin_, o.plugin_);
  std::swap(handle_, o.handle_);
  return *this;
}
Event::~Event() {
  if (handle_ != nullptr && plugin_->api().event_destroy != nullptr) {
    verlpp_error* e = plugin_->api().event_destroy(handle_);
    if (e != nullptr) plugin_->api().error_free(e);
  }
}
void Event::record(const Stream& stream) const {
  plugin_->check(plugin_->api().event_record(handle_, stream.handle()), "event_record");
}
void Event::synchronize() const { plugin_->check(plugin_->api().event_synchronize(handle_), "event_synchronize"); }
bool Event::is_complete() const {
  int32_t done = 0;
  plugin_->check(plugin_->api().event_query(handle_, &done), "event_query");
  return done != 0;
}
float Event::elapsed_ms_since(const Event& start) const {
  plugin_->require_slot(reinterpret_cast<const void*>(plugin_->api().event_elapsed_ms), "event_elapsed_ms");
  float ms = 0;
  plugin_->check(plugin_->api().event_elapsed_ms(start.handle_, handle_, &ms), "event_elapsed_ms");
  return ms;
}

// ---- DeviceBuffer

DeviceBuffer::DeviceBuffer(const Plugin& plugin, int32_t device, void* data, size_t bytes)
    : plugin_(&plugin), device_(device), data_(data), bytes_(bytes) {}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : plugin_(o.plugin_), device_(o.device_), data_(o.data_), bytes_(o.bytes_) {
  o.data_ = nullptr;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    plugin_ = o.plugin_;
    device_ = o.device_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.data_ = nullptr;
  }
  return *this;
}
DeviceBuffer::~DeviceBuffer() { release(); }
void DeviceBuffer::release() noexcept {
  if (data_ == nullptr) return;
  verlpp_error* e = plugin_->api().mem_free(device_, data_);
  if (e != nullptr) plugin_->api().error_free(e);
  data_ = nullptr;
}

// ---- PinnedBuffer

PinnedBuffer::PinnedBuffer(const Plugin& plugin, size_t bytes) : plugin_(&plugin), bytes_(bytes) {
  if (plugin.api().host_alloc_pinned != nullptr && plugin.api().host_free_pinned != nullptr) {
    plugin.check(plugin.api().host_alloc_pinned(bytes, &data_), "host_alloc_pinned");
    pinned_ = true;
  } else {
    data_ = std::malloc(bytes == 0 ? 1 : bytes);
    if (data_ == nullptr) throw Error("host memory", fmt::format("cannot allocate {} bytes", bytes));
  }
}
PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : plugin_(o.plugin_), data_(o.data_), bytes_(o.bytes_), pinned_(o.pinned_) {
  o.data_ = nullptr;
}
PinnedBuffer::~PinnedBuffer() {
  if (data_ == nullptr) return;
  if (pinned_) {
    verlpp_error* e = plugin_->api().host_free_pinned(data_);
    if (e != nullptr) plugin_->api().error_free(e);
  } else {
    std::free(data_);
  }
}

// ---- Device

int32_t device_count(const Plugin& plugin) {
  int32_t n = 0;
  plugin.check(plugin.api().device_count(&n), "device_count");
  return n;
}

Device::Device(const Plugin& plugin, int32_t index) : plugin_(&plugin), index_(index) {
  int32_t n = device_count(plugin);
  if (index < 0 || index >= n)
    throw Error("plugin " + plugin.display_name(),
                fmt::format("device index {} out of range: the plugin has {} device(s)", index, n));
}

DeviceProperties Device::properties() const {
  verlpp_device_properties p{};
  p.struct_size = sizeof(p);
  plugin_->check(plugin_->api().device_get_properties(index_, &p), "device_get_properties");
  DeviceProperties out;
  p.name[sizeof(p.name) - 1] = '\0';
  p.torch_device_type[sizeof(p.torch_device_type) - 1] = '\0';
  out.name = p.name;
  out.torch_device_type = p.torch_device_type[0] ? p.torch_device_type : plugin_->torch_device_type();
  out.torch_device_index = p.torch_device_index;
  out.dl_device_type = p.dl_device_type;
  out.total_memory_bytes = p.total_memory_bytes;
  out.free_memory_bytes = p.free_memory_bytes;
  out.capabilities = p.capabilities;
  out.compute_major = p.compute_major;
  out.compute_minor = p.compute_minor;
  out.multiprocessor_count = p.multiprocessor_count;
  return out;
}

std::pair<uint64_t, uint64_t> Device::memory_info() const {
  uint64_t free_bytes = 0, total = 0;
  plugin_->check(plugin_->api().device_memory_info(index_, &free_bytes, &total), "device_memory_info");
  return {free_bytes, total};
}

void Device::health_check() const {
  if (plugin_->api().device_health_check != nullptr)
    plugin_->check(plugin_->api().device_health_check(index_), "device_health_check");
}

void Device::synchronize() const {
  if (plugin_->api().device_synchronize != nullptr)
    plugin_->check(plugin_->api().device_synchronize(index_), "device_synchronize");
}

DeviceBuffer Device::allocate(size_t bytes, size_t alignment) const {
  void* p = nullptr;
  plugin_->check(plugin_->api().mem_alloc(index_, bytes, alignment, &p), "mem_alloc");
  return DeviceBuffer(*plugin_, index_, p, bytes);
}

PinnedBuffer Device::allocate_pinned(size_t bytes) const { return PinnedBuffer(*plugin_, bytes); }

void Device::copy(void* dst, const void* src, size_t bytes, verlpp_copy_kind kind, const Stream* stream) const {
  plugin_->check(plugin_->api().memcpy_async(dst, src, bytes, kind, stream ? stream->handle() : nullptr),
                 "memcpy_async");
}

void Device::fill(void* dst, int byte_value, size_t bytes, const Stream* stream) const {
  plugin_->require_slot(reinterpret_cast<const void*>(plugin_->api().memset_async), "memset_async");
  plugin_->check(plugin_->api().memset_async(dst, byte_value, bytes, stream ? stream->handle() : nullptr),
                 "memset_async");
}

void Device::copy_tensor(const DLTensor& src, DLTensor& dst, verlpp_copy_kind kind, const Stream* stream) const {
  if (plugin_->api().tensor_copy != nullptr) {
    plugin_->check(plugin_->api().tensor_copy(&src, &dst, stream ? stream->handle() : nullptr), "tensor_copy");
    return;
  }
  if (!sdk::is_contiguous(src) || !sdk::is_contiguous(dst))
    throw PluginCallError(plugin_->display_name(), "tensor_copy", VERLPP_STATUS_UNSUPPORTED,
                          "the plugin has no tensor_copy and the tensors are not contiguous");
  if (!sdk::same_dtype(src.dtype, dst.dtype) || sdk::numel(src) != sdk::numel(dst))
    throw Error("tensor_copy", fmt::format("tensors differ: {} x {} vs {} x {}", sdk::numel(src),
                                           sdk::dtype_name(src.dtype), sdk::numel(dst), sdk::dtype_name(dst.dtype)));
  copy(sdk::data_ptr(dst), sdk::data_ptr(src), sdk::nbytes(src), kind, stream);
}

Stream Device::create_stream() const {
  if (plugin_->api().stream_create == nullptr) return default_stream();
  verlpp_stream s = nullptr;
  plugin_->check(plugin_->api().stream_create(index_, &s), "stream_create");
  return Stream(*plugin_, s, true);
}

Stream Device::default_stream() const { return Stream(*plugin_, nullptr, false); }

Event Device::create_event() const {
  plugin_->require_slot(reinterpret_cast<const void*>(plugin_->api().event_create), "event_create");
  verlpp_event e = nullptr;
  plugin_->check(plugin_->api().event_create(index_, &e), "event_create");
  return Event(*plugin_, e);
}

}  // namespace verlpp::hw
