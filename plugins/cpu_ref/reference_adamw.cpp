// cpu_ref: ABI 1.4's adamw_update as a plain loop, element by element in the order plugin_abi.h
// writes the update (fp32 math, the scalars from the SDK's set_adamw_scalars, no fused
// multiply-add: this file is compiled with -ffp-contract=off like the other reference kernels).
#include "reference_kernels.hpp"
#include "half_float.hpp"

#include <verlpp/sdk/adamw_args.hpp>

#include <cmath>

namespace verlpp::cpu_ref {

verlpp_error* ReferenceKernels::adamw_update(int32_t count, DLTensor* const* params, const DLTensor* const* grads,
                                             DLTensor* const* exp_avg, DLTensor* const* exp_avg_sq,
                                             DLTensor* const* copies, const verlpp_adamw_options* options,
                                             const DLTensor* grad_scale, verlpp_stream) {
  return sdk::guard("cpu_ref adamw_update", [&] {
    const sdk::AdamwArgs a =
        sdk::check_adamw_update_args(count, params, grads, exp_avg, exp_avg_sq, copies, options, grad_scale);
    if (grad_scale != nullptr) require_host(*grad_scale, "grad_scale");
    for (int32_t t = 0; t < count; ++t) {
      for (const DLTensor* x : {static_cast<const DLTensor*>(params[t]), grads[t],
                                static_cast<const DLTensor*>(exp_avg[t]), static_cast<const DLTensor*>(exp_avg_sq[t])})
        require_host(*x, "every adamw_update tensor");
      if (copies != nullptr) require_host(*copies[t], "every adamw_update tensor");
    }
    const float scale = grad_scale != nullptr ? *static_cast<const float*>(sdk::data_ptr(*grad_scale)) : 1.0f;
    if (!std::isfinite(scale)) return;  // the step is skipped: nothing written
    for (int32_t t = 0; t < count; ++t) {
      float* p = static_cast<float*>(sdk::data_ptr(*params[t]));
      float* m = static_cast<float*>(sdk::data_ptr(*exp_avg[t]));
      float* v = static_cast<float*>(sdk::data_ptr(*exp_avg_sq[t]));
      const void* g = sdk::data_ptr(*grads[t]);
      void* c = copies != nullptr ? sdk::data_ptr(*copies[t]) : nullptr;
      for (int64_t i = 0; i < a.numels[size_t(t)]; ++i) {
        const float grad = load(g, a.grad_dtype, i) * scale;
        float w = p[i];
        w = w - a.weight_decay_factor * w;
        const float mi = m[i] + a.one_minus_beta1 * (grad - m[i]);
        const float vi = a.beta2 * v[i] + a.one_minus_beta2 * grad * grad;
        w = w - a.step_size * mi / (std::sqrt(vi) / a.bias_correction2_sqrt + a.eps);
        p[i] = w;
        m[i] = mi;
        v[i] = vi;
        if (c != nullptr) store(c, a.copy_dtype, i, w);
      }
    }
  });
}

}  // namespace verlpp::cpu_ref
