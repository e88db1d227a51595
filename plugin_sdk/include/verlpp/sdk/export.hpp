// Plugin SDK: VERLPP_PLUGIN(Class) exports a sdk::Plugin subclass as a verlpp plugin.
// It defines verlpp_plugin_probe_v1 and verlpp_plugin_get_api_v1 and a function table whose
// entries are trampolines: each checks its pointers, calls the class, and catches everything
// (sdk::guard), so no exception crosses the C boundary. The table is filled by member name.
//
// The class provides, as static members:
//   static constexpr const char* kName, kVariant, kVersion, kTorchDeviceType;
//   static constexpr const char* kTorchBackendLibrary;   // optional (privateuseone plugins)
//   static int32_t probe(std::string& reason);   // score, 0 = unusable (then set reason)
#pragma once

#include <verlpp/plugin_abi.h>
#include <verlpp/sdk/dlpack_util.hpp>
#include <verlpp/sdk/errors.hpp>
#include <verlpp/sdk/plugin.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

namespace verlpp::sdk {

// True when T itself declares the member (so the optional group is offered).
#define VERLPP_SDK_DECLARES(T, member) (!std::is_same_v<decltype(&T::member), decltype(&::verlpp::sdk::Plugin::member)>)

template <class T>
class Exporter {
  static_assert(std::is_base_of_v<Plugin, T>, "VERLPP_PLUGIN needs a verlpp::sdk::Plugin subclass");

 public:
  static int32_t probe(char* reason, size_t capacity) noexcept {
    try {
      std::string why;
      int32_t score = T::probe(why);
      if (score <= 0 && reason != nullptr) copy_string(reason, capacity, why.empty() ? "unusable" : why);
      return score < 0 ? 0 : score;
    } catch (const std::exception& e) {
      if (reason != nullptr) copy_string(reason, capacity, std::string("probe threw: ") + e.what());
      return 0;
    } catch (...) {
      if (reason != nullptr) copy_string(reason, capacity, "probe threw an unknown exception");
      return 0;
    }
  }

  static const verlpp_plugin_api* api(uint32_t host_minor) noexcept {
    (void)host_minor;  // a 1.x host reads the first min(sizes) bytes: a 1.0 host never sees the 1.1 slots
    static const verlpp_plugin_api table = make_table();
    return &table;
  }

 private:
  static std::unique_ptr<T>& instance_slot() {
    static std::unique_ptr<T> instance;
    return instance;
  }
  static verlpp_host_api& host_slot() {
    static verlpp_host_api host{};
    return host;
  }
  static T& self() {
    auto& p = instance_slot();
    if (!p) fail(VERLPP_STATUS_NOT_INITIALIZED, std::string(T::kName) + " plugin: init was not called");
    return *p;
  }
  template <class P>
  static P& out(P* p, const char* what) {
    if (p == nullptr) fail(VERLPP_STATUS_INVALID_ARGUMENT, std::string(what) + " is NULL");
    return *p;
  }

  static verlpp_error* init(const verlpp_host_api* host) {
    return guard("init", [&] {
      if (instance_slot()) return;  // idempotent
      verlpp_host_api& h = host_slot();
      h = verlpp_host_api{};
      if (host != nullptr) std::memcpy(&h, host, std::min(host->struct_size, sizeof(verlpp_host_api)));
      h.struct_size = sizeof(verlpp_host_api);
      auto p = std::make_unique<T>();
      p->init(h);
      instance_slot() = std::move(p);
    });
  }
  static void shutdown() { instance_slot().reset(); }

  static verlpp_error* device_count(int32_t* n) {
    return guard("device_count", [&] { out(n, "out_count") = self().device_count(); });
  }
  static void check_device(int32_t device) {
    int32_t n = self().device_count();
    if (device < 0 || device >= n)
      fail(VERLPP_STATUS_INVALID_ARGUMENT,
           "device index " + std::to_string(device) + " out of range [0, " + std::to_string(n) + ")");
  }
  static verlpp_error* device_get_properties(int32_t device, verlpp_device_properties* props) {
    return guard("device_get_properties", [&] {
      auto& o = out(props, "out_properties");
      if (o.struct_size < sizeof(size_t))
        fail(VERLPP_STATUS_INVALID_ARGUMENT,
             "out_properties->struct_size is " + std::to_string(o.struct_size) + ", too small");
      check_device(device);
      verlpp_device_properties full{};
      full.struct_size = sizeof(full);
      self().device_properties(device, full);
      // Write only what the caller's (possibly older, smaller) struct has room for.
      size_t n = std::min(o.struct_size, sizeof(full));
      full.struct_size = n;
      std::memcpy(props, &full, n);
    });
  }
  static verlpp_error* device_memory_info(int32_t device, uint64_t* free_bytes, uint64_t* total) {
    return guard("device_memory_info", [&] {
      check_device(device);
      self().memory_info(device, out(free_bytes, "out_free"), out(total, "out_total"));
    });
  }
  static verlpp_error* device_health_check(int32_t device) {
    return guard("device_health_check", [&] {
      check_device(device);
      self().health_check(device);
    });
  }
  static verlpp_error* device_synchronize(int32_t device) {
    return guard("device_synchronize", [&] {
      check_device(device);
      self().synchronize(device);
    });
  }

