// verlpp-plugin-check: the pieces every conformance case shares — results, the plugin under
// test, raw-ABI helpers that expect success or a specific error code, and device buffers
// filled from and read back to the host.
#pragma once

#include <verlpp/hw/device.hpp>
#include <verlpp/hw/plugin.hpp>
#include <verlpp/sdk/dlpack_util.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace verlpp::conformance {

enum class Outcome { pass, fail, not_offered };

// One row of the final table.
struct CaseResult {
  std::string group;
  std::string name;
  Outcome outcome = Outcome::pass;
  std::string detail;  // why it failed, or what it measured
  std::string kernel;  // the kernel-table entry the case checks ("" for the other groups)
};

// Thrown inside a case to fail it with a message.
struct CaseFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Fails the current case unless `cond` holds.
#define CHECK_THAT(cond, ...)                                                        \
  do {                                                                               \
    if (!(cond)) throw ::verlpp::conformance::CaseFailure(fmt::format(__VA_ARGS__)); \
  } while (0)

// Thrown inside a case when the capability under test is not offered.
struct NotOffered : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The plugin under test and the results so far.
class CheckContext {
 public:
  explicit CheckContext(const hw::Plugin& plugin) : plugin_(plugin) {}
  const hw::Plugin& plugin() const { return plugin_; }
  const verlpp_plugin_api& api() const { return plugin_.api(); }
  int32_t device_count() const;
  hw::Device device(int32_t index = 0) const { return hw::Device(plugin_, index); }

  // Runs `body` as case `group`/`name`, recording pass, fail (any exception) or not offered.
  void run(const std::string& group, const std::string& name, const std::function<void()>& body);
  // Runs the cases of kernel `kernel` (run_<kernel>_cases), each result marked with its name.
  void run_kernel(const char* kernel, void (*cases)(CheckContext&));
  // Records a result computed elsewhere (e.g. by worker processes).
  void record(CaseResult result) { results_.push_back(std::move(result)); }
  const std::vector<CaseResult>& results() const { return results_; }

  // Expects `error` to be NULL; otherwise fails with its message. Frees it.
  void expect_ok(verlpp_error* error, const char* call) const;
  // Expects an error with `code` (and a non-empty message); frees it.
  void expect_error(verlpp_error* error, int32_t code, const char* call) const;
  // Throws NotOffered if `slot` is NULL.
  static void need(const void* slot, const char* what);
  // The plugin's kernel table, for entry `what` appended in ABI 1.`minor` and ending at byte
  // `end` of the table (its offsetof + sizeof(void*)). Throws NotOffered when the plugin is
  // older, has no table, or its table ends before `end` (the slot lies past its struct).
  const verlpp_kernel_table& appended_kernels(const char* what, uint32_t minor, size_t end) const;

 private:
  const hw::Plugin& plugin_;
  std::vector<CaseResult> results_;
  std::string kernel_;  // the kernel whose cases run now
};

// A DLTensor over device memory, with its shape kept alive; filled from and read to the host.
class DeviceTensor {
 public:
  DeviceTensor(const hw::Device& device, std::vector<int64_t> shape, DLDataType dtype);
  DLTensor& dl() { return tensor_; }
  const DLTensor& dl() const { return tensor_; }
  size_t bytes() const { return bytes_; }
  void upload(const void* host) const;
  void download(void* host) const;
  template <class T>
  std::vector<T> to_host() const {
    std::vector<T> out(bytes_ / sizeof(T));
    download(out.data());
    return out;
  }

 private:
  const hw::Device* device_;
  std::vector<int64_t> shape_;
  hw::DeviceBuffer buffer_;
  DLTensor tensor_{};
  size_t bytes_ = 0;
};

inline DLDataType dl_f32() { return {kDLFloat, 32, 1}; }
inline DLDataType dl_f64() { return {kDLFloat, 64, 1}; }
inline DLDataType dl_f16() { return {kDLFloat, 16, 1}; }
inline DLDataType dl_bf16() { return {kDLBfloat, 16, 1}; }
inline DLDataType dl_i32() { return {kDLInt, 32, 1}; }
inline DLDataType dl_i64() { return {kDLInt, 64, 1}; }
inline DLDataType dl_u8() { return {kDLUInt, 8, 1}; }

// The worst element of a comparison and the first one over its tolerance (NaN counts as worst),
// with what it got, what it wanted and the tolerance it broke, for the failure message.
struct Worst {
  double error = 0;
  size_t index = 0;
  size_t first_bad = SIZE_MAX;
  double bad_got = 0, bad_want = 0, bad_tol = 0;
  void add(size_t i, double got, double want, double tol) {
    double e = std::fabs(got - want);
    if (!(e <= error)) {
      error = e;
      index = i;
    }
    if (!(e <= tol) && first_bad == SIZE_MAX) {
      first_bad = i;
      bad_got = got;
      bad_want = want;
      bad_tol = tol;
    }
  }
  // Fails the case naming the first bad index (its value, the reference and the tolerance) and
  // the worst error.
  void require(const std::string& what) const {
    CHECK_THAT(first_bad == SIZE_MAX,
               "{}: first bad index {}: got {:.9g}, want {:.9g}, |diff| {:.3e} > tolerance {:.3e}; worst |diff| "
               "{:.3e} at {}",
               what, first_bad, bad_got, bad_want, std::fabs(bad_got - bad_want), bad_tol, error, index);
  }
};

