// The engine's attention backend: a plugin's paged_attention_decode kernel for pure decode
// steps when the plugin has one, the model layer's reference PagedAttention otherwise; and the
// plugin's rotary_embedding for every step (prefill and decode) when it has one and the model's
// dtype is f32/bf16/f16, the model's own RoPE otherwise. On decode steps a plugin's
// rotary_kv_store (ABI 1.3) does RoPE and the KV-cache writes in one kernel, and ABI 1.5's
// rotary_paged_attention_decode the attention too (unless the engine's rotary_attention option
// is off). The dispatch lives here only; call sites never test for a kernel; the kernel calls
// themselves are the ops layer's (src/core/ops).
#pragma once

#include <verlpp/model/kv_cache.hpp>

#include <optional>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::rollout::detail {

class RolloutAttention : public model::AttentionBackend {
 public:
  // `is_decode`: every sequence of the step feeds exactly one token. `rotary_attention`: use ABI
  // 1.5's rotary_paged_attention_decode where offered (false keeps 1.3's pair of kernels).
  RolloutAttention(model::PagedKvCache& cache, model::PagedStep step, bool is_decode, const hw::Kernels* kernels,
                   bool rotary_attention = true);
  at::Tensor attend(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    double scale) override;
  bool rotates() const override { return rotary_ != nullptr || fused_store_; }
  // The plugin's rotary_embedding in place on contiguous q/k (positions [N] int64, inv_freq f32);
  // on a decode step with ABI 1.3's rotary_kv_store, nothing yet: attend() rotates q and k
  // while it stores k and v into the cache (one kernel where there were three).
  void rotate(at::Tensor& q, at::Tensor& k, const at::Tensor& position_ids, const at::Tensor& inv_freq) override;
  bool uses_kernel() const { return kernels_ != nullptr; }

 private:
  model::PagedKvCache& cache_;
  model::PagedStep step_;
  const hw::Kernels* kernels_;                      // non-null only when the decode kernel will be used
  const hw::Kernels* rotary_;                       // non-null only when the rotary kernel will be used
  bool fused_store_ = false;                        // decode with rotary_kv_store: rotation deferred to attend()
  bool fused_attention_ = false;                    // ... and attend() runs rotary_paged_attention_decode
  bool rotation_pending_ = false;                   // rotate() deferred this layer's rotation
  at::Tensor positions_, inv_freq_;                 // what the deferred rotation needs
  at::Tensor block_tables_i32_, context_lens_i32_;  // [S, max_blocks], [S] int32 for the kernel
  std::optional<model::PagedAttention> reference_;
};

}  // namespace verlpp::rollout::detail