  static verlpp_error* mem_alloc(int32_t device, size_t bytes, size_t alignment, void** ptr) {
    return guard("mem_alloc", [&] {
      auto& o = out(ptr, "out_ptr");
      o = nullptr;
      check_device(device);
      if (alignment != 0 && (alignment & (alignment - 1)) != 0)
        fail(VERLPP_STATUS_INVALID_ARGUMENT, "alignment " + std::to_string(alignment) + " is not a power of two");
      o = self().allocate(device, bytes, alignment);
      if (o == nullptr) fail(VERLPP_STATUS_OUT_OF_MEMORY, "allocation of " + std::to_string(bytes) + " bytes failed");
    });
  }
  static verlpp_error* mem_free(int32_t device, void* ptr) {
    return guard("mem_free", [&] {
      check_device(device);
      if (ptr != nullptr) self().deallocate(device, ptr);
    });
  }
  static verlpp_error* host_alloc_pinned(size_t bytes, void** ptr) {
    return guard("host_alloc_pinned", [&] {
      auto& o = out(ptr, "out_ptr");
      o = self().allocate_pinned(bytes);
      if (o == nullptr)
        fail(VERLPP_STATUS_OUT_OF_MEMORY, "pinned allocation of " + std::to_string(bytes) + " bytes failed");
    });
  }
  static verlpp_error* host_free_pinned(void* ptr) {
    return guard("host_free_pinned", [&] {
      if (ptr != nullptr) self().deallocate_pinned(ptr);
    });
  }
  static verlpp_error* memcpy_async(void* dst, const void* src, size_t bytes, int32_t kind, verlpp_stream s) {
    return guard("memcpy_async", [&] {
      if (kind < VERLPP_COPY_HOST_TO_DEVICE || kind > VERLPP_COPY_HOST_TO_HOST)
        fail(VERLPP_STATUS_INVALID_ARGUMENT, "copy kind " + std::to_string(kind) + " is not a verlpp_copy_kind");
      if (bytes == 0) return;
      if (dst == nullptr || src == nullptr)
        fail(VERLPP_STATUS_INVALID_ARGUMENT, "NULL pointer in a copy of " + std::to_string(bytes) + " bytes");
      self().copy(dst, src, bytes, static_cast<verlpp_copy_kind>(kind), s);
    });
  }
  static verlpp_error* memset_async(void* dst, int32_t value, size_t bytes, verlpp_stream s) {
    return guard("memset_async", [&] {
      if (bytes == 0) return;
      if (dst == nullptr) fail(VERLPP_STATUS_INVALID_ARGUMENT, "NULL destination in a memset");
      self().fill(dst, value, bytes, s);
    });
  }

  static verlpp_error* stream_create(int32_t device, verlpp_stream* s) {
    return guard("stream_create", [&] {
      auto& o = out(s, "out_stream");
      check_device(device);
      o = self().create_stream(device);
    });
  }
  static verlpp_error* stream_destroy(verlpp_stream s) {
    return guard("stream_destroy", [&] {
      if (s != nullptr) self().destroy_stream(s);
    });
  }
  static verlpp_error* stream_synchronize(verlpp_stream s) {
    return guard("stream_synchronize", [&] { self().synchronize_stream(s); });
  }
  static verlpp_error* stream_wait_event(verlpp_stream s, verlpp_event e) {
    return guard("stream_wait_event", [&] {
      out(e, "event");
      self().stream_wait_event(s, e);
    });
  }
  static verlpp_error* stream_from_native(int32_t device, void* native_handle, verlpp_stream* s) {
    return guard("stream_from_native", [&] {
      auto& o = out(s, "out_stream");
      o = nullptr;
      check_device(device);
      o = self().stream_from_native(device, native_handle);
    });
  }
  static verlpp_error* stream_native_handle(verlpp_stream s, void** native_handle) {
    return guard("stream_native_handle", [&] {
      auto& o = out(native_handle, "out_native_handle");
      o = nullptr;
      out(s, "stream");  // the NULL stream is no particular native stream
      o = self().native_stream_handle(s);
    });
  }
  static verlpp_error* event_create(int32_t device, verlpp_event* e) {
    return guard("event_create", [&] {
      auto& o = out(e, "out_event");
      check_device(device);
      o = self().create_event(device);
    });
  }
  static verlpp_error* event_destroy(verlpp_event e) {
    return guard("event_destroy", [&] {
      if (e != nullptr) self().destroy_event(e);
    });
  }
  static verlpp_error* event_record(verlpp_event e, verlpp_stream s) {
    return guard("event_record", [&] {
      out(e, "event");
      self().record_event(e, s);
    });
  }
  static verlpp_error* event_synchronize(verlpp_event e) {
    return guard("event_synchronize", [&] {
      out(e, "event");
      self().synchronize_event(e);
    });
  }
  static verlpp_error* event_query(verlpp_event e, int32_t* done) {
    return guard("event_query", [&] {
      auto& o = out(done, "out_is_complete");
      out(e, "event");
      o = self().query_event(e) ? 1 : 0;
    });
  }
  static verlpp_error* event_elapsed_ms(verlpp_event a, verlpp_event b, float* ms) {
    return guard("event_elapsed_ms", [&] {
      auto& o = out(ms, "out_ms");
      out(a, "start");
      out(b, "end");
      o = self().elapsed_ms(a, b);
    });
  }

