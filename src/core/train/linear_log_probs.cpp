// linear_log_probs(): a torch::autograd::Function (see linear_log_probs.hpp). Its forward saves
// hidden, weight, targets and, per row, logsumexp(z) and (with entropy) E_p[z], and with
// LogitsInBackward::kKeep each chunk's logits h W^T in the weight's dtype; its backward takes
// those (or recomputes them: kRecompute, or a second backward through a retained graph, since
// the first one overwrites them) and forms dL/dz from z = (h W^T) / T:
//   d logp_i / dz_j = [j = target_i] - p_ij
//   d H_i / dz_j    = -p_ij (z_ij - E_p[z]_i)        (H = logsumexp(z) - sum_j p_ij z_ij)
// then dL/dh = (dL/dz / T) W and dL/dW = sum over chunks of (dL/dz / T)^T h, the latter summed by
// the GEMM itself (addmm). The custom Function needs full autograd headers, hence the #undef below.
//
// With a plugin's kernels (logprob_entropy and ABI 1.2's logprob_backward) a chunk's logits stay
// in the weight's dtype: the forward kernel reads them once for log-prob and entropy, and the
// backward kernel overwrites the recomputed logits with dL/dz in place. The LibTorch path makes
// an fp32 copy and about ten passes over it each way; on an H200 at 16 x 512 tokens that was
// ~20 ms of a 110 ms training step (Qwen2.5-0.5B shape).
#undef TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <verlpp/train/linear_log_probs.hpp>

#include "../ops/logprob.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/hw/kernels.hpp>

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/TensorOperators.h>

#include <algorithm>

