// An SDK plugin compiled several times with defines, for loader and conformance tests:
//   TEST_NAME / TEST_VARIANT / TEST_SCORE   identity and probe score (0 = "cannot run here")
//   TEST_INIT_THROWS                        init throws (the SDK must turn it into an error)
//   TEST_TORCH_TYPE                         the torch device type it reports (default "cpu")
//   TEST_WRONG_KERNEL                       a logprob_entropy that is off by 1e-3 and a
//                                           rotary_embedding with GPT-J's interleaved pairs
//                                           (the conformance suite must catch both)
//   TEST_KERNELS                            offers test_kernels.hpp's rms_norm, silu_mul and
//                                           silu_mul_backward (correct unless one of that
//                                           file's mistakes is defined too)
//   TEST_NO_DEVICE_TORCH_TYPE               device properties without torch_device_type
//   TEST_ZERO_DEVICE_PROPS                  device properties with DLPack type 0 and no memory
#include <verlpp/sdk/export.hpp>
#ifdef TEST_KERNELS
#include "test_kernels.hpp"
#endif

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#ifndef TEST_NAME
#define TEST_NAME "sdktest"
#endif
#ifndef TEST_VARIANT
#define TEST_VARIANT ""
#endif
#ifndef TEST_TORCH_TYPE
#define TEST_TORCH_TYPE "cpu"
#endif
#ifndef TEST_SCORE
#define TEST_SCORE 5
#endif

namespace {

#ifdef TEST_WRONG_KERNEL
verlpp_error* wrong_logprob(const DLTensor* logits, const DLTensor* labels, float, DLTensor* out_lp, DLTensor* out_ent,
                            verlpp_stream) {
  return verlpp::sdk::guard("wrong_logprob", [&] {
    const DLTensor& l = verlpp::sdk::checked(logits, "logits");
    verlpp::sdk::checked(labels, "labels");
    verlpp::sdk::require(labels->ndim == 1 && labels->shape[0] == l.shape[0], "labels must be [N]");
    auto* lp = static_cast<float*>(verlpp::sdk::data_ptr(verlpp::sdk::checked(out_lp, "out_logprob")));
    // Deliberately wrong: a constant instead of the log-probability.
    for (int64_t r = 0; r < l.shape[0]; ++r) lp[r] = -1e-3f;
    if (out_ent) {
      auto* e = static_cast<float*>(verlpp::sdk::data_ptr(*out_ent));
      for (int64_t r = 0; r < l.shape[0]; ++r) e[r] = 0.0f;
    }
  });
}

// Deliberately wrong: pairs (2j, 2j + 1) as GPT-J interleaves them, not HF's (j, j + S/2).
// f32 only (anything else is refused, so no buffer is misread).
verlpp_error* wrong_rotary(DLTensor* q, DLTensor* k, const DLTensor* positions, const DLTensor* inv_freq,
                           verlpp_stream) {
  return verlpp::sdk::guard("wrong_rotary", [&] {
    const auto* pos = static_cast<const int64_t*>(verlpp::sdk::data_ptr(verlpp::sdk::checked(positions, "positions")));
    const auto* freq = static_cast<const float*>(verlpp::sdk::data_ptr(verlpp::sdk::checked(inv_freq, "inv_freq")));
    for (DLTensor* x : {q, k}) {
      if (x == nullptr) continue;
      verlpp::sdk::require(x->ndim == 3 && x->dtype.code == kDLFloat && x->dtype.bits == 32, "f32 [N, heads, S] only");
      auto* v = static_cast<float*>(verlpp::sdk::data_ptr(*x));
      const int64_t heads = x->shape[1], s = x->shape[2];
      for (int64_t t = 0; t < x->shape[0]; ++t)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t j = 0; j < s / 2; ++j) {
            float* pair = v + (t * heads + h) * s + 2 * j;
            const float angle = float(pos[t]) * freq[j], c = std::cos(angle), sn = std::sin(angle);
            const float a = pair[0], b = pair[1];
            pair[0] = a * c - b * sn;
            pair[1] = b * c + a * sn;
          }
    }
  });
}
#endif

class TestPlugin : public verlpp::sdk::Plugin {
 public:
  static constexpr const char* kName = TEST_NAME;
  static constexpr const char* kVariant = TEST_VARIANT;
  static constexpr const char* kVersion = "0.0.1";
  static constexpr const char* kTorchDeviceType = TEST_TORCH_TYPE;
  static int32_t probe(std::string& reason) {
    if (TEST_SCORE == 0) reason = "no such device on this machine (test plugin)";
    return TEST_SCORE;
  }
  void init(const verlpp_host_api&) override {
#ifdef TEST_INIT_THROWS
    throw std::runtime_error("boom: init failed on purpose");
#endif
  }
  int32_t device_count() override { return 1; }
  void device_properties(int32_t, verlpp_device_properties& out) override {
    verlpp::sdk::copy_string(out.name, sizeof(out.name), "test device");
#ifndef TEST_NO_DEVICE_TORCH_TYPE
    verlpp::sdk::copy_string(out.torch_device_type, sizeof(out.torch_device_type), TEST_TORCH_TYPE);
#endif
#ifndef TEST_ZERO_DEVICE_PROPS
    out.dl_device_type = kDLCPU;
    out.total_memory_bytes = out.free_memory_bytes = 1 << 30;
#endif
  }
  void memory_info(int32_t, uint64_t& f, uint64_t& t) override { f = t = 1 << 30; }
  void* allocate(int32_t, size_t bytes, size_t alignment) override {
    size_t a = alignment ? alignment : 64;
    return std::aligned_alloc(a, ((bytes + a - 1) / a + (bytes == 0)) * a);
  }
  void deallocate(int32_t, void* p) override { std::free(p); }
  void copy(void* dst, const void* src, size_t n, verlpp_copy_kind, verlpp_stream) override {
    std::memmove(dst, src, n);
  }
  void fill(void* dst, int32_t v, size_t n, verlpp_stream) override { std::memset(dst, v, n); }
#ifdef TEST_WRONG_KERNEL
  static const verlpp_kernel_table* kernels() {
    static const verlpp_kernel_table t = [] {
      verlpp_kernel_table k{};
      k.struct_size = sizeof(k);
      k.logprob_entropy = &wrong_logprob;
      k.rotary_embedding = &wrong_rotary;
      return k;
    }();
    return &t;
  }
#endif
#ifdef TEST_KERNELS
  static const verlpp_kernel_table* kernels() { return test_plugin::kernel_table(); }
#endif
};

}  // namespace

VERLPP_PLUGIN(TestPlugin)
