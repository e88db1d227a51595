// The decoder's building blocks as free functions on tensors, computed the way HF transformers
// computes them (so fp32 logits agree to rounding): RMSNorm in fp32 then cast back before the
// weight multiply (16-bit inputs: LibTorch's rms_norm op where it has one, which rounds once); RoPE frequencies in
// fp32, cos/sin cast to the activation dtype, rotate_half layout (pairs (i, i + D/2)); attention scores in the
// activation dtype, softmax in fp32. Layout is token-major throughout: [..., T, heads, D].
#pragma once

#include <verlpp/model/forward_options.hpp>
#include <verlpp/model/model_config.hpp>

#include <ATen/core/Tensor.h>

#include <utility>

namespace verlpp::model {

// RMSNorm over the last dim: weight * (x_fp32 * rsqrt(mean(x_fp32^2) + eps)).to(x.dtype).
at::Tensor rms_norm(const at::Tensor& x /*[..., C]*/, const at::Tensor& weight /*[C]*/, double eps);

// Inverse RoPE frequencies with the config's theta and scaling (default, linear, llama3).
at::Tensor rope_inv_freq(const ModelConfig& config, c10::Device device);  // -> [D/2] float32

// cos and sin for each position: angle = position * inv_freq, duplicated over both halves.
std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& inv_freq /*[D/2] f32*/,
                                               const at::Tensor& position_ids /*[...] int64*/,
                                               at::ScalarType dtype);  // -> 2 x [..., D] dtype

// x * cos + rotate_half(x) * sin, cos/sin broadcast over the heads dim.
at::Tensor apply_rope(const at::Tensor& x /*[..., heads, D]*/, const at::Tensor& cos /*[..., D]*/,
                      const at::Tensor& sin /*[..., D]*/);

// Scaled dot-product attention with GQA (query head h reads key/value head h / (H / KV)).
// `allowed` says which key each query may see (true = attend); undefined means all. fp32/fp64:
// written out in HF eager's order (parity); bf16/fp16: LibTorch's fused SDPA where it has one,
// taking K/V as `options` say.
at::Tensor attention(const at::Tensor& q /*[B, Tq, H, D]*/, const at::Tensor& k /*[B, Tk, KV, D]*/,
                     const at::Tensor& v /*[B, Tk, KV, D]*/, const at::Tensor& allowed /*[B|1, Tq, Tk] bool*/,
                     double scale, const AttentionOptions& options = {});  // -> [B, Tq, H, D]

// attention() with the causal mask of causal_mask(Tq, Tk); for bf16/fp16 LibTorch's fused SDPA
// with is_causal (its flash kernel, which needs no mask) where it has one.
at::Tensor causal_attention(const at::Tensor& q /*[B, T, H, D]*/, const at::Tensor& k /*[B, T, KV, D]*/,
                            const at::Tensor& v /*[B, T, KV, D]*/, double scale,
                            const AttentionOptions& options = {});  // -> [B, T, H, D]

// Causal visibility for Tq new queries that end a sequence of Tk keys: query i sees keys
// j <= Tk - Tq + i.
at::Tensor causal_mask(int64_t tq, int64_t tk, c10::Device device);  // -> [Tq, Tk] bool

}  // namespace verlpp::model
