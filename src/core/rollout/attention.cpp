// RolloutAttention: k/v written at slot_mapping, then the plugin kernel over the block tables
// (decode), or everything delegated to PagedAttention (prefill, or no kernel); RoPE through
// the plugin's rotary_embedding on q and k in place. Plugin calls run on LibTorch's current
// stream (Kernels::current_stream: queued in order with LibTorch's work, no wait for the
// device), or on the synchronous NULL stream where the plugin or LibTorch cannot share it.
#include "attention.hpp"

#include "../hw/dlpack_view.hpp"

#include <verlpp/hw/kernels.hpp>

#include <ATen/ops/empty.h>

namespace verlpp::rollout::detail {
using hw::detail::dl_view;

RolloutAttention::RolloutAttention(model::PagedKvCache& cache, model::PagedStep step, bool is_decode,
                                   const hw::Kernels* kernels)
    : cache_(cache), step_(std::move(step)), kernels_(nullptr), rotary_(nullptr) {
  // fp64 (a test dtype) has no plugin kernel; the model's RoPE runs then.
  const at::ScalarType dtype = cache_.k(0).scalar_type();
  const bool kernel_dtype = dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf;
  if (kernels != nullptr && kernels->table().rotary_embedding != nullptr && kernel_dtype) rotary_ = kernels;
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
      kernels_->table().paged_attention_decode(&d_q, &d_k, &d_v, &d_bt, &d_len, float(scale), &d_out,
                                               kernels_->current_stream(qc.device())),
      "kernels.paged_attention_decode");
  return out.to(q.scalar_type());
}

void RolloutAttention::rotate(at::Tensor& q, at::Tensor& k, const at::Tensor& position_ids, const at::Tensor& inv_freq) {
  q = q.contiguous();  // no copy for the model's q/k (views of one projection's output)
  k = k.contiguous();
  const at::Tensor positions = position_ids.contiguous();
  const at::Tensor freq = inv_freq.contiguous();
  DLTensor d_q = dl_view(q), d_k = dl_view(k), d_pos = dl_view(positions), d_freq = dl_view(freq);
  rotary_->plugin().check(rotary_->table().rotary_embedding(&d_q, &d_k, &d_pos, &d_freq, rotary_->current_stream(q.device())),
                          "kernels.rotary_embedding");
}

}  // namespace verlpp::rollout::detail
