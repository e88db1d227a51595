// RolloutAttention: k/v written at slot_mapping, then the plugin kernel over the block tables
// (decode), or everything delegated to PagedAttention (prefill, or no kernel).
#include "attention.hpp"

#include "../hw/dlpack_view.hpp"

#include <verlpp/hw/kernels.hpp>

#include <ATen/ops/empty.h>

namespace verlpp::rollout::detail {
using hw::detail::dl_view;

RolloutAttention::RolloutAttention(model::PagedKvCache& cache, model::PagedStep step, bool is_decode,
                                   const hw::Kernels* kernels)
    : cache_(cache), step_(std::move(step)), kernels_(nullptr) {
  if (is_decode && kernels != nullptr && kernels->table().paged_attention_decode != nullptr) {
    kernels_ = kernels;
    block_tables_i32_ = step_.block_tables.to(at::kInt).contiguous();
    context_lens_i32_ = step_.context_lens.to(at::kInt).contiguous();
  } else {
    reference_.emplace(cache_, step_);
  }
}

at::Tensor RolloutAttention::attend(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    double scale) {
  if (reference_) return reference_->attend(layer, q, k, v, scale);
  at::Tensor& kc = cache_.k(layer);
  at::Tensor& vc = cache_.v(layer);
  const int64_t KV = kc.size(2), D = kc.size(3);
  kc.view({-1, KV, D}).index_copy_(0, step_.slot_mapping, k.to(kc.scalar_type()));
  vc.view({-1, KV, D}).index_copy_(0, step_.slot_mapping, v.to(vc.scalar_type()));
  at::Tensor qc = q.to(kc.scalar_type()).contiguous();
  at::Tensor out = at::empty(qc.sizes(), qc.options());
  DLTensor d_q = dl_view(qc), d_k = dl_view(kc), d_v = dl_view(vc), d_bt = dl_view(block_tables_i32_),
           d_len = dl_view(context_lens_i32_), d_out = dl_view(out);
  kernels_->plugin().check(
      kernels_->table().paged_attention_decode(&d_q, &d_k, &d_v, &d_bt, &d_len, float(scale), &d_out, nullptr),
      "kernels.paged_attention_decode");
  return out.to(q.scalar_type());
}

}  // namespace verlpp::rollout::detail