// Outputs a contract fixes bit for bit (a 16-bit value rounded from an exact product): the first
// element whose stored bits are none of the values the contract allows, and how many are off.
struct Exact {
  size_t count = 0, wrong = 0, first_bad = SIZE_MAX;
  double bad_got = 0, bad_want = 0;
  // `got` is right when it equals `want` or `alternative` (the other rounding an fp32 math-library
  // ulp before the final rounding can give; pass `want` again when there is none).
  void add(size_t i, double got, double want, double alternative) {
    ++count;
    if (got == want || got == alternative || (std::isnan(got) && std::isnan(want))) return;
    ++wrong;
    if (first_bad == SIZE_MAX) {
      first_bad = i;
      bad_got = got;
      bad_want = want;
    }
  }
  void require(const std::string& what, const char* rule) const {
    CHECK_THAT(wrong == 0,
               "{}: first bad index {}: got {:.9g}, the contract's rounding ({}) gives {:.9g}; {} of {} outputs "
               "differ (16-bit outputs must be exact, tolerance 0)",
               what, first_bad, bad_got, rule, bad_want, wrong, count);
  }
};

// fp32 <-> bf16 / fp16 (round to nearest even), for building inputs and references.
uint16_t to_bf16(float f);
float from_bf16(uint16_t h);
uint16_t to_f16(float f);
float from_f16(uint16_t h);
// Host data of `dtype` (bf16 or f16) from fp32 values, rounded, and in `seen` the values as a
// kernel reads them back.
std::vector<uint16_t> round_half(const std::vector<float>& v, DLDataType dtype, std::vector<float>& seen);
// Raw host bytes of `values` stored as `dtype` (f32, bf16 or f16; rounded), and in `seen` the
// values as a kernel reads them back.
std::vector<uint8_t> encode_as(const std::vector<float>& values, DLDataType dtype, std::vector<double>& seen);
// Element i of raw bytes of `dtype`, as a double.
double decode_as(const std::vector<uint8_t>& raw, DLDataType dtype, size_t i);
// x rounded to `d` through fp32 (fp32 itself for f32), as a kernel rounds a value it stores.
double round_as(DLDataType d, double x);

// RoPE references (rotary_cases.cpp), shared with the rotary_kv_store cases: a model's inverse
// frequencies theta^(-2j/S) (the long wavelengths divided by 8, as llama3 scaling does), and the
// check of x [n, heads, s] rotated at `pos` against fp64 math from the values the kernel saw.
std::vector<float> inverse_frequencies(int64_t s, double theta);
void check_rotated(const std::vector<float>& got, const std::vector<float>& seen, const std::vector<int64_t>& pos,
                   const std::vector<float>& inv_freq, int64_t heads, int64_t s, DLDataType dtype,
                   const std::string& what);

// Case groups (each file adds its cases to the context).
void run_abi_cases(CheckContext& ctx);
void run_memory_cases(CheckContext& ctx);
void run_stream_cases(CheckContext& ctx);
void run_kernel_table_cases(CheckContext& ctx);  // the table itself (kernel_cases.cpp)
// One case group per entry of the ABI's kernel list, in the "kernels" group: run_<kernel>_cases
// (main.cpp runs them all from VERLPP_KERNEL_LIST, so a listed kernel without cases does not link).
#define VERLPP_CONFORMANCE_KERNEL_CASES(name, minor) void run_##name##_cases(CheckContext& ctx);
VERLPP_KERNEL_LIST(VERLPP_CONFORMANCE_KERNEL_CASES)
#undef VERLPP_CONFORMANCE_KERNEL_CASES

// Communicator cases run in `world_size` worker processes of this executable; the parent
// collects their results. `self` is this executable's path, `plugin_arg` how workers load it.
void run_comm_cases(CheckContext& ctx, const std::string& self, const std::string& plugin_arg,
                    const std::vector<int>& world_sizes, int64_t timeout_ms);
// The worker side: runs every communicator case as `rank` and prints one JSON line per case.
int comm_worker_main(const hw::Plugin& plugin, int rank, int world_size, const std::string& host, int port,
                     int64_t timeout_ms);
// The worker of the missing-peer case: rank 0 of a world of two whose rank 1 never starts.
int missing_peer_worker_main(const hw::Plugin& plugin, const std::string& host, int port);

}  // namespace verlpp::conformance