  static verlpp_error* tensor_copy(const DLTensor* src, DLTensor* dst, verlpp_stream s) {
    return guard("tensor_copy", [&] {
      const DLTensor& a = checked(src, "src");
      DLTensor& b = const_cast<DLTensor&>(checked(dst, "dst"));
      require(same_dtype(a.dtype, b.dtype), "tensor_copy: dtype " + dtype_name(a.dtype) + " != " + dtype_name(b.dtype));
      require(a.ndim == b.ndim && std::equal(a.shape, a.shape + a.ndim, b.shape), "tensor_copy: shapes differ");
      self().copy_tensor(a, b, s);
    });
  }

  static Communicator& comm_of(verlpp_comm c) {
    if (c == nullptr) fail(VERLPP_STATUS_INVALID_ARGUMENT, "communicator is NULL");
    return *reinterpret_cast<Communicator*>(c);
  }
  static void check_op(int32_t op) {
    if (op < VERLPP_REDUCE_SUM || op > VERLPP_REDUCE_MIN)
      fail(VERLPP_STATUS_INVALID_ARGUMENT, "reduce op " + std::to_string(op) + " is not a verlpp_reduce_op");
  }
  static verlpp_error* comm_create(const verlpp_comm_config* config, verlpp_comm* c) {
    return guard("comm_create", [&] {
      auto& o = out(c, "out_comm");
      o = nullptr;
      const auto& given = out(const_cast<verlpp_comm_config*>(config), "config");
      verlpp_comm_config cfg{};
      std::memcpy(&cfg, &given, std::min(given.struct_size, sizeof(cfg)));
      cfg.struct_size = sizeof(cfg);
      require(cfg.world_size >= 1, "world_size " + std::to_string(cfg.world_size) + " < 1");
      require(cfg.rank >= 0 && cfg.rank < cfg.world_size,
              "rank " + std::to_string(cfg.rank) + " out of range [0, " + std::to_string(cfg.world_size) + ")");
      require(cfg.store != nullptr || cfg.world_size == 1, "a key-value store is required for world_size > 1");
      check_device(cfg.device);
      if (cfg.key_prefix == nullptr) cfg.key_prefix = "";
      o = reinterpret_cast<verlpp_comm>(self().create_communicator(cfg).release());
    });
  }
  static verlpp_error* comm_destroy(verlpp_comm c) {
    return guard("comm_destroy", [&] { delete reinterpret_cast<Communicator*>(c); });
  }
  static verlpp_error* comm_all_reduce(verlpp_comm c, const DLTensor* send, DLTensor* recv, int32_t op,
                                       verlpp_stream s) {
    return guard("comm_all_reduce", [&] {
      check_op(op);
      comm_of(c).all_reduce(checked(send, "send"), const_cast<DLTensor&>(checked(recv, "recv")),
                            static_cast<verlpp_reduce_op>(op), s);
    });
  }
  static verlpp_error* comm_all_gather(verlpp_comm c, const DLTensor* send, DLTensor* recv, verlpp_stream s) {
    return guard("comm_all_gather", [&] {
      comm_of(c).all_gather(checked(send, "send"), const_cast<DLTensor&>(checked(recv, "recv")), s);
    });
  }
  static verlpp_error* comm_reduce_scatter(verlpp_comm c, const DLTensor* send, DLTensor* recv, int32_t op,
                                           verlpp_stream s) {
    return guard("comm_reduce_scatter", [&] {
      check_op(op);
      comm_of(c).reduce_scatter(checked(send, "send"), const_cast<DLTensor&>(checked(recv, "recv")),
                                static_cast<verlpp_reduce_op>(op), s);
    });
  }
  static verlpp_error* comm_broadcast(verlpp_comm c, DLTensor* buffer, int32_t root, verlpp_stream s) {
    return guard("comm_broadcast",
                 [&] { comm_of(c).broadcast(const_cast<DLTensor&>(checked(buffer, "buffer")), root, s); });
  }
  static verlpp_error* comm_send(verlpp_comm c, const DLTensor* buffer, int32_t peer, verlpp_stream s) {
    return guard("comm_send", [&] { comm_of(c).send(checked(buffer, "buffer"), peer, s); });
  }
  static verlpp_error* comm_recv(verlpp_comm c, DLTensor* buffer, int32_t peer, verlpp_stream s) {
    return guard("comm_recv", [&] { comm_of(c).recv(const_cast<DLTensor&>(checked(buffer, "buffer")), peer, s); });
  }
  static verlpp_error* comm_barrier(verlpp_comm c, verlpp_stream s) {
    return guard("comm_barrier", [&] { comm_of(c).barrier(s); });
  }

