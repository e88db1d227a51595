// verlpp-plugin-check, group "abi" and "errors": the table and probe promises, struct-size
// handling in both directions (an older, smaller struct and a newer, larger one), and that every
// bad argument comes back as the right error code instead of a crash.
#include "check_context.hpp"

#include <boost/dll/shared_library.hpp>
#include <verlpp/core/strings.hpp>

#include <cstddef>
#include <cstring>
#include <limits>

namespace verlpp::conformance {
namespace {

constexpr unsigned char kCanary = 0xAB;

void abi_cases(CheckContext& ctx) {
  const auto& api = ctx.api();
  ctx.run("abi", "table size, major and identity", [&] {
    CHECK_THAT(ctx.plugin().plugin_table_size() >= VERLPP_PLUGIN_API_MIN_SIZE,
               "API table struct_size is {} bytes, expected at least {} (VERLPP_PLUGIN_API_MIN_SIZE)",
               ctx.plugin().plugin_table_size(), VERLPP_PLUGIN_API_MIN_SIZE);
    // 1.1 appended the native stream pair; a table of minor >= 1 shorter than that hides it (a
    // 1.0 table may end anywhere past VERLPP_PLUGIN_API_MIN_SIZE: the loader reads the rest as NULL).
    CHECK_THAT(api.abi_minor < 1 || ctx.plugin().plugin_table_size() >= sizeof(verlpp_plugin_api),
               "API table struct_size is {} bytes, expected {} (sizeof(verlpp_plugin_api) from ABI 1.1; the plugin "
               "reports minor {})",
               ctx.plugin().plugin_table_size(), sizeof(verlpp_plugin_api), api.abi_minor);
    CHECK_THAT(api.abi_major == VERLPP_PLUGIN_ABI_MAJOR, "abi_major {}", api.abi_major);
    CHECK_THAT(!ctx.plugin().name().empty(), "empty name");
    CHECK_THAT(!ctx.plugin().version().empty(), "empty version string");
    const std::string& t = ctx.plugin().torch_device_type();
    CHECK_THAT(t == "cpu" || t == "cuda" || t == "privateuseone", "torch_device_type '{}'", t);
  });

  ctx.run("abi", "probe is repeatable and tolerates a NULL reason", [&] {
    boost::dll::shared_library lib(ctx.plugin().path(), boost::dll::load_mode::rtld_lazy);
    auto probe = lib.get<int32_t(char*, size_t)>(VERLPP_PLUGIN_PROBE_SYMBOL);
    char reason[64];
    int32_t a = probe(reason, sizeof(reason));
    int32_t b = probe(nullptr, 0);
    CHECK_THAT(a > 0 && a == b, "probe returned {} then {}", a, b);
    CHECK_THAT(a == ctx.plugin().score(), "probe score {} differs from the loader's {}", a, ctx.plugin().score());
  });

  ctx.run("abi", "get_api serves an older host minor", [&] {
    boost::dll::shared_library lib(ctx.plugin().path(), boost::dll::load_mode::rtld_lazy);
    auto get_api = lib.get<const verlpp_plugin_api*(uint32_t)>(VERLPP_PLUGIN_GET_API_SYMBOL);
    const verlpp_plugin_api* t0 = get_api(0);
    CHECK_THAT(t0 != nullptr, "get_api(0) returned NULL");
    CHECK_THAT(t0->struct_size >= VERLPP_PLUGIN_API_MIN_SIZE && t0->abi_major == VERLPP_PLUGIN_ABI_MAJOR,
               "get_api(0) table: size {}, major {}", t0->struct_size, t0->abi_major);
  });

  ctx.run("abi", "required functions present", [&] {
    std::vector<std::string> missing;
    if (!api.init) missing.push_back("init");
    if (!api.error_free) missing.push_back("error_free");
    if (!api.device_count) missing.push_back("device_count");
    if (!api.device_get_properties) missing.push_back("device_get_properties");
    if (!api.device_memory_info) missing.push_back("device_memory_info");
    if (!api.mem_alloc) missing.push_back("mem_alloc");
    if (!api.mem_free) missing.push_back("mem_free");
    if (!api.memcpy_async) missing.push_back("memcpy_async");
    CHECK_THAT(missing.empty(), "missing: {}", join(missing, ", "));
  });

  ctx.run("abi", "optional groups are all-or-nothing", [&] {
    auto group = [](std::initializer_list<const void*> slots) {
      size_t set = 0;
      for (const void* s : slots) set += s != nullptr;
      return set == 0 || set == slots.size();
    };
    auto p = [](auto f) { return reinterpret_cast<const void*>(f); };
    CHECK_THAT(group({p(api.stream_create), p(api.stream_destroy), p(api.stream_synchronize)}),
               "stream functions partly set");
    CHECK_THAT(group({p(api.event_create), p(api.event_destroy), p(api.event_record), p(api.event_synchronize),
                      p(api.event_query)}),
               "event functions partly set");
    CHECK_THAT(group({p(api.host_alloc_pinned), p(api.host_free_pinned)}), "pinned memory functions partly set");
    CHECK_THAT(group({p(api.comm_create), p(api.comm_destroy), p(api.comm_all_reduce), p(api.comm_all_gather),
                      p(api.comm_reduce_scatter), p(api.comm_broadcast), p(api.comm_send), p(api.comm_recv),
                      p(api.comm_barrier)}),
               "communicator functions partly set");
    CHECK_THAT(group({p(api.stream_from_native), p(api.stream_native_handle)}),
               "native stream functions (1.1) partly set");
    CHECK_THAT(api.stream_from_native == nullptr || api.stream_create != nullptr,
               "stream_from_native (1.1) is set but the stream functions are not");
    CHECK_THAT(api.rollout_override == nullptr && api.trainer_override == nullptr,
               "rollout/trainer overrides must be NULL in ABI 1.0");
  });

  ctx.run("abi", "device properties: older (smaller) struct is not overrun", [&] {
    CHECK_THAT(ctx.device_count() >= 1, "device_count is {}", ctx.device_count());
    // An older host knows only the fields up to total_memory_bytes.
    size_t small = offsetof(verlpp_device_properties, free_memory_bytes);
    std::vector<unsigned char> raw(sizeof(verlpp_device_properties) + 64, kCanary);
    auto* props = reinterpret_cast<verlpp_device_properties*>(raw.data());
    props->struct_size = small;
    ctx.expect_ok(api.device_get_properties(0, props), "device_get_properties(small struct)");
    CHECK_THAT(props->struct_size <= small, "plugin reported struct_size {} > the caller's {}", props->struct_size,
               small);
    for (size_t i = small; i < raw.size(); ++i)
      CHECK_THAT(raw[i] == kCanary, "byte {} past the caller's {}-byte struct was written", i, small);
  });

  ctx.run("abi", "device properties: newer (larger) struct gets the plugin's size", [&] {
    std::vector<unsigned char> raw(sizeof(verlpp_device_properties) + 64, kCanary);
    auto* props = reinterpret_cast<verlpp_device_properties*>(raw.data());
    props->struct_size = raw.size();
    ctx.expect_ok(api.device_get_properties(0, props), "device_get_properties(large struct)");
    CHECK_THAT(props->struct_size <= sizeof(verlpp_device_properties) &&
                   props->struct_size > offsetof(verlpp_device_properties, name),
               "reported struct_size {}, expected {} to {} (past name, at most sizeof(verlpp_device_properties))",
               props->struct_size, offsetof(verlpp_device_properties, name) + 1, sizeof(verlpp_device_properties));
    for (size_t i = sizeof(verlpp_device_properties); i < raw.size(); ++i)
      CHECK_THAT(raw[i] == kCanary, "byte {} past the plugin's struct was written", i);
    CHECK_THAT(std::memchr(props->name, '\0', sizeof(props->name)) != nullptr, "name is not NUL-terminated");
    CHECK_THAT(props->name[0] != '\0', "device name is empty");
  });

  // What the host builds on: the torch device type (the torch device it makes tensors on), the
  // DLPack type of the memory (every DLTensor it hands the plugin) and the memory sizes (the
  // allocator's and the scheduler's budgets). Zeroed fields pass the struct-size cases above.
  ctx.run("abi", "device properties: torch device type, DLPack type and memory", [&] {
    for (int32_t i = 0; i < ctx.device_count(); ++i) {
      verlpp_device_properties p{};
      p.struct_size = sizeof(p);
      ctx.expect_ok(api.device_get_properties(i, &p), "device_get_properties");
      const std::string type(p.torch_device_type, strnlen(p.torch_device_type, sizeof(p.torch_device_type)));
      const std::string want = api.torch_device_type ? api.torch_device_type : "";
      CHECK_THAT(type == want, "device {}: torch_device_type is '{}', expected '{}' (the plugin table's)", i, type,
                 want);
      CHECK_THAT(p.dl_device_type >= kDLCPU,
                 "device {}: dl_device_type is {}, expected a DLDeviceType (kDLCPU = 1, kDLCUDA = 2, kDLROCM = 10, "
                 "...); 0 is none",
                 i, p.dl_device_type);
      CHECK_THAT(p.total_memory_bytes > 0, "device {}: total_memory_bytes is 0, expected the device's memory size", i);
      CHECK_THAT(p.free_memory_bytes <= p.total_memory_bytes,
                 "device {}: free_memory_bytes {} exceeds total_memory_bytes {}", i, p.free_memory_bytes,
                 p.total_memory_bytes);
    }
  });

  ctx.run("abi", "error values: code, message, error_free(NULL)", [&] {
    verlpp_error* e = api.device_count(nullptr);
    CHECK_THAT(e != nullptr, "device_count(NULL) succeeded");
    CHECK_THAT(e->struct_size >= sizeof(verlpp_error), "error struct_size {}, expected at least {}", e->struct_size,
               sizeof(verlpp_error));
    CHECK_THAT(e->message != nullptr && std::strlen(e->message) > 0, "empty message");
    CHECK_THAT(e->code > VERLPP_STATUS_OK && e->code <= VERLPP_STATUS_INTERNAL, "code {}", e->code);
    api.error_free(e);
    api.error_free(nullptr);
  });
}

void error_cases(CheckContext& ctx) {
  const auto& api = ctx.api();
  const int32_t n = ctx.device_count();
  const int32_t bad = VERLPP_STATUS_INVALID_ARGUMENT;
  ctx.run("errors", "device index out of range", [&] {
    verlpp_device_properties p{};
    p.struct_size = sizeof(p);
    ctx.expect_error(api.device_get_properties(-1, &p), bad, "device_get_properties(-1)");
    ctx.expect_error(api.device_get_properties(n, &p), bad, "device_get_properties(count)");
    uint64_t f, t;
    ctx.expect_error(api.device_memory_info(n, &f, &t), bad, "device_memory_info(count)");
    void* ptr = nullptr;
    ctx.expect_error(api.mem_alloc(n, 16, 0, &ptr), bad, "mem_alloc(count)");
  });
  ctx.run("errors", "NULL output pointers", [&] {
    ctx.expect_error(api.device_count(nullptr), bad, "device_count(NULL)");
    ctx.expect_error(api.device_get_properties(0, nullptr), bad, "device_get_properties(NULL)");
    ctx.expect_error(api.mem_alloc(0, 16, 0, nullptr), bad, "mem_alloc(out NULL)");
    verlpp_device_properties p{};
    p.struct_size = 0;
    ctx.expect_error(api.device_get_properties(0, &p), bad, "device_get_properties(struct_size 0)");
  });
  ctx.run("errors", "impossible allocation is OUT_OF_MEMORY", [&] {
    void* ptr = nullptr;
    ctx.expect_error(api.mem_alloc(0, std::numeric_limits<size_t>::max() / 2, 0, &ptr), VERLPP_STATUS_OUT_OF_MEMORY,
                     "mem_alloc(SIZE_MAX/2)");
  });
  ctx.run("errors", "alignment that is not a power of two", [&] {
    void* ptr = nullptr;
    ctx.expect_error(api.mem_alloc(0, 64, 3, &ptr), bad, "mem_alloc(alignment 3)");
  });
  ctx.run("errors", "bad copies", [&] {
    hw::DeviceBuffer b = ctx.device().allocate(64);
    char host[64] = {0};
    ctx.expect_error(api.memcpy_async(b.data(), host, 64, 99, nullptr), bad, "memcpy_async(kind 99)");
    ctx.expect_error(api.memcpy_async(nullptr, host, 64, VERLPP_COPY_HOST_TO_DEVICE, nullptr), bad,
                     "memcpy_async(dst NULL)");
    ctx.expect_ok(api.memcpy_async(nullptr, nullptr, 0, VERLPP_COPY_HOST_TO_DEVICE, nullptr), "memcpy_async(0 bytes)");
  });
  ctx.run("errors", "communicator misuse", [&] {
    CheckContext::need(reinterpret_cast<const void*>(api.comm_create), "communicator");
    verlpp_comm_config cfg{};
    cfg.struct_size = sizeof(cfg);
    cfg.rank = 2;
    cfg.world_size = 2;
    verlpp_comm comm = nullptr;
    ctx.expect_error(api.comm_create(&cfg, &comm), bad, "comm_create(rank 2 of 2)");
    ctx.expect_error(api.comm_create(nullptr, &comm), bad, "comm_create(NULL config)");
    ctx.expect_error(api.comm_barrier(nullptr, nullptr), bad, "comm_barrier(NULL comm)");
    ctx.expect_error(api.comm_all_reduce(nullptr, nullptr, nullptr, VERLPP_REDUCE_SUM, nullptr), bad,
                     "comm_all_reduce(NULLs)");
  });
}

}  // namespace

void run_abi_cases(CheckContext& ctx) {
  abi_cases(ctx);
  error_cases(ctx);
}

}  // namespace verlpp::conformance
