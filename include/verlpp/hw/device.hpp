// C++ wrappers over a plugin's device functions: Device, DeviceBuffer, PinnedBuffer, Stream,
// Event. Plugin error values become PluginCallError exceptions naming the plugin and the call.
// Optional plugin slots get their fallback here, in one place: no streams -> the default
// stream; no pinned memory -> plain host memory; no tensor_copy -> contiguous memcpy.
#pragma once

#include <verlpp/hw/plugin.hpp>

#include <cstdint>
#include <string>

namespace verlpp::hw {

// Device properties in C++ form.
struct DeviceProperties {
  std::string name;
  std::string torch_device_type;
  int32_t torch_device_index = 0;
  int32_t dl_device_type = 0;
  uint64_t total_memory_bytes = 0;
  uint64_t free_memory_bytes = 0;
  uint64_t capabilities = 0;  // VERLPP_DEVICE_CAP_* bits
  int32_t compute_major = 0, compute_minor = 0;
  int32_t multiprocessor_count = 0;
  bool has(uint64_t capability_bit) const { return (capabilities & capability_bit) != 0; }
};

// Names of the set capability bits, e.g. "event_timing,communicator".
std::string capability_names(uint64_t capabilities);

class Device;
class Event;

// A stream of the device (or its default stream when the plugin has none). Move-only.
class Stream {
 public:
  Stream(const Plugin& plugin, verlpp_stream handle, bool owned);
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  ~Stream();
  verlpp_stream handle() const { return handle_; }
  // Waits for all work queued on this stream.
  void synchronize() const;
  // Makes later work on this stream wait for `event`.
  void wait(const Event& event) const;

 private:
  const Plugin* plugin_;
  verlpp_stream handle_;
  bool owned_;
};

// A device event, for ordering and timing. Move-only.
class Event {
 public:
  Event(const Plugin& plugin, verlpp_event handle);
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  ~Event();
  verlpp_event handle() const { return handle_; }
  void record(const Stream& stream) const;
  void synchronize() const;
  bool is_complete() const;
  // Milliseconds from `start` to this event (both recorded).
  float elapsed_ms_since(const Event& start) const;

 private:
  const Plugin* plugin_;
  verlpp_event handle_;
};

// Device memory owned by this object; freed on destruction. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const Plugin& plugin, int32_t device, void* data, size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer();
  void* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  void release() noexcept;
  const Plugin* plugin_ = nullptr;
  int32_t device_ = 0;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Host memory for staging transfers: pinned when the plugin offers it, plain otherwise.
class PinnedBuffer {
 public:
  PinnedBuffer(const Plugin& plugin, size_t bytes);
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&&) = delete;
  ~PinnedBuffer();
  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  // True when the memory came from the plugin's host_alloc_pinned.
  bool is_pinned() const { return pinned_; }

 private:
  const Plugin* plugin_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool pinned_ = false;
};

// One device of one plugin.
class Device {
 public:
  Device(const Plugin& plugin, int32_t index);
  const Plugin& plugin() const { return *plugin_; }
  int32_t index() const { return index_; }

  DeviceProperties properties() const;
  // Free and total bytes of device memory.
  std::pair<uint64_t, uint64_t> memory_info() const;
  // Throws PluginCallError when the device is unhealthy.
  void health_check() const;
  void synchronize() const;

  DeviceBuffer allocate(size_t bytes, size_t alignment = 0) const;
  PinnedBuffer allocate_pinned(size_t bytes) const;
  // Raw copy; `stream` null = default stream.
  void copy(void* dst, const void* src, size_t bytes, verlpp_copy_kind kind, const Stream* stream = nullptr) const;
  void fill(void* dst, int byte_value, size_t bytes, const Stream* stream = nullptr) const;
  // Copies between equal-shape tensors (plugin's tensor_copy, else a contiguous memcpy).
  void copy_tensor(const DLTensor& src, DLTensor& dst, verlpp_copy_kind kind, const Stream* stream = nullptr) const;

  // A new stream, or the default stream when the plugin has no streams.
  Stream create_stream() const;
  // The device's default stream.
  Stream default_stream() const;
  // A new event; throws UNSUPPORTED when the plugin has no events.
  Event create_event() const;

 private:
  const Plugin* plugin_;
  int32_t index_;
};

// Number of devices of `plugin`.
int32_t device_count(const Plugin& plugin);

}  // namespace verlpp::hw
