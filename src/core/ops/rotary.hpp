// ops: RoPE through a plugin's rotary_embedding and ABI 1.3's rotary_kv_store, or the model's
// own RoPE (model::rope_cos_sin, model::apply_rope: cos/sin and every product rounded to the
// activation dtype, as the kernels' contract says) where the plugin (or a null `kernels`) has
// none. rotary_kv_store's reference also does the paged-cache stores with index_copy_.
#pragma once

#include <ATen/core/Tensor.h>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::ops {

// q [N, H, S] and k [N, K, S] (either undefined; contiguous, one f32/bf16/f16 dtype) rotated in
// place by angle = float(positions [N] int64) * inv_freq [S/2] f32, HF's rotate_half pairs.
void rotary_embedding(const hw::Kernels* kernels, const at::Tensor& q, const at::Tensor& k, const at::Tensor& positions,
                      const at::Tensor& inv_freq);

// q and k rotated as rotary_embedding rotates them, rotated q into q_out [N, H, S] (contiguous),
// rotated k and v stored at rows slot_mapping [N] int64 of k_cache, v_cache [num_blocks, bs, K, S].
// q [N, H, S], k, v [N, K, S] may be row-strided views of one fused projection (heads and S dense).
void rotary_kv_store(const hw::Kernels* kernels, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& positions, const at::Tensor& inv_freq, const at::Tensor& slot_mapping,
                     const at::Tensor& q_out, const at::Tensor& k_cache, const at::Tensor& v_cache);

}  // namespace verlpp::ops
