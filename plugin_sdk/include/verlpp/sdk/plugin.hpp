// Plugin SDK: the C++ base classes a vendor derives from instead of filling the C table.
// Required members are pure virtual. An optional group (streams, native stream interop, events,
// pinned memory, tensor copy, communicator) is offered to the host only when the plugin class
// itself declares the group's first member (create_stream, stream_from_native, create_event,
// allocate_pinned, copy_tensor, create_communicator); otherwise its table slots stay NULL and
// the host uses its fallback.
// See export.hpp for VERLPP_PLUGIN, which turns such a class into the two exported symbols.
#pragma once

#include <verlpp/plugin_abi.h>
#include <verlpp/sdk/errors.hpp>

#include <memory>

namespace verlpp::sdk {

// A group of ranks exchanging device buffers; created by Plugin::create_communicator.
// Every operation is collective over the group except send/recv. Tensors are borrowed.
class Communicator {
 public:
  virtual ~Communicator() = default;
  // recv = op over ranks of send (same shape and dtype; may alias).
  virtual void all_reduce(const DLTensor& send, DLTensor& recv, verlpp_reduce_op op, verlpp_stream stream) = 0;
  // recv [world * n] = rank-ordered concatenation of send [n].
  virtual void all_gather(const DLTensor& send, DLTensor& recv, verlpp_stream stream) = 0;
  // recv [n] = op over ranks of chunk `rank` of send [world * n].
  virtual void reduce_scatter(const DLTensor& send, DLTensor& recv, verlpp_reduce_op op, verlpp_stream stream) = 0;
  // buffer on every rank = buffer on root.
  virtual void broadcast(DLTensor& buffer, int32_t root, verlpp_stream stream) = 0;
  // Point-to-point; a send to `peer` pairs with a recv from this rank on `peer`.
  virtual void send(const DLTensor& buffer, int32_t peer, verlpp_stream stream) = 0;
  virtual void recv(DLTensor& buffer, int32_t peer, verlpp_stream stream) = 0;
  // Returns once every rank has entered the barrier.
  virtual void barrier(verlpp_stream stream) = 0;
};

// The plugin itself. One instance per process, created by the SDK when the host calls init.
// Identity lives in static members of the derived class (see VERLPP_PLUGIN).
class Plugin {
 public:
  virtual ~Plugin() = default;

  // Called once after loading; `host` stays valid for the life of the process.
  virtual void init(const verlpp_host_api& host) { (void)host; }

  // ---- devices (required)
  virtual int32_t device_count() = 0;
  // `out` arrives zeroed with struct_size set; fill what applies.
  virtual void device_properties(int32_t device, verlpp_device_properties& out) = 0;
  virtual void memory_info(int32_t device, uint64_t& free_bytes, uint64_t& total_bytes) = 0;
  // Throws when the device is unusable (lost, ECC errors, hung).
  virtual void health_check(int32_t device) { (void)device; }
  // Waits for all work queued on the device.
  virtual void synchronize(int32_t device) { (void)device; }

  // ---- memory (required); alignment 0 = the plugin's default
  virtual void* allocate(int32_t device, size_t bytes, size_t alignment) = 0;
  virtual void deallocate(int32_t device, void* ptr) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes, verlpp_copy_kind kind, verlpp_stream stream) = 0;
  virtual void fill(void* dst, int32_t byte_value, size_t bytes, verlpp_stream stream) = 0;

  // ---- pinned host memory (optional group: declare allocate_pinned to offer it)
  virtual void* allocate_pinned(size_t bytes) { return unsupported<void*>("allocate_pinned"); }
  virtual void deallocate_pinned(void* ptr) {
    (void)ptr;
    unsupported<void>("deallocate_pinned");
  }

  // ---- streams (optional group: declare create_stream to offer it)
  virtual verlpp_stream create_stream(int32_t device) {
    (void)device;
    return unsupported<verlpp_stream>("create_stream");
  }
  virtual void destroy_stream(verlpp_stream s) {
    (void)s;
    unsupported<void>("destroy_stream");
  }
  virtual void synchronize_stream(verlpp_stream s) {
    (void)s;
    unsupported<void>("synchronize_stream");
  }
  virtual void stream_wait_event(verlpp_stream s, verlpp_event e) {
    (void)s;
    (void)e;
    unsupported<void>("stream_wait_event");
  }

  // ---- native stream interop (ABI 1.1; optional: declare stream_from_native, and then also
  // native_stream_handle, to offer both; needs the stream group). A wrapper is a stream handle
  // like any other (destroy_stream gets it too) that must never destroy the native stream.
  virtual verlpp_stream stream_from_native(int32_t device, void* native_handle) {
    (void)device;
    (void)native_handle;
    return unsupported<verlpp_stream>("stream_from_native");
  }
  // `s` is never NULL here (the SDK refuses it).
  virtual void* native_stream_handle(verlpp_stream s) {
    (void)s;
    return unsupported<void*>("stream_native_handle");
  }

  // ---- events (optional group: declare create_event to offer it)
  virtual verlpp_event create_event(int32_t device) {
    (void)device;
    return unsupported<verlpp_event>("create_event");
  }
  virtual void destroy_event(verlpp_event e) {
    (void)e;
    unsupported<void>("destroy_event");
  }
  virtual void record_event(verlpp_event e, verlpp_stream s) {
    (void)e;
    (void)s;
    unsupported<void>("record_event");
  }
  virtual void synchronize_event(verlpp_event e) {
    (void)e;
    unsupported<void>("synchronize_event");
  }
  virtual bool query_event(verlpp_event e) {
    (void)e;
    return unsupported<bool>("query_event");
  }
  virtual float elapsed_ms(verlpp_event a, verlpp_event b) {
    (void)a;
    (void)b;
    return unsupported<float>("elapsed_ms");
  }

  // ---- tensor copy (optional: declare copy_tensor to offer it)
  virtual void copy_tensor(const DLTensor& src, DLTensor& dst, verlpp_stream stream) {
    (void)src;
    (void)dst;
    (void)stream;
    unsupported<void>("copy_tensor");
  }

  // ---- communicator (optional: declare create_communicator to offer it)
  virtual std::unique_ptr<Communicator> create_communicator(const verlpp_comm_config& config) {
    (void)config;
    return unsupported<std::unique_ptr<Communicator>>("create_communicator");
  }

  // ---- kernels (optional): hide this static with one returning a table of plain functions
  // that lives as long as the process, e.g. `return sdk::kernel_table<MyKernels>();` over a
  // struct of VERLPP_SDK_KERNEL members (kernel_list.hpp). Static because the host reads the
  // table before init.
  static const verlpp_kernel_table* kernels() { return nullptr; }

  // ---- LibTorch backend (optional, ABI 1.6): a plugin whose kTorchDeviceType is "privateuseone"
  // hides this with the file name (resolved beside the plugin) or absolute path of its LibTorch
  // extension, which the host loads before it places tensors on the plugin's devices.
  static constexpr const char* kTorchBackendLibrary = nullptr;

 protected:
  template <class R>
  static R unsupported(const char* what) {
    fail(VERLPP_STATUS_UNSUPPORTED, std::string(what) + " is not offered by this plugin");
  }
};

}  // namespace verlpp::sdk
