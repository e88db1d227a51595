// Plugin SDK: the argument rules of ABI 1.4's adamw_update (plugin_abi.h), checked the same way
// by every plugin. Like kernel_args.hpp, only what the ABI says is checked here; where the
// tensors live stays with the plugin. Failures throw INVALID_ARGUMENT naming the tensor and its
// index in the lists ("grads[17]").
#pragma once

#include <verlpp/sdk/kernel_args.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <tuple>
#include <vector>

namespace verlpp::sdk {

// adamw_update's operands once its rules hold, and its scalars as the kernels use them.
struct AdamwArgs {
  int32_t count = 0;
  DLDataType grad_dtype{};
  bool has_copies = false;
  DLDataType copy_dtype{};
  std::vector<int64_t> numels;  // per tensor
  // The fp32 scalars of the update, computed in double and rounded once (plugin_abi.h).
  float lr = 0, weight_decay_factor = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;
  float step_size = 0;              // lr / (1 - beta1^step)
  float bias_correction2_sqrt = 0;  // sqrt(1 - beta2^step)
  float eps = 0;
};

// The fp32 scalars of an update with these options (shared by every plugin so that each rounds
// them alike).
inline void set_adamw_scalars(const verlpp_adamw_options& o, AdamwArgs& a) {
  const double step = double(o.step);
  a.lr = float(o.lr);
  a.weight_decay_factor = float(o.lr * o.weight_decay);
  a.one_minus_beta1 = float(1.0 - o.beta1);
  a.beta2 = float(o.beta2);
  a.one_minus_beta2 = float(1.0 - o.beta2);
  a.step_size = float(o.lr / (1.0 - std::pow(o.beta1, step)));
  a.bias_correction2_sqrt = float(std::sqrt(1.0 - std::pow(o.beta2, step)));
  a.eps = float(o.eps);
}

// adamw_update's rules (plugin_abi.h): the options complete and in range; the lists non-NULL
// where count > 0 (copies may be NULL); params, exp_avg, exp_avg_sq f32 and contiguous; grads and
// copies of the param's shape, contiguous, each list of one f32/bf16/f16 dtype; no written tensor
// sharing a byte with another written tensor or with a grad; grad_scale NULL or f32 [1].
inline AdamwArgs check_adamw_update_args(int32_t count, DLTensor* const* params, const DLTensor* const* grads,
                                         DLTensor* const* exp_avg, DLTensor* const* exp_avg_sq, DLTensor* const* copies,
                                         const verlpp_adamw_options* options, const DLTensor* grad_scale) {
  AdamwArgs a;
  require(count >= 0, "count must be >= 0, got " + std::to_string(count));
  require(options != nullptr, "options is NULL");
  require(options->struct_size >= offsetof(verlpp_adamw_options, step) + sizeof(int64_t),
          "options.struct_size " + std::to_string(options->struct_size) +
              " is smaller than ABI 1.4's verlpp_adamw_options (" + std::to_string(sizeof(verlpp_adamw_options)) + ")");
  const verlpp_adamw_options& o = *options;
  require(std::isfinite(o.lr) && o.lr >= 0.0, "options.lr must be finite and >= 0, got " + std::to_string(o.lr));
  require(o.beta1 >= 0.0 && o.beta1 < 1.0, "options.beta1 must be in [0, 1), got " + std::to_string(o.beta1));
  require(o.beta2 >= 0.0 && o.beta2 < 1.0, "options.beta2 must be in [0, 1), got " + std::to_string(o.beta2));
  require(std::isfinite(o.eps) && o.eps > 0.0, "options.eps must be finite and > 0, got " + std::to_string(o.eps));
  require(std::isfinite(o.weight_decay) && o.weight_decay >= 0.0,
          "options.weight_decay must be finite and >= 0, got " + std::to_string(o.weight_decay));
  require(o.step >= 1,
          "options.step must be >= 1 (the number of the update being made), got " + std::to_string(o.step));
  set_adamw_scalars(o, a);
  a.count = count;
  a.has_copies = copies != nullptr;
  if (grad_scale != nullptr) {
    const DLTensor& s = checked(grad_scale, "grad_scale");
    require(is_f32(s.dtype) && numel(s) == 1, "grad_scale must be f32 with one element, got " + dtype_name(s.dtype) +
                                                  " with " + std::to_string(numel(s)));
  }
  if (count == 0) return a;
  require(params != nullptr && grads != nullptr && exp_avg != nullptr && exp_avg_sq != nullptr,
          "params, grads, exp_avg and exp_avg_sq must be arrays of count = " + std::to_string(count) + " tensors");
  auto named = [](const char* list, int32_t i) { return std::string(list) + "[" + std::to_string(i) + "]"; };
  // Byte spans of every written tensor and every grad: (device type, device id, begin, end, name, written).
  using Span = std::tuple<int32_t, int32_t, uintptr_t, uintptr_t, std::string, bool>;
  std::vector<Span> spans;
  auto add_span = [&](const DLTensor& t, const std::string& name, bool written) {
    const ByteSpan b = byte_span(t);
    if (b.begin < b.end)
      spans.emplace_back(int32_t(t.device.device_type), t.device.device_id, b.begin, b.end, name, written);
  };
  a.numels.reserve(size_t(count));
  for (int32_t i = 0; i < count; ++i) {
    const DLTensor& p = checked(params[i], named("params", i).c_str());
    require(is_f32(p.dtype), named("params", i) + " dtype " + dtype_name(p.dtype) + " is not f32 (the master weights)");
    require_contiguous(p, named("params", i));
    auto same_shape = [&](const DLTensor& t, const std::string& what) {
      bool same = t.ndim == p.ndim;
      for (int d = 0; same && d < p.ndim; ++d) same = t.shape[d] == p.shape[d];
      require(same, what + " must have params[" + std::to_string(i) + "]'s shape");
      require_contiguous(t, what);
    };
    const DLTensor& m = checked(exp_avg[i], named("exp_avg", i).c_str());
    const DLTensor& v = checked(exp_avg_sq[i], named("exp_avg_sq", i).c_str());
    const DLTensor& g = checked(grads[i], named("grads", i).c_str());
    for (const auto& [t, what] :
         {std::pair<const DLTensor*, std::string>{&m, named("exp_avg", i)}, {&v, named("exp_avg_sq", i)}}) {
      require(is_f32(t->dtype), what + " dtype " + dtype_name(t->dtype) + " is not f32");
      same_shape(*t, what);
    }
    same_shape(g, named("grads", i));
    if (i == 0) {
      require(is_float_dtype(g.dtype), "grads[0] dtype " + dtype_name(g.dtype) + " is not f32/bf16/f16");
      a.grad_dtype = g.dtype;
    }
    require_dtype_of(g, named("grads", i).c_str(), *grads[0], "grads[0]");
    add_span(p, named("params", i), true);
    add_span(m, named("exp_avg", i), true);
    add_span(v, named("exp_avg_sq", i), true);
    add_span(g, named("grads", i), false);
    if (a.has_copies) {
      const DLTensor& c = checked(copies[i], named("copies", i).c_str());
      same_shape(c, named("copies", i));
      if (i == 0) {
        require(is_float_dtype(c.dtype), "copies[0] dtype " + dtype_name(c.dtype) + " is not f32/bf16/f16");
        a.copy_dtype = c.dtype;
      }
      require_dtype_of(c, named("copies", i).c_str(), *copies[0], "copies[0]");
      add_span(c, named("copies", i), true);
    }
    a.numels.push_back(numel(p));
  }
  // Sorted by device and start, a written tensor overlaps something iff it overlaps a span that
  // starts before its end among its successors; grads may overlap each other (they are only read).
  std::sort(spans.begin(), spans.end());
  for (size_t i = 0; i < spans.size(); ++i)
    for (size_t j = i + 1; j < spans.size(); ++j) {
      const Span &x = spans[i], &y = spans[j];
      if (std::get<0>(y) != std::get<0>(x) || std::get<1>(y) != std::get<1>(x) || std::get<2>(y) >= std::get<3>(x))
        break;
      require(!std::get<5>(x) && !std::get<5>(y),
              std::get<4>(x) + " and " + std::get<4>(y) + " share memory (a written tensor must overlap nothing)");
    }
  return a;
}

}  // namespace verlpp::sdk
