// cpu_ref: plain-loop reference kernels. Inputs may be f32, bf16 or f16; math is in fp32/fp64
// (log-sum-exp with the row max subtracted), results are written as f32 (logprob_entropy) or in
// the input dtype (rms_norm, rounded where HF's RMSNorm rounds), as plugin_abi.h defines them.
#include "reference_kernels.hpp"
#include "half_float.hpp"

#include <verlpp/sdk/dlpack_util.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace verlpp::cpu_ref {
namespace {

using sdk::checked;
using sdk::fail;
using sdk::require;

bool is_float_dtype(DLDataType d) {
  return d.lanes == 1 && ((d.code == kDLFloat && (d.bits == 32 || d.bits == 16)) ||
                          (d.code == kDLBfloat && d.bits == 16));
}

float load(const void* base, DLDataType d, int64_t i) {
  if (d.code == kDLFloat && d.bits == 32) return static_cast<const float*>(base)[i];
  if (d.code == kDLFloat && d.bits == 16) return half_to_float(static_cast<const uint16_t*>(base)[i]);
  return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
}

void store(void* base, DLDataType d, int64_t i, float v) {
  if (d.code == kDLFloat && d.bits == 32) static_cast<float*>(base)[i] = v;
  else if (d.code == kDLFloat && d.bits == 16) static_cast<uint16_t*>(base)[i] = float_to_half(v);
  else static_cast<uint16_t*>(base)[i] = float_to_bf16(v);
}

// `v` rounded to dtype `d` and read back as fp32.
float round_to(DLDataType d, float v) {
  uint16_t h = 0;
  if (d.code == kDLFloat && d.bits == 32) return v;
  store(&h, d, 0, v);
  return load(&h, d, 0);
}

bool is_f32(DLDataType d) { return d.code == kDLFloat && d.bits == 32 && d.lanes == 1; }

void require_host(const DLTensor& t, const char* what) {
  require(t.device.device_type == kDLCPU, std::string(what) + " is not in host memory");
}

verlpp_error* logprob_entropy(const DLTensor* logits_p, const DLTensor* labels_p, float temperature,
                              DLTensor* out_logprob_p, DLTensor* out_entropy_p, verlpp_stream) {
  return sdk::guard("cpu_ref logprob_entropy", [&] {
    const DLTensor& logits = checked(logits_p, "logits");
    const DLTensor& labels = checked(labels_p, "labels");
    DLTensor& out_lp = const_cast<DLTensor&>(checked(out_logprob_p, "out_logprob"));
    require(logits.ndim == 2, "logits must be [N, V], got ndim " + std::to_string(logits.ndim));
    require(is_float_dtype(logits.dtype), "logits dtype " + sdk::dtype_name(logits.dtype) + " is not f32/bf16/f16");
    int64_t n = logits.shape[0], v = logits.shape[1];
    require(labels.ndim == 1 && labels.shape[0] == n, "labels must be [N] with N = " + std::to_string(n));
    require(labels.dtype.code == kDLInt && labels.dtype.bits == 64, "labels must be int64");
    require(out_lp.ndim == 1 && out_lp.shape[0] == n && is_f32(out_lp.dtype), "out_logprob must be [N] float32");
    require(temperature > 0.0f && std::isfinite(temperature), "temperature must be > 0, got " + std::to_string(temperature));
    DLTensor* out_ent = out_entropy_p;
    if (out_ent != nullptr) {
      checked(out_ent, "out_entropy");
      require(out_ent->ndim == 1 && out_ent->shape[0] == n && is_f32(out_ent->dtype), "out_entropy must be [N] float32");
      require(sdk::is_contiguous(*out_ent), "out_entropy must be contiguous");
    }
    require(sdk::is_contiguous(labels) && sdk::is_contiguous(out_lp), "labels and out_logprob must be contiguous");
    require_host(logits, "logits");
    require(v > 0 || n == 0, "vocabulary size is 0");
    // Rows may be strided; columns must be dense.
    int64_t row_stride = logits.strides ? logits.strides[0] : v;
    require(logits.strides == nullptr || logits.strides[1] == 1 || v == 1, "logits columns must be dense (stride 1)");
    const void* base = sdk::data_ptr(logits);
    const auto* label = static_cast<const int64_t*>(sdk::data_ptr(labels));
    auto* lp = static_cast<float*>(sdk::data_ptr(out_lp));
    float* ent = out_ent ? static_cast<float*>(sdk::data_ptr(*out_ent)) : nullptr;
    for (int64_t r = 0; r < n; ++r) {
      require(label[r] >= 0 && label[r] < v, "label " + std::to_string(label[r]) + " at row " + std::to_string(r) + " is outside [0, " + std::to_string(v) + ")");
      int64_t off = r * row_stride;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < v; ++j) mx = std::max(mx, load(base, logits.dtype, off + j) / temperature);
      double sum = 0.0, weighted = 0.0;
      for (int64_t j = 0; j < v; ++j) {
        double z = double(load(base, logits.dtype, off + j) / temperature);
        double e = std::exp(z - double(mx));
        sum += e;
        weighted += e * z;
      }
      double lse = double(mx) + std::log(sum);
      lp[r] = float(double(load(base, logits.dtype, off + label[r]) / temperature) - lse);
      if (ent) ent[r] = float(lse - weighted / sum);
    }
  });
}

