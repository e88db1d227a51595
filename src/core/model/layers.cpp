// RMSNorm, RoPE and attention, each computed in the same order of operations as HF transformers
// (see layers.hpp), because fp32 parity to 1e-4 with HF is a stated goal. The llama3 scaling
// follows Meta's published recipe: long wavelengths divided by `factor`, short ones kept, the
// band between blended linearly in 1/wavelength.
#include <verlpp/model/layers.hpp>

#include <verlpp/core/error.hpp>

#include "shape_string.hpp"

#include <ATen/TensorOperators.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/where.h>

#include <cmath>

// LibTorch's fused scaled_dot_product_attention (flash / memory-efficient kernels) exists from
// 2.0; its `scale` argument from 2.1. Debian's LibTorch 1.13 has neither.
#if __has_include(<torch/version.h>) && __has_include(<ATen/ops/scaled_dot_product_attention.h>)
#include <torch/version.h>
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#include <ATen/ops/scaled_dot_product_attention.h>
#define VERLPP_HAVE_SDPA 1
#endif
// K/V with fewer heads than q taken as they are (enable_gqa), from 2.5; _fused_sdp_choice says
// which kernel a call would run.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#include <ATen/ops/_fused_sdp_choice.h>
#define VERLPP_HAVE_SDPA_GQA 1
#endif
#endif

// at::rms_norm exists from LibTorch 2.4 (not in Debian's 1.13).
#if __has_include(<ATen/ops/rms_norm.h>)
#include <ATen/ops/rms_norm.h>
#define VERLPP_HAVE_RMS_NORM_OP 1
#endif

namespace verlpp::model {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
#ifdef VERLPP_HAVE_RMS_NORM_OP
  // 16-bit: LibTorch's own op (a fused kernel on CUDA in recent LibTorch, forward and backward),
  // fp32 math inside; it rounds once after the weight multiply where HF rounds before it too.
  if ((x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf) && weight.scalar_type() == x.scalar_type())
    return at::rms_norm(x, {x.size(-1)}, weight, eps);
#endif
  at::Tensor h = x.to(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);  // fp64 only in tests
  at::Tensor variance = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * at::rsqrt(variance + eps);
  return weight * h.to(x.scalar_type());
}

at::Tensor rope_inv_freq(const ModelConfig& c, c10::Device device) {
  const int64_t dim = c.head_dim;
  at::Tensor exponents =
      at::arange(0, dim, 2, at::TensorOptions().dtype(at::kLong).device(device)).to(at::kFloat) / double(dim);
  at::Tensor inv_freq = 1.0 / at::pow(c.rope_theta, exponents);
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeType::kLinear) return inv_freq / s.factor;
  if (s.type != RopeType::kLlama3) return inv_freq;

  const double old_len = double(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_len / s.low_freq_factor;    // longer than this: scaled
  const double high_freq_wavelen = old_len / s.high_freq_factor;  // shorter than this: kept
  at::Tensor wavelen = (2.0 * M_PI) / inv_freq;
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  at::Tensor smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  at::Tensor blended = (1 - smooth) * scaled / s.factor + smooth * scaled;
  at::Tensor is_medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return at::where(is_medium, blended, scaled);
}

std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& inv_freq, const at::Tensor& position_ids,
                                               at::ScalarType dtype) {
  at::Tensor freqs = position_ids.to(at::kFloat).unsqueeze(-1) * inv_freq;  // [..., D/2]
  at::Tensor angles = at::cat({freqs, freqs}, -1);                          // [..., D]
  return {angles.cos().to(dtype), angles.sin().to(dtype)};
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos.unsqueeze(-2) + rotated * sin.unsqueeze(-2);
}

namespace {

// [B, T, KV, D] -> [B, H, T, D]: each kv head repeated for its group of query heads.
at::Tensor heads_first(const at::Tensor& t, int64_t heads) {
  const int64_t B = t.size(0), T = t.size(1), KV = t.size(2), D = t.size(3), group = heads / KV;
  at::Tensor th = t.transpose(1, 2);
  if (group == 1) return th;
  return th.unsqueeze(2).expand({B, KV, group, T, D}).reshape({B, heads, T, D});
}

void check_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  VERLPP_CHECK(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes() && k.size(0) == q.size(0) &&
                   k.size(3) == q.size(3) && q.size(2) % k.size(2) == 0,
               "attention: q {} and k/v {} / {} do not fit [B, T, H, D] with H a multiple of KV",
               shape_string(q.sizes()), shape_string(k.sizes()), shape_string(v.sizes()));
}

