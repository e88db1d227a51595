// Kernels of the SDK test plugin (sdk_test_plugin.cpp) for the conformance tests of vendor
// mistakes: a correct rms_norm, silu_mul and silu_mul_backward (host memory, plain loops, the
// SDK's argument checks and roundings), each mistake one define away:
//   TEST_SILU_NO_ROUNDING     silu_mul skips round(silu) before the product (one rounding, not two)
//   TEST_RMS_IGNORES_STRIDES  rms_norm reads x as dense whatever its strides say
//   TEST_RMS_NO_CHECKS        rms_norm checks none of its arguments
//   TEST_SILU_ALONE           silu_mul without silu_mul_backward
//   TEST_OLD_TABLE_SIZE       the table's struct_size is 1.0's (the plugin still says the current minor)
#pragma once

#include <verlpp/sdk/dlpack_util.hpp>
#include <verlpp/sdk/errors.hpp>
#include <verlpp/sdk/half_float.hpp>
#include <verlpp/sdk/kernel_args.hpp>
#include <verlpp/sdk/kernel_list.hpp>

#include <cmath>
#include <cstddef>

namespace test_plugin {

using verlpp::sdk::load_float;
using verlpp::sdk::round_to_dtype;
using verlpp::sdk::store_float;

inline float silu_of(float x) { return x / (1.0f + std::exp(-x)); }

struct Kernels {
  // out = weight * round(x * inv), inv = 1 / sqrt(mean(x^2) + eps), as HF's RMSNorm rounds.
  static verlpp_error* rms_norm(const DLTensor* x, const DLTensor* w, float eps, DLTensor* out, verlpp_stream) {
    return verlpp::sdk::guard("test rms_norm", [&] {
#if defined(TEST_RMS_NO_CHECKS) || defined(TEST_RMS_IGNORES_STRIDES)
    // Deliberately wrong: the shape is taken on trust; strides are never looked at.
#ifdef TEST_RMS_IGNORES_STRIDES
      verlpp::sdk::require(x && w && out && x->ndim == 2 && w->ndim == 1 && w->shape[0] == x->shape[1] &&
                               out->ndim == 2 && out->shape[0] == x->shape[0] && out->shape[1] == x->shape[1] &&
                               verlpp::sdk::same_dtype(x->dtype, w->dtype) &&
                               verlpp::sdk::same_dtype(x->dtype, out->dtype) && verlpp::sdk::is_float_dtype(x->dtype) &&
                               eps >= 0.0f,
                           "rms_norm: bad arguments");
#endif
      const int64_t n = x->shape[0], d = x->shape[1];
#else
      const verlpp::sdk::RmsNormArgs a = verlpp::sdk::check_rms_norm_args(x, w, eps, out);
      const int64_t n = a.n, d = a.d;
#endif
      const DLDataType t = x->dtype;
      const void *xb = verlpp::sdk::data_ptr(*x), *wb = verlpp::sdk::data_ptr(*w);
      void* ob = verlpp::sdk::data_ptr(*out);
      for (int64_t r = 0; r < n; ++r) {
        double ss = 0.0;
        for (int64_t j = 0; j < d; ++j) ss += double(load_float(xb, t, r * d + j)) * load_float(xb, t, r * d + j);
        const float inv = float(1.0 / std::sqrt(ss / double(d > 0 ? d : 1) + double(eps)));
        for (int64_t j = 0; j < d; ++j)
          store_float(ob, t, r * d + j, load_float(wb, t, j) * round_to_dtype(t, load_float(xb, t, r * d + j) * inv));
      }
    });
  }

  // out = round(round(silu(gate)) * up).
  static verlpp_error* silu_mul(const DLTensor* gate, const DLTensor* up, DLTensor* out, verlpp_stream) {
    return verlpp::sdk::guard("test silu_mul", [&] {
      const verlpp::sdk::SiluMulArgs a = verlpp::sdk::check_silu_mul_args({{gate, "gate"}, {up, "up"}, {out, "out"}});
      const DLDataType t = gate->dtype;
      const void *g = verlpp::sdk::data_ptr(*gate), *u = verlpp::sdk::data_ptr(*up);
      void* o = verlpp::sdk::data_ptr(*out);
      for (int64_t r = 0; r < a.n; ++r)
        for (int64_t j = 0; j < a.f; ++j) {
#ifdef TEST_SILU_NO_ROUNDING
          const float s = silu_of(load_float(g, t, r * a.row_strides[0] + j));  // deliberately wrong: not rounded
#else
          const float s = round_to_dtype(t, silu_of(load_float(g, t, r * a.row_strides[0] + j)));
#endif
          store_float(o, t, r * a.row_strides[2] + j, s * load_float(u, t, r * a.row_strides[1] + j));
        }
    });
  }

#ifndef TEST_SILU_ALONE
  // grad_up = round(grad_out * s); grad_gate = round(round(grad_out * up) * sig * (1 + gate * (1 - sig))).
  static verlpp_error* silu_mul_backward(const DLTensor* gate, const DLTensor* up, const DLTensor* grad_out,
                                         DLTensor* grad_gate, DLTensor* grad_up, verlpp_stream) {
    return verlpp::sdk::guard("test silu_mul_backward", [&] {
      const verlpp::sdk::SiluMulArgs a = verlpp::sdk::check_silu_mul_args(
          {{gate, "gate"}, {up, "up"}, {grad_out, "grad_out"}, {grad_gate, "grad_gate"}, {grad_up, "grad_up"}});
      const DLDataType t = gate->dtype;
      const void *g = verlpp::sdk::data_ptr(*gate), *u = verlpp::sdk::data_ptr(*up),
                 *dy = verlpp::sdk::data_ptr(*grad_out);
      void *dg = verlpp::sdk::data_ptr(*grad_gate), *du = verlpp::sdk::data_ptr(*grad_up);
      for (int64_t r = 0; r < a.n; ++r)
        for (int64_t j = 0; j < a.f; ++j) {
          const float x = load_float(g, t, r * a.row_strides[0] + j), upv = load_float(u, t, r * a.row_strides[1] + j);
          const float grad = load_float(dy, t, r * a.row_strides[2] + j);
          const float s = round_to_dtype(t, silu_of(x)), grad_s = round_to_dtype(t, grad * upv);
          const float sig = 1.0f / (1.0f + std::exp(-x));
          store_float(dg, t, r * a.row_strides[3] + j, grad_s * sig * (1.0f + x * (1.0f - sig)));
          store_float(du, t, r * a.row_strides[4] + j, grad * s);
        }
    });
  }
#endif
};

// The table, as the SDK fills it, with 1.0's struct_size under TEST_OLD_TABLE_SIZE.
inline const verlpp_kernel_table* kernel_table() {
  static const verlpp_kernel_table table = [] {
    verlpp_kernel_table t = verlpp::sdk::make_kernel_table<Kernels>();
#ifdef TEST_OLD_TABLE_SIZE
    t.struct_size = verlpp::sdk::kernel_table_size(0);  // deliberately wrong: 48 bytes from a current-minor plugin
#endif
    return t;
  }();
  return &table;
}

}  // namespace test_plugin
