// "counting": a vendor's plugin as the SDK template grows into one, for the end-to-end tests: host
// memory as one device of torch type cpu (or TEST_TORCH_TYPE, named TEST_PLUGIN_NAME; for
// privateuseone its torch backend library is $COUNTING_TORCH_BACKEND, a test's choice, so one
// build serves the loading cases), every kernel of the ABI's list
// (cpu_ref's reference math, compiled in), and a call counter per kernel. It does not mark itself a
// reference implementation, so a run on its device must call its kernels; at exit the counts go
// to $VERLPP_COUNTING_PLUGIN_OUT.<pid> ("<kernel> <calls>" lines) when any kernel was called.
#include <verlpp/sdk/export.hpp>
#include <verlpp/sdk/kernel_list.hpp>

#include "reference_kernels.hpp"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

#ifndef TEST_TORCH_TYPE
#define TEST_TORCH_TYPE "cpu"
#endif
#ifndef TEST_PLUGIN_NAME
#define TEST_PLUGIN_NAME "counting"
#endif

namespace {

using verlpp::sdk::KernelId;

std::array<std::atomic<uint64_t>, verlpp::sdk::kNumKernels> g_calls{};

// Writes the counts once, at process exit (a forked probe child has called nothing: no file).
struct CountsAtExit {
  ~CountsAtExit() {
    const char* out = std::getenv("VERLPP_COUNTING_PLUGIN_OUT");
    uint64_t total = 0;
    for (const auto& c : g_calls) total += c.load();
    if (out == nullptr || total == 0) return;
    const std::string path = std::string(out) + "." + std::to_string(::getpid());
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      for (const auto& k : verlpp::sdk::kKernels)
        std::fprintf(f, "%s %llu\n", k.name, (unsigned long long)g_calls[size_t(k.id)].load());
      std::fclose(f);
    }
  }
} g_counts_at_exit;

// Entry `id` of the reference table, counted: same type, one increment, then the reference.
template <KernelId id, class F>
struct Counted;
template <KernelId id, class... Args>
struct Counted<id, verlpp_error* (*)(Args...)> {
  static verlpp_error* call(Args... args) {
    g_calls[size_t(id)].fetch_add(1, std::memory_order_relaxed);
    return (verlpp::cpu_ref::reference_kernels()->*verlpp::sdk::KernelSlot<id>::member)(args...);
  }
};

const verlpp_kernel_table* counted_kernels() {
  static const verlpp_kernel_table table = [] {
    verlpp_kernel_table t = *verlpp::cpu_ref::reference_kernels();
#define COUNTING_ENTRY(name, minor) t.name = &Counted<KernelId::name, decltype(t.name)>::call;
    VERLPP_KERNEL_LIST(COUNTING_ENTRY)
#undef COUNTING_ENTRY
    return t;
  }();
  return &table;
}

class CountingPlugin : public verlpp::sdk::Plugin {
 public:
  static constexpr const char* kName = TEST_PLUGIN_NAME;
  static constexpr const char* kVariant = "";
  static constexpr const char* kVersion = "1.0.0";
  static constexpr const char* kTorchDeviceType = TEST_TORCH_TYPE;
  static inline const char* const kTorchBackendLibrary = std::getenv("COUNTING_TORCH_BACKEND");

  static int32_t probe(std::string&) { return 1; }
  static const verlpp_kernel_table* kernels() { return counted_kernels(); }

  int32_t device_count() override { return 1; }
  void device_properties(int32_t, verlpp_device_properties& out) override {
    verlpp::sdk::copy_string(out.name, sizeof(out.name), "counting host device");
    verlpp::sdk::copy_string(out.torch_device_type, sizeof(out.torch_device_type), kTorchDeviceType);
    out.dl_device_type = kDLCPU;
    out.total_memory_bytes = out.free_memory_bytes = uint64_t(8) << 30;
    out.capabilities = VERLPP_DEVICE_CAP_HOST_ADDRESSABLE;
    out.multiprocessor_count = 1;
  }
  void memory_info(int32_t, uint64_t& free_bytes, uint64_t& total_bytes) override {
    free_bytes = total_bytes = uint64_t(8) << 30;
  }
  void* allocate(int32_t, size_t bytes, size_t alignment) override {
    const size_t align = alignment == 0 ? 64 : std::max(alignment, sizeof(void*));
    void* p = std::aligned_alloc(align, ((bytes + align - 1) / align + (bytes == 0)) * align);
    if (p == nullptr) verlpp::sdk::fail(VERLPP_STATUS_OUT_OF_MEMORY, "aligned_alloc failed");
    return p;
  }
  void deallocate(int32_t, void* ptr) override { std::free(ptr); }
  void copy(void* dst, const void* src, size_t bytes, verlpp_copy_kind, verlpp_stream) override {
    std::memmove(dst, src, bytes);
  }
  void fill(void* dst, int32_t byte_value, size_t bytes, verlpp_stream) override {
    std::memset(dst, byte_value, bytes);
  }
};

}  // namespace

VERLPP_PLUGIN(CountingPlugin)