verlpp_error* rms_norm(const DLTensor* x_p, const DLTensor* w_p, float eps, DLTensor* out_p, verlpp_stream) {
  return sdk::guard("cpu_ref rms_norm", [&] {
    const DLTensor& x = checked(x_p, "x");
    const DLTensor& w = checked(w_p, "weight");
    DLTensor& out = const_cast<DLTensor&>(checked(out_p, "out"));
    require(x.ndim == 2, "x must be [N, D], got ndim " + std::to_string(x.ndim));
    int64_t n = x.shape[0], d = x.shape[1];
    require(w.ndim == 1 && w.shape[0] == d, "weight must be [D] with D = " + std::to_string(d));
    require(out.ndim == 2 && out.shape[0] == n && out.shape[1] == d, "out must have x's shape");
    require(is_float_dtype(x.dtype) && sdk::same_dtype(x.dtype, w.dtype) && sdk::same_dtype(x.dtype, out.dtype),
            "x, weight and out must share one float dtype");
    require(sdk::is_contiguous(x) && sdk::is_contiguous(w) && sdk::is_contiguous(out), "rms_norm needs contiguous tensors");
    require(eps >= 0.0f, "eps must be >= 0");
    require_host(x, "x");
    const void* xb = sdk::data_ptr(x);
    const void* wb = sdk::data_ptr(w);
    void* ob = sdk::data_ptr(out);
    for (int64_t r = 0; r < n; ++r) {
      double ss = 0.0;
      for (int64_t j = 0; j < d; ++j) {
        double v = load(xb, x.dtype, r * d + j);
        ss += v * v;
      }
      float inv = float(1.0 / std::sqrt(ss / double(d > 0 ? d : 1) + double(eps)));
      // As HF's RMSNorm: normalise in fp32, round to the input dtype, then scale by the weight.
      for (int64_t j = 0; j < d; ++j) {
        float normed = round_to(x.dtype, load(xb, x.dtype, r * d + j) * inv);
        store(ob, out.dtype, r * d + j, load(wb, w.dtype, j) * normed);
      }
    }
  });
}

}  // namespace

const verlpp_kernel_table* reference_kernels() {
  static const verlpp_kernel_table table = [] {
    verlpp_kernel_table t{};
    t.struct_size = sizeof(t);
    t.logprob_entropy = &logprob_entropy;
    t.rms_norm = &rms_norm;
    return t;
  }();
  return &table;
}

}  // namespace verlpp::cpu_ref