namespace verlpp::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The dtype of the softmax math: fp32, or fp64 for an fp64 model (tests' exact references).
at::ScalarType math_dtype(const at::Tensor& w) { return w.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// z = raw / T in the math dtype, raw = h W^T in the weight's dtype (no pass for T == 1 when they
// share a dtype). Never writes `raw`: the forward may keep it for the backward.
at::Tensor math_logits(const at::Tensor& raw, const at::Tensor& w, double temperature) {
  at::Tensor z = raw.to(math_dtype(w));
  if (temperature != 1.0) z = z.is_same(raw) ? z.div(temperature) : z.div_(temperature);
  return z;
}

// Whether the plugin kernels serve these tensors: both entries offered, a dtype they take.
bool kernels_serve(const hw::Kernels* kernels, const at::Tensor& weight) {
  if (kernels == nullptr || !kernels->offers(hw::KernelId::logprob_entropy) ||
      !kernels->offers(hw::KernelId::logprob_backward))
    return false;
  const at::ScalarType t = weight.scalar_type();
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

// The plugin forward of one chunk: logits in the weight's dtype through logprob_entropy into
// logp (and entropy), then what the backward needs: lse = z_target - log p (so the kernel's own
// normaliser is reused) and E_p[z] = lse - entropy. Returns the logits [rows, V].
at::Tensor kernel_forward_chunk(const hw::Kernels& kernels, const at::Tensor& h, const at::Tensor& weight,
                                const at::Tensor& targets, double temperature, at::Tensor logp, at::Tensor entropy,
                                at::Tensor lse, at::Tensor mean_z) {
  const at::Tensor logits = at::linear(h, weight);  // [rows, V], contiguous
  ops::logprob_entropy(&kernels, logits, targets, temperature, logp, entropy);
  at::Tensor z_target = logits.gather(1, targets.unsqueeze(1)).squeeze(1).to(at::kFloat);
  if (temperature != 1.0) z_target.div_(temperature);
  at::sub_out(lse, z_target, logp);
  if (mean_z.defined()) at::sub_out(mean_z, lse, entropy);
  return logits;
}

// The plugin backward of one chunk: `logits` [rows, V] (kept or recomputed) overwritten with
// dL/dz / T.
at::Tensor kernel_backward_chunk(const hw::Kernels& kernels, at::Tensor logits, const at::Tensor& targets,
                                 double temperature, const at::Tensor& lse, const at::Tensor& g_logp,
                                 const at::Tensor& mean_z, const at::Tensor& g_ent) {
  ops::logprob_backward(&kernels, logits, targets, lse, g_logp, g_ent.defined() ? mean_z : at::Tensor(), g_ent,
                        temperature, logits);
  return logits;
}

// An [N] gradient as the kernels take it: fp32, contiguous (autograd may hand over an expanded one).
at::Tensor dense_f32(const at::Tensor& g) { return g.defined() ? g.to(at::kFloat).contiguous() : g; }

struct LinearLogProbsFn : torch::autograd::Function<LinearLogProbsFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                               const at::Tensor& targets, double temperature, bool with_entropy, int64_t chunk,
                               int64_t kernels_address, bool keep_logits) {
    const auto* kernels = reinterpret_cast<const hw::Kernels*>(kernels_address);
    c10::List<at::Tensor> kept;  // each chunk's h W^T, when keep_logits
    const int64_t n = hidden.size(0);
    auto f32 = hidden.options().dtype(math_dtype(weight));
    at::Tensor logp = at::empty({n}, f32), lse = at::empty({n}, f32);
    at::Tensor entropy = with_entropy ? at::empty({n}, f32) : at::Tensor();
    at::Tensor mean_z = with_entropy ? at::empty({n}, f32) : at::Tensor();
    for (int64_t begin = 0; begin < n; begin += chunk) {
      const int64_t rows = std::min(chunk, n - begin);
      if (kernels != nullptr) {
        at::Tensor raw = kernel_forward_chunk(
            *kernels, hidden.narrow(0, begin, rows), weight, targets.narrow(0, begin, rows), temperature,
            logp.narrow(0, begin, rows), with_entropy ? entropy.narrow(0, begin, rows) : at::Tensor(),
            lse.narrow(0, begin, rows), with_entropy ? mean_z.narrow(0, begin, rows) : at::Tensor());
        if (keep_logits) kept.push_back(raw);
        continue;
      }
      const at::Tensor raw = at::linear(hidden.narrow(0, begin, rows), weight);  // [rows, V], weight's dtype
      if (keep_logits) kept.push_back(raw);
      at::Tensor z = math_logits(raw, weight, temperature);  // [rows, V]
      at::Tensor lse_c;                                      // [rows]
      if (!with_entropy) {
        lse_c = at::logsumexp(z, -1);
      } else {
        // entropy = logsumexp(z) - E_p[z] (verl's entropy_from_logits), with one exp pass for
        // both: m = max z, e = exp(z - m), s = sum e, logsumexp = m + log s (logsumexp's own
        // steps: the same bits), E_p[z] = sum(e z) / s. A softmax, a product and a sum on top of
        // logsumexp made about 14 passes over the chunk's logits; this makes 10, and dividing by
        // s once after the sum is also closer to the fp64 value (at 64 x 151,936 on the CPU:
        // 84 ms instead of 157, max entropy error 2.5e-6 instead of 3.6e-4).
        const at::Tensor m = at::amax(z, {-1}, /*keepdim=*/true);  // [rows, 1]
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
    ctx->saved_data["kernels"] = kernels_address;
    // In saved_data, not save_for_backward: the backward drops each chunk once it is used (and
    // writes dL/dz over it), which saved variables would not allow.
    if (keep_logits) ctx->saved_data["logits"] = kept;
    return {logp, with_entropy ? entropy : at::zeros({0}, f32)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor &hidden = saved[0], &weight = saved[1], &targets = saved[2], &lse = saved[3], &mean_z = saved[4];
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const auto* kernels = reinterpret_cast<const hw::Kernels*>(ctx->saved_data["kernels"].toInt());
    const at::Tensor g_logp = kernels != nullptr ? dense_f32(grads[0]) : grads[0];
    at::Tensor g_ent = mean_z.defined() && grads[1].defined() && grads[1].numel() > 0 ? grads[1] : at::Tensor();
    if (kernels != nullptr) g_ent = dense_f32(g_ent);
    const bool need_h = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    if (!g_logp.defined() && !g_ent.defined()) return variable_list(8);
    // The kept logits, taken out of the context: this backward overwrites and frees them, so a
    // second backward through a retained graph finds none and recomputes.
    std::vector<at::Tensor> kept;
    if (auto it = ctx->saved_data.find("logits"); it != ctx->saved_data.end()) {
      kept = it->second.toTensorList().vec();
      ctx->saved_data.erase(it);
    }
    const int64_t n = hidden.size(0);
    at::Tensor grad_h = need_h ? at::empty_like(hidden) : at::Tensor();
    // dL/dW in the weight's dtype, summed over chunks in the GEMM's epilogue (fp32 inside,
    // rounded once per chunk). A separate fp32 sum cost a zero fill, an add per chunk and a
    // final cast over [V, C] (about 2.5 ms a step for Qwen2.5-0.5B on an H200) for the same
    // number of roundings to a 16-bit dtype.
    at::Tensor grad_w = need_w ? at::empty(weight.sizes(), weight.options()) : at::Tensor();
    for (int64_t begin = 0, index = 0; begin < n; begin += chunk, ++index) {
      const int64_t rows = std::min(chunk, n - begin);
      at::Tensor h = hidden.narrow(0, begin, rows);
      // h W^T [rows, V] in the weight's dtype: the forward's, or recomputed.
      at::Tensor raw = size_t(index) < kept.size() ? std::move(kept[size_t(index)]) : at::linear(h, weight);
      at::Tensor gl;  // dL/dlogits in the product's dtype [rows, V]
      auto slice = [&](const at::Tensor& t) { return t.defined() ? t.narrow(0, begin, rows) : t; };
      if (kernels != nullptr) {
        gl = kernel_backward_chunk(*kernels, std::move(raw), targets.narrow(0, begin, rows), temperature, slice(lse),
                                   slice(g_logp), slice(mean_z), slice(g_ent));
      } else if (g_ent.defined()) {
        // May be raw itself (fp32, T = 1), written in place below: this backward holds the only
        // reference to it (kept logits were moved out of the context).
        at::Tensor z = math_logits(raw, weight, temperature);
        raw = at::Tensor();
        at::Tensor p = z.sub(lse.narrow(0, begin, rows).unsqueeze(1)).exp_();  // softmax(z), from the saved lse
        // -p (g_logp + g_ent (z - E_p[z])), then + g_logp at the target.
        at::Tensor gz =
            z.sub_(mean_z.narrow(0, begin, rows).unsqueeze(1)).mul_(g_ent.narrow(0, begin, rows).unsqueeze(1));
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
        at::Tensor p = temperature == 1.0 ? at::softmax(raw, -1, math_dtype(weight))
                                          : at::softmax(math_logits(raw, weight, temperature), -1);
        raw = at::Tensor();  // the softmax is a new tensor: the logits can go
        p.scatter_add_(1, targets.narrow(0, begin, rows).unsqueeze(1), at::full({rows, 1}, -1.0, p.options()));
        at::Tensor scale = g_logp.narrow(0, begin, rows).unsqueeze(1).neg();
        if (temperature != 1.0) scale = scale.div(temperature);
        gl = at::empty(p.sizes(), p.options().dtype(weight.scalar_type()));
        at::mul_out(gl, p, scale);
      }
      if (need_h) {
        at::Tensor rows_out = grad_h.narrow(0, begin, rows);  // contiguous: the product lands in place
        at::mm_out(rows_out, gl, weight);
      }
      if (need_w) {
        if (begin == 0)
          at::mm_out(grad_w, gl.t(), h);
        else
          grad_w.addmm_(gl.t(), h);
      }
    }
    return {grad_h, grad_w, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

LinearLogProbs linear_log_probs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                double temperature, bool with_entropy, int64_t chunk_tokens, const hw::Kernels* kernels,
                                LogitsInBackward logits) {
  VERLPP_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
               "linear_log_probs: hidden [N, C] and weight [V, C] expected, got {} and {} dims (C {} vs {})",
               hidden.dim(), weight.dim(), hidden.dim() == 2 ? hidden.size(1) : -1,
               weight.dim() == 2 ? weight.size(1) : -1);
  VERLPP_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0) && targets.scalar_type() == at::kLong,
               "linear_log_probs: targets must be int64 [N = {}]", hidden.size(0));
  VERLPP_CHECK(hidden.scalar_type() == weight.scalar_type(), "linear_log_probs: hidden is {} but weight is {}",
               c10::toString(hidden.scalar_type()), c10::toString(weight.scalar_type()));
  VERLPP_CHECK(temperature > 0, "linear_log_probs: temperature {} must be > 0", temperature);
  VERLPP_CHECK(chunk_tokens >= 1, "linear_log_probs: chunk_tokens {} must be >= 1", chunk_tokens);
  // The autograd context keeps the kernels as an address (saved_data holds IValues); the caller
  // keeps the Kernels object alive across the backward, as it keeps its plugin loaded.
  const hw::Kernels* used = kernels_serve(kernels, weight) ? kernels : nullptr;
  // Kept only where a backward will come: a no-grad pass (old log-probs, the reference) over a
  // whole batch would otherwise hold every chunk's logits until it returns.
  const bool keep = logits == LogitsInBackward::kKeep && at::GradMode::is_enabled() &&
                    (hidden.requires_grad() || weight.requires_grad());
  variable_list out =
      LinearLogProbsFn::apply(hidden, weight, targets.contiguous(), temperature, with_entropy, chunk_tokens,
                              static_cast<int64_t>(reinterpret_cast<intptr_t>(used)), keep);
  LinearLogProbs result;
  result.log_probs = out[0];
  result.used_kernels = used != nullptr;
  if (with_entropy) result.entropy = out[1];
  return result;
}

}  // namespace verlpp::train
