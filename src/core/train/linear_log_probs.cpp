// linear_log_probs(): a torch::autograd::Function (see linear_log_probs.hpp). Its forward saves
// hidden, weight, targets and, per row, logsumexp(z) and (with entropy) E_p[z]; its backward
// recomputes each chunk's z = (h W^T) / T and forms dL/dz from them:
//   d logp_i / dz_j = [j = target_i] - p_ij
//   d H_i / dz_j    = -p_ij (z_ij - E_p[z]_i)        (H = logsumexp(z) - sum_j p_ij z_ij)
// then dL/dh = (dL/dz / T) W and dL/dW = sum over chunks of (dL/dz / T)^T h, the latter summed in
// fp32. The custom Function needs full autograd headers, hence the #undef below.
#undef TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <verlpp/train/linear_log_probs.hpp>

#include <verlpp/core/error.hpp>

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/TensorOperators.h>

#include <algorithm>

namespace verlpp::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The dtype of the softmax math: fp32, or fp64 for an fp64 model (tests' exact references).
at::ScalarType math_dtype(const at::Tensor& w) { return w.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// z = (h W^T) in the math dtype, divided by T unless T == 1 (no pass for the common case).
at::Tensor chunk_logits(const at::Tensor& h, const at::Tensor& w, double temperature) {
  at::Tensor z = at::linear(h, w).to(math_dtype(w));
  if (temperature != 1.0) z.div_(temperature);
  return z;
}

struct LinearLogProbsFn : torch::autograd::Function<LinearLogProbsFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                               const at::Tensor& targets, double temperature, bool with_entropy, int64_t chunk) {
    const int64_t n = hidden.size(0);
    auto f32 = hidden.options().dtype(math_dtype(weight));
    at::Tensor logp = at::empty({n}, f32), lse = at::empty({n}, f32);
    at::Tensor entropy = with_entropy ? at::empty({n}, f32) : at::Tensor();
    at::Tensor mean_z = with_entropy ? at::empty({n}, f32) : at::Tensor();
    for (int64_t begin = 0; begin < n; begin += chunk) {
      const int64_t rows = std::min(chunk, n - begin);
      at::Tensor z = chunk_logits(hidden.narrow(0, begin, rows), weight, temperature);       // [rows, V]
      at::Tensor lse_c;                                                                      // [rows]
      if (!with_entropy) {
        lse_c = at::logsumexp(z, -1);
      } else {
        // entropy = logsumexp(z) - E_p[z] (verl's entropy_from_logits), with one exp pass for
        // both: m = max z, e = exp(z - m), s = sum e, logsumexp = m + log s (logsumexp's own
        // steps: the same bits), E_p[z] = sum(e z) / s. A softmax, a product and a sum on top of
        // logsumexp made about 14 passes over the chunk's logits; this makes 10, and dividing by
        // s once after the sum is also closer to the fp64 value (at 64 x 151,936 on the CPU:
        // 84 ms instead of 157, max entropy error 2.5e-6 instead of 3.6e-4).
        const at::Tensor m = at::amax(z, {-1}, /*keepdim=*/true);                            // [rows, 1]
        at::Tensor e = z.sub(m).exp_();
        const at::Tensor sum_e = e.sum(-1);
        lse_c = sum_e.log().add_(m.squeeze(1));
        const at::Tensor ez = e.mul_(z).sum(-1).div_(sum_e);
        mean_z.narrow(0, begin, rows).copy_(ez);
        entropy.narrow(0, begin, rows).copy_(lse_c - ez);
      }
      at::Tensor z_t = z.gather(1, targets.narrow(0, begin, rows).unsqueeze(1)).squeeze(1);  // [rows]
      lse.narrow(0, begin, rows).copy_(lse_c);
      logp.narrow(0, begin, rows).copy_(z_t - lse_c);
    }
    ctx->save_for_backward({hidden, weight, targets, lse, mean_z});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk"] = chunk;
    return {logp, with_entropy ? entropy : at::zeros({0}, f32)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor &hidden = saved[0], &weight = saved[1], &targets = saved[2], &lse = saved[3], &mean_z = saved[4];
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const at::Tensor& g_logp = grads[0];
    const at::Tensor g_ent = mean_z.defined() && grads[1].defined() && grads[1].numel() > 0 ? grads[1] : at::Tensor();
    const bool need_h = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    if (!g_logp.defined() && !g_ent.defined()) return variable_list(6);
    const int64_t n = hidden.size(0);
    at::Tensor grad_h = need_h ? at::empty_like(hidden) : at::Tensor();
    at::Tensor grad_w = need_w ? at::zeros(weight.sizes(), weight.options().dtype(math_dtype(weight))) : at::Tensor();
    for (int64_t begin = 0; begin < n; begin += chunk) {
      const int64_t rows = std::min(chunk, n - begin);
      at::Tensor h = hidden.narrow(0, begin, rows);
      at::Tensor gl;  // dL/dlogits in the product's dtype [rows, V]
      if (g_ent.defined()) {
        at::Tensor z = chunk_logits(h, weight, temperature);
        at::Tensor p = z.sub(lse.narrow(0, begin, rows).unsqueeze(1)).exp_();  // softmax(z), from the saved lse
        // -p (g_logp + g_ent (z - E_p[z])), then + g_logp at the target.
        at::Tensor gz = z.sub_(mean_z.narrow(0, begin, rows).unsqueeze(1)).mul_(g_ent.narrow(0, begin, rows).unsqueeze(1));
        if (g_logp.defined()) gz.add_(g_logp.narrow(0, begin, rows).unsqueeze(1));
        gz.mul_(p).neg_();
        if (g_logp.defined())
          gz.scatter_add_(1, targets.narrow(0, begin, rows).unsqueeze(1), g_logp.narrow(0, begin, rows).unsqueeze(1));
        if (temperature != 1.0) gz.div_(temperature);
        gl = gz.to(weight.scalar_type());
      } else {
        // Log-probs only (the policy loss): dL/dz = g (onehot - p) = (p - onehot) * (-g), formed in
        // three passes over the chunk: softmax (read z, write fp32 p), the onehot subtraction
        // (a scatter), and one multiply that writes the product's dtype.
        at::Tensor p = temperature == 1.0 ? at::softmax(at::linear(h, weight), -1, math_dtype(weight))
                                          : at::softmax(chunk_logits(h, weight, temperature), -1);
        p.scatter_add_(1, targets.narrow(0, begin, rows).unsqueeze(1), at::full({rows, 1}, -1.0, p.options()));
        at::Tensor scale = g_logp.narrow(0, begin, rows).unsqueeze(1).neg();
        if (temperature != 1.0) scale = scale.div(temperature);
        gl = at::empty(p.sizes(), p.options().dtype(weight.scalar_type()));
        at::mul_out(gl, p, scale);
      }
      if (need_h) grad_h.narrow(0, begin, rows).copy_(at::mm(gl, weight));
      if (need_w) grad_w.add_(at::mm(gl.t(), h));
    }
    return {grad_h, need_w ? grad_w.to(weight.scalar_type()) : at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

LinearLogProbs linear_log_probs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                double temperature, bool with_entropy, int64_t chunk_tokens) {
  VERLPP_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
               "linear_log_probs: hidden [N, C] and weight [V, C] expected, got {} and {} dims (C {} vs {})", hidden.dim(),
               weight.dim(), hidden.dim() == 2 ? hidden.size(1) : -1, weight.dim() == 2 ? weight.size(1) : -1);
  VERLPP_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0) && targets.scalar_type() == at::kLong,
               "linear_log_probs: targets must be int64 [N = {}]", hidden.size(0));
  VERLPP_CHECK(hidden.scalar_type() == weight.scalar_type(), "linear_log_probs: hidden is {} but weight is {}",
               c10::toString(hidden.scalar_type()), c10::toString(weight.scalar_type()));
  VERLPP_CHECK(temperature > 0, "linear_log_probs: temperature {} must be > 0", temperature);
  VERLPP_CHECK(chunk_tokens >= 1, "linear_log_probs: chunk_tokens {} must be >= 1", chunk_tokens);
  variable_list out = LinearLogProbsFn::apply(hidden, weight, targets, temperature, with_entropy, chunk_tokens);
  LinearLogProbs result;
  result.log_probs = out[0];
  if (with_entropy) result.entropy = out[1];
  return result;
}

}  // namespace verlpp::train
