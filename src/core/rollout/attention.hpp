// The engine's attention backend: a plugin's paged_attention_decode kernel for pure decode
// steps when the plugin has one, the model layer's reference PagedAttention otherwise.
// The dispatch lives here only; call sites never test for the kernel.
#pragma once

#include <verlpp/model/kv_cache.hpp>

#include <optional>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::rollout::detail {

class RolloutAttention : public model::AttentionBackend {
 public:
  // `is_decode`: every sequence of the step feeds exactly one token.
  RolloutAttention(model::PagedKvCache& cache, model::PagedStep step, bool is_decode, const hw::Kernels* kernels);
  at::Tensor attend(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    double scale) override;
  bool uses_kernel() const { return kernels_ != nullptr; }

 private:
  model::PagedKvCache& cache_;
  model::PagedStep step_;
  const hw::Kernels* kernels_;              // non-null only when the kernel will be used
  at::Tensor block_tables_i32_, context_lens_i32_;  // [S, max_blocks], [S] int32 for the kernel
  std::optional<model::PagedAttention> reference_;
};

}  // namespace verlpp::rollout::detail
