// RolloutAttention: k/v written at slot_mapping, then the plugin kernel over the block tables
// (decode), or everything delegated to PagedAttention (prefill, or no kernel); RoPE through
// the plugin's rotary_embedding on q and k in place, or on decode steps through rotary_kv_store,
// which rotates and writes the cache in one kernel, or ABI 1.5's rotary_paged_attention_decode,
// which also attends in that kernel. Plugin calls run on LibTorch's current
// stream (Kernels::current_stream: queued in order with LibTorch's work, no wait for the
// device), or on the synchronous NULL stream where the plugin or LibTorch cannot share it.
#include "attention.hpp"

#include "../hw/dlpack_view.hpp"

#include <verlpp/core/env.hpp>
#include <verlpp/core/error.hpp>
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
    fused_store_ = kernel_dtype && kernels->table().rotary_kv_store != nullptr;
    // VERLPP_ROTARY_ATTENTION=0 keeps 1.3's pair of kernels (for side-by-side timing and tests).
    fused_attention_ = fused_store_ && kernels->table().rotary_paged_attention_decode != nullptr &&
                       !env_equals("VERLPP_ROTARY_ATTENTION", "0");
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
  at::Tensor qc;
  if (rotation_pending_) {
    rotation_pending_ = false;
    const at::Tensor slots = step_.slot_mapping.contiguous();
    DLTensor d_q = dl_view(q), d_k = dl_view(k), d_v = dl_view(v), d_pos = dl_view(positions_),
             d_freq = dl_view(inv_freq_), d_slots = dl_view(slots), d_kc = dl_view(kc), d_vc = dl_view(vc);
    const verlpp_stream stream = kernels_->current_stream(q.device());
    if (fused_attention_) {
      // ABI 1.5: RoPE, the cache stores and the attention in one kernel, no rotated copy of q.
      at::Tensor out = at::empty(q.sizes(), q.options());  // contiguous [B, H, S]
      DLTensor d_bt = dl_view(block_tables_i32_), d_len = dl_view(context_lens_i32_), d_out = dl_view(out);
      kernels_->plugin().check(kernels_->table().rotary_paged_attention_decode(&d_q, &d_k, &d_v, &d_pos, &d_freq, &d_slots,
                                                                               &d_kc, &d_vc, &d_bt, &d_len, float(scale),
                                                                               &d_out, stream),
                               "kernels.rotary_paged_attention_decode");
      return out;
    }
    qc = at::empty(q.sizes(), q.options());
    DLTensor d_qo = dl_view(qc);
    kernels_->plugin().check(
        kernels_->table().rotary_kv_store(&d_q, &d_k, &d_v, &d_pos, &d_freq, &d_slots, &d_qo, &d_kc, &d_vc, stream),
        "kernels.rotary_kv_store");
  } else {
    kc.view({-1, KV, D}).index_copy_(0, step_.slot_mapping, k.to(kc.scalar_type()));
    vc.view({-1, KV, D}).index_copy_(0, step_.slot_mapping, v.to(vc.scalar_type()));
    qc = q.to(kc.scalar_type()).contiguous();
  }
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
  // The fused kernel reads q/k/v in place (rows may be strided: views of one fused projection)
  // in the cache's dtype, which is the model's.
  const at::ScalarType cache_dtype = cache_.k(0).scalar_type();
  if (fused_store_ && q.scalar_type() == cache_dtype && k.scalar_type() == cache_dtype && q.dim() == 3 && k.dim() == 3 &&
      q.stride(2) == 1 && q.stride(1) == q.size(2) && k.stride(2) == 1 && k.stride(1) == k.size(2)) {
    positions_ = position_ids.contiguous();
    inv_freq_ = inv_freq.contiguous();
    rotation_pending_ = true;
    return;
  }
  VERLPP_CHECK(rotary_ != nullptr, "RolloutAttention: q {} / k {} do not suit rotary_kv_store and the plugin has no "
               "rotary_embedding", c10::toString(q.scalar_type()), c10::toString(k.scalar_type()));
  // A copy when q/k are column slices of the fused q/k/v projection (prefill steps; the
  // rotary_embedding contract wants contiguous tensors); none for unfused ones.
  q = q.contiguous();
  k = k.contiguous();
  const at::Tensor positions = position_ids.contiguous();
  const at::Tensor freq = inv_freq.contiguous();
  DLTensor d_q = dl_view(q), d_k = dl_view(k), d_pos = dl_view(positions), d_freq = dl_view(freq);
  rotary_->plugin().check(rotary_->table().rotary_embedding(&d_q, &d_k, &d_pos, &d_freq, rotary_->current_stream(q.device())),
                          "kernels.rotary_embedding");
}

}  // namespace verlpp::rollout::detail
