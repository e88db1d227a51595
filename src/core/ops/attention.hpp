// ops: decode attention over a paged KV cache through a plugin's paged_attention_decode and ABI
// 1.5's rotary_paged_attention_decode, or a reference that gathers each sequence's cache rows
// and runs the model's attention over them in fp32 (model::attention), rounded once to the
// dtype, where the plugin (or a null `kernels`) has none. The fused entry's reference is its
// definition: rotary_kv_store, then paged_attention_decode over the rotated q (each through
// the plugin where it offers them).
#pragma once

#include <ATen/core/Tensor.h>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::ops {

// One query token per sequence: out [B, H, S] = attention of q [B, H, S] over the first
// context_lens[b] positions of sequence b, position t at row block_tables[b, t / bs] * bs + t % bs
// of k_cache, v_cache [num_blocks, bs, K, S]. block_tables [B, max_blocks], context_lens [B]
// int32; everything contiguous, one f32/bf16/f16 dtype; H a multiple of K.
void paged_attention_decode(const hw::Kernels* kernels, const at::Tensor& q, const at::Tensor& k_cache,
                            const at::Tensor& v_cache, const at::Tensor& block_tables, const at::Tensor& context_lens,
                            double scale, const at::Tensor& out);

// rotary_kv_store of the new token (q, k, v [B, heads, S], positions, slot_mapping [B] int64),
// then paged_attention_decode with the rotated q, into out [B, H, S]. slot_mapping[b] is the
// cache row of position context_lens[b] - 1.
void rotary_paged_attention_decode(const hw::Kernels* kernels, const at::Tensor& q, const at::Tensor& k,
                                   const at::Tensor& v, const at::Tensor& positions, const at::Tensor& inv_freq,
                                   const at::Tensor& slot_mapping, const at::Tensor& k_cache, const at::Tensor& v_cache,
                                   const at::Tensor& block_tables, const at::Tensor& context_lens, double scale,
                                   const at::Tensor& out);

}  // namespace verlpp::ops
