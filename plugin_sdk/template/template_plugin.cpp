// The template plugin: the smallest complete verlpp plugin, written to be copied by a vendor.
// It exposes host memory as one device of torch type "cpu" and implements only the required
// members of sdk::Plugin; every optional group (streams, native stream interop, events, pinned
// memory, communicator, kernels) is left out, so its table slots stay NULL and the host uses its
// fallbacks. A plugin with a runtime of its own streams adds create_stream & co., then
// stream_from_native/native_stream_handle (ABI 1.1) so the host can hand it LibTorch's stream.
// Kernels: a struct with one VERLPP_SDK_KERNEL(name) per kernel you offer (each checking its
// arguments with the SDK's check_<name>_args first), and `static const verlpp_kernel_table*
// kernels() { return verlpp::sdk::kernel_table<MyKernels>(); }` in the class (sdk/kernel_list.hpp);
// the bf16/f16 roundings the kernel contracts ask for are in sdk/half_float.hpp.
// To start your own: copy this folder, rename the class and kName, replace the bodies with
// calls into your runtime, then run `verlpp-plugin-check <path to your .so>`.
#include <verlpp/sdk/export.hpp>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace example {

class TemplatePlugin : public verlpp::sdk::Plugin {
 public:
  static constexpr const char* kName = "template";
  static constexpr const char* kVariant = "";
  static constexpr const char* kVersion = "1.0.0";
  static constexpr const char* kTorchDeviceType = "cpu";

  // Say how well this machine suits the plugin; 0 (with a reason) if it cannot run here.
  // Keep it cheap: no device context, no allocations that outlive the call.
  static int32_t probe(std::string& reason) {
    if (std::getenv("VERLPP_TEMPLATE_PLUGIN_DISABLE") != nullptr) {
      reason = "disabled by VERLPP_TEMPLATE_PLUGIN_DISABLE";
      return 0;
    }
    return 1;
  }

  int32_t device_count() override { return 1; }

  void device_properties(int32_t, verlpp_device_properties& out) override {
    verlpp::sdk::copy_string(out.name, sizeof(out.name), "template host device");
    verlpp::sdk::copy_string(out.torch_device_type, sizeof(out.torch_device_type), kTorchDeviceType);
    out.dl_device_type = kDLCPU;
    out.total_memory_bytes = kCapacity;
    out.free_memory_bytes = kCapacity - used_;
    out.capabilities = VERLPP_DEVICE_CAP_HOST_ADDRESSABLE;
    out.multiprocessor_count = 1;
  }

  void memory_info(int32_t, uint64_t& free_bytes, uint64_t& total_bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    free_bytes = kCapacity - used_;
    total_bytes = kCapacity;
  }

  void* allocate(int32_t, size_t bytes, size_t alignment) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes > kCapacity - used_)
      verlpp::sdk::fail(VERLPP_STATUS_OUT_OF_MEMORY, "template device has " + std::to_string(kCapacity - used_) +
                                                         " bytes free, " + std::to_string(bytes) + " requested");
    size_t align = alignment == 0 ? 64 : std::max(alignment, sizeof(void*));
    size_t rounded = ((bytes + align - 1) / align + (bytes == 0)) * align;
    void* p = std::aligned_alloc(align, rounded);
    if (p == nullptr) verlpp::sdk::fail(VERLPP_STATUS_OUT_OF_MEMORY, "aligned_alloc failed");
    live_.insert(p);
    used_ += rounded;
    sizes_[p] = rounded;
    return p;
  }

  void deallocate(int32_t, void* ptr) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (live_.erase(ptr) == 0)
      verlpp::sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT, "pointer was not allocated by this device");
    used_ -= sizes_[ptr];
    sizes_.erase(ptr);
    std::free(ptr);
  }

  // The default stream (NULL) is the only one this plugin has; copies are synchronous.
  void copy(void* dst, const void* src, size_t bytes, verlpp_copy_kind, verlpp_stream stream) override {
    if (stream != nullptr) verlpp::sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT, "template plugin has no streams");
    std::memmove(dst, src, bytes);
  }

  void fill(void* dst, int32_t byte_value, size_t bytes, verlpp_stream stream) override {
    if (stream != nullptr) verlpp::sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT, "template plugin has no streams");
    std::memset(dst, byte_value, bytes);
  }

 private:
  static constexpr uint64_t kCapacity = uint64_t(1) << 30;  // a pretend 1 GiB device
  std::mutex mutex_;
  std::unordered_set<void*> live_;
  std::unordered_map<void*, size_t> sizes_;
  uint64_t used_ = 0;
};

}  // namespace example

VERLPP_PLUGIN(example::TemplatePlugin)
