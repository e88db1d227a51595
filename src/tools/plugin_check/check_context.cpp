// verlpp-plugin-check: CheckContext, DeviceTensor and the half-precision conversions.
#include "check_context.hpp"

#include <cmath>
#include <cstring>

namespace verlpp::conformance {

int32_t CheckContext::device_count() const { return hw::device_count(plugin_); }

void CheckContext::run(const std::string& group, const std::string& name, const std::function<void()>& body) {
  CaseResult r{group, name, Outcome::pass, "", kernel_};
  try {
    body();
  } catch (const NotOffered& e) {
    r.outcome = Outcome::not_offered;
    r.detail = e.what();
  } catch (const std::exception& e) {
    r.outcome = Outcome::fail;
    r.detail = e.what();
  } catch (...) {
    r.outcome = Outcome::fail;
    r.detail = "unknown exception";
  }
  results_.push_back(std::move(r));
}

void CheckContext::run_kernel(const char* kernel, void (*cases)(CheckContext&)) {
  kernel_ = kernel;
  const size_t before = results_.size();
  cases(*this);
  // Every kernel's group has a bad-input case (plugin-abi.md: bad arguments are INVALID_ARGUMENT,
  // never a crash); a group without one is a gap in this suite, reported as a failure.
  const std::string refusal = std::string(kernel) + " rejects bad input";
  bool covered = false;
  for (size_t i = before; i < results_.size(); ++i) covered = covered || results_[i].name == refusal;
  if (!covered)
    results_.push_back(
        {"kernels", refusal, Outcome::fail, "the conformance suite has no bad-input case for it", kernel});
  kernel_.clear();
}

void CheckContext::expect_ok(verlpp_error* error, const char* call) const {
  if (error == nullptr) return;
  std::string message = error->message ? error->message : "(NULL message)";
  int32_t code = error->code;
  api().error_free(error);
  throw CaseFailure(fmt::format("{} failed: {} ({})", call, message, hw::status_name(code)));
}

void CheckContext::expect_error(verlpp_error* error, int32_t code, const char* call) const {
  if (error == nullptr) throw CaseFailure(fmt::format("{} succeeded; expected {}", call, hw::status_name(code)));
  const size_t size = error->struct_size;
  bool sized = size >= sizeof(verlpp_error);
  int32_t got = sized ? error->code : -1;
  std::string message = sized && error->message ? error->message : "";
  api().error_free(error);
  CHECK_THAT(sized, "{}: error struct_size is {}, expected at least {}", call, size, sizeof(verlpp_error));
  CHECK_THAT(!message.empty(), "{}: error has an empty message", call);
  CHECK_THAT(got == code, "{}: expected {}, got {} ('{}')", call, hw::status_name(code), hw::status_name(got), message);
}

void CheckContext::need(const void* slot, const char* what) {
  if (slot == nullptr) throw NotOffered(fmt::format("{} not offered", what));
}

const verlpp_kernel_table& CheckContext::appended_kernels(const char* what, uint32_t minor, size_t end) const {
  if (api().abi_minor < minor)
    throw NotOffered(fmt::format("{} is ABI 1.{} (plugin minor {})", what, minor, api().abi_minor));
  const verlpp_kernel_table* table = api().kernels;
  if (table == nullptr || table->struct_size < end) need(nullptr, fmt::format("kernel {}", what).c_str());
  return *table;
}

DeviceTensor::DeviceTensor(const hw::Device& device, std::vector<int64_t> shape, DLDataType dtype)
    : device_(&device), shape_(std::move(shape)) {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  bytes_ = size_t(n) * size_t(dtype.bits / 8) * dtype.lanes;
  buffer_ = device.allocate(bytes_);
  tensor_.data = buffer_.data();
  tensor_.device = {DLDeviceType(device.properties().dl_device_type), device.index()};
  tensor_.ndim = int(shape_.size());
  tensor_.dtype = dtype;
  tensor_.shape = shape_.data();
  tensor_.strides = nullptr;
  tensor_.byte_offset = 0;
}

void DeviceTensor::upload(const void* host) const {
  if (bytes_ != 0) device_->copy(buffer_.data(), host, bytes_, VERLPP_COPY_HOST_TO_DEVICE);
  device_->synchronize();
}

void DeviceTensor::download(void* host) const {
  device_->synchronize();
  if (bytes_ != 0) device_->copy(host, buffer_.data(), bytes_, VERLPP_COPY_DEVICE_TO_HOST);
  device_->synchronize();
}

uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffff) > 0x7f800000) return uint16_t((bits >> 16) | 0x40);
  return uint16_t((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

std::vector<uint16_t> round_half(const std::vector<float>& v, DLDataType dtype, std::vector<float>& seen) {
  std::vector<uint16_t> out(v.size());
  seen.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    out[i] = dtype.code == kDLBfloat ? to_bf16(v[i]) : to_f16(v[i]);
    seen[i] = dtype.code == kDLBfloat ? from_bf16(out[i]) : from_f16(out[i]);
  }
  return out;
}

float from_bf16(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// fp16 through the exact fp32 route: scale into fp16's range by the exponent and round the
// mantissa; written independently of the cpu_ref plugin's converter on purpose.
uint16_t to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = uint16_t((x >> 16) & 0x8000);
  float a = std::fabs(f);
  if (std::isnan(f)) return uint16_t(sign | 0x7e00);
  if (a >= 65520.0f) return uint16_t(sign | 0x7c00);
  if (a < 6.103515625e-05f) {  // subnormal: units of 2^-24
    float units = std::nearbyint(a * 16777216.0f);
    return uint16_t(sign | uint16_t(units));
  }
  int e;
  float m = std::frexp(a, &e);                 // a = m * 2^e, m in [0.5, 1)
  float scaled = std::nearbyint(m * 2048.0f);  // 11 significant bits
  if (scaled >= 2048.0f) {
    scaled /= 2.0f;
    ++e;
  }
  uint16_t exp_bits = uint16_t(e - 1 + 15);
  return uint16_t(sign | (exp_bits << 10) | (uint16_t(scaled) & 0x3ff));
}

float from_f16(uint16_t h) {
  float sign = (h & 0x8000) ? -1.0f : 1.0f;
  int e = (h >> 10) & 0x1f;
  int m = h & 0x3ff;
  if (e == 0) return sign * std::ldexp(float(m), -24);
  if (e == 31) return m ? std::nanf("") : sign * INFINITY;
  return sign * std::ldexp(float(m + 1024), e - 25);
}

std::vector<uint8_t> encode_as(const std::vector<float>& values, DLDataType dtype, std::vector<double>& seen) {
  std::vector<uint8_t> raw(values.size() * size_t(dtype.bits / 8));
  seen.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype.bits == 32) {
      std::memcpy(raw.data() + 4 * i, &values[i], 4);
      seen[i] = values[i];
      continue;
    }
    const uint16_t h = dtype.code == kDLBfloat ? to_bf16(values[i]) : to_f16(values[i]);
    std::memcpy(raw.data() + 2 * i, &h, 2);
    seen[i] = dtype.code == kDLBfloat ? from_bf16(h) : from_f16(h);
  }
  return raw;
}

double decode_as(const std::vector<uint8_t>& raw, DLDataType dtype, size_t i) {
  if (dtype.bits == 32) {
    float f;
    std::memcpy(&f, raw.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, raw.data() + 2 * i, 2);
  return dtype.code == kDLBfloat ? from_bf16(h) : from_f16(h);
}

double round_as(DLDataType d, double x) {
  const float f = float(x);
  if (d.bits == 32) return f;
  return d.code == kDLBfloat ? from_bf16(to_bf16(f)) : from_f16(to_f16(f));
}

}  // namespace verlpp::conformance