bool fused_dtype(const at::Tensor& q) {
#ifdef VERLPP_HAVE_SDPA
  return q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf;
#else
  (void)q;
  return false;
#endif
}

#ifdef VERLPP_HAVE_SDPA_GQA
// Whether SDPA would run these [B, heads, T, D] operands, K/V with fewer heads than q, on a fused
// kernel with enable_gqa (flash and cuDNN read each K/V head once for its whole query group;
// otherwise the math fallback would materialise the scores, and the caller repeats K/V instead).
// AttentionOptions::sdpa_gqa = false turns it off, for side-by-side timing.
bool fused_gqa(const at::Tensor& qh, const at::Tensor& kh, const at::Tensor& vh, const c10::optional<at::Tensor>& mask,
               bool causal, double scale, const AttentionOptions& options) {
  if (!options.sdpa_gqa) return false;
  constexpr int64_t kMathBackend = 0;  // sdp::SDPBackend::math
  return at::_fused_sdp_choice(qh, kh, vh, mask, 0.0, causal, scale, /*enable_gqa=*/true) != kMathBackend;
}
#endif

// LibTorch's SDPA on [B, H, T, D] views; `mask` [B|1, 1, Tq, Tk] bool or undefined. K/V with
// fewer heads go in as they are where a fused kernel takes them (LibTorch 2.5+), else repeated
// for their query groups (two [B, H, T, D] copies forward, two group sums backward).
at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                           bool causal, double scale, const AttentionOptions& options) {
#ifdef VERLPP_HAVE_SDPA
  const int64_t H = q.size(2);
  const at::Tensor qh = q.transpose(1, 2);
  const c10::optional<at::Tensor> m = mask.defined() ? c10::optional<at::Tensor>(mask) : c10::nullopt;
#ifdef VERLPP_HAVE_SDPA_GQA
  if (k.size(2) != H) {
    const at::Tensor kh = k.transpose(1, 2), vh = v.transpose(1, 2);
    if (fused_gqa(qh, kh, vh, m, causal, scale, options))
      return at::scaled_dot_product_attention(qh, kh, vh, m, 0.0, causal, scale, /*enable_gqa=*/true).transpose(1, 2);
  }
#endif
  at::Tensor out = at::scaled_dot_product_attention(qh, heads_first(k, H), heads_first(v, H), m, 0.0, causal, scale);
  return out.transpose(1, 2);  // [B, Tq, H, D]
#else
  (void)q, (void)k, (void)v, (void)mask, (void)causal, (void)scale, (void)options;
  throw Error("attention", "this LibTorch has no fused scaled_dot_product_attention");
#endif
}

}  // namespace

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& allowed,
                     double scale, const AttentionOptions& options) {
  check_qkv(q, k, v);
  const int64_t Tq = q.size(1), H = q.size(2);
  const int64_t Tk = k.size(1);
  if (allowed.defined())
    VERLPP_CHECK(allowed.dim() == 3 && allowed.size(1) == Tq && allowed.size(2) == Tk,
                 "attention: mask {} does not fit [B, {}, {}]", shape_string(allowed.sizes()), Tq, Tk);
  if (fused_dtype(q))
    return fused_attention(q, k, v, allowed.defined() ? allowed.unsqueeze(1) : at::Tensor(), false, scale, options);
  at::Tensor qh = q.transpose(1, 2);  // [B, H, Tq, D]
  at::Tensor kh = heads_first(k, H), vh = heads_first(v, H);
  at::Tensor scores = at::matmul(qh, kh.transpose(2, 3)) * scale;  // [B, H, Tq, Tk]
  if (allowed.defined())
    scores = scores.masked_fill(allowed.logical_not().unsqueeze(1), -std::numeric_limits<double>::infinity());
  at::Tensor probs =
      at::softmax(scores, -1, q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat).to(q.scalar_type());
  return at::matmul(probs, vh).transpose(1, 2);  // [B, Tq, H, D]
}

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                            const AttentionOptions& options) {
  check_qkv(q, k, v);
  VERLPP_CHECK(q.size(1) == k.size(1), "causal_attention: {} queries but {} keys", q.size(1), k.size(1));
  if (fused_dtype(q)) return fused_attention(q, k, v, at::Tensor(), true, scale, options);
  return attention(q, k, v, causal_mask(q.size(1), k.size(1), q.device()).unsqueeze(0), scale, options);
}

at::Tensor causal_mask(int64_t tq, int64_t tk, c10::Device device) {
  auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor qpos = at::arange(tq, opts).unsqueeze(1) + (tk - tq);
  at::Tensor kpos = at::arange(tk, opts).unsqueeze(0);
  return kpos <= qpos;
}

}  // namespace verlpp::model