  static verlpp_plugin_api make_table() {
    verlpp_plugin_api t{};
    t.struct_size = sizeof(t);
    t.abi_major = VERLPP_PLUGIN_ABI_MAJOR;
    t.abi_minor = VERLPP_PLUGIN_ABI_MINOR;
    t.name = T::kName;
    t.variant = T::kVariant;
    t.version = T::kVersion;
    t.torch_device_type = T::kTorchDeviceType;
    t.init = &init;
    t.shutdown = &shutdown;
    t.error_free = &free_error;
    t.device_count = &device_count;
    t.device_get_properties = &device_get_properties;
    t.device_memory_info = &device_memory_info;
    t.device_health_check = &device_health_check;
    t.device_synchronize = &device_synchronize;
    t.mem_alloc = &mem_alloc;
    t.mem_free = &mem_free;
    t.memcpy_async = &memcpy_async;
    t.memset_async = &memset_async;
    if constexpr (VERLPP_SDK_DECLARES(T, allocate_pinned)) {
      t.host_alloc_pinned = &host_alloc_pinned;
      t.host_free_pinned = &host_free_pinned;
    }
    if constexpr (VERLPP_SDK_DECLARES(T, create_stream)) {
      t.stream_create = &stream_create;
      t.stream_destroy = &stream_destroy;
      t.stream_synchronize = &stream_synchronize;
      t.stream_wait_event = &stream_wait_event;
    }
    if constexpr (VERLPP_SDK_DECLARES(T, stream_from_native)) {
      static_assert(VERLPP_SDK_DECLARES(T, create_stream),
                    "stream_from_native needs the stream group (create_stream, destroy_stream, ...)");
      static_assert(VERLPP_SDK_DECLARES(T, native_stream_handle),
                    "declare native_stream_handle together with stream_from_native");
      t.stream_from_native = &stream_from_native;
      t.stream_native_handle = &stream_native_handle;
    }
    if constexpr (VERLPP_SDK_DECLARES(T, create_event)) {
      t.event_create = &event_create;
      t.event_destroy = &event_destroy;
      t.event_record = &event_record;
      t.event_synchronize = &event_synchronize;
      t.event_query = &event_query;
      t.event_elapsed_ms = &event_elapsed_ms;
    }
    if constexpr (VERLPP_SDK_DECLARES(T, copy_tensor)) t.tensor_copy = &tensor_copy;
    if constexpr (VERLPP_SDK_DECLARES(T, create_communicator)) {
      t.comm_create = &comm_create;
      t.comm_destroy = &comm_destroy;
      t.comm_all_reduce = &comm_all_reduce;
      t.comm_all_gather = &comm_all_gather;
      t.comm_reduce_scatter = &comm_reduce_scatter;
      t.comm_broadcast = &comm_broadcast;
      t.comm_send = &comm_send;
      t.comm_recv = &comm_recv;
      t.comm_barrier = &comm_barrier;
    }
    t.kernels = T::kernels();
    t.rollout_override = nullptr;
    t.trainer_override = nullptr;
    t.torch_backend_library = T::kTorchBackendLibrary;
    return t;
  }
};

}  // namespace verlpp::sdk

// Exports `Class` (a verlpp::sdk::Plugin subclass) as this shared object's plugin.
#define VERLPP_PLUGIN(Class)                                                                                    \
  extern "C" VERLPP_PLUGIN_EXPORT_ATTR int32_t verlpp_plugin_probe_v1(char* reason, size_t capacity) {          \
    return ::verlpp::sdk::Exporter<Class>::probe(reason, capacity);                                             \
  }                                                                                                             \
  extern "C" VERLPP_PLUGIN_EXPORT_ATTR const verlpp_plugin_api* verlpp_plugin_get_api_v1(uint32_t host_minor) { \
    return ::verlpp::sdk::Exporter<Class>::api(host_minor);                                                     \
  }
