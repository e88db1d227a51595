// RolloutAttention: k/v written at slot_mapping, then the plugin kernel over the block tables
// (decode), or everything delegated to PagedAttention (prefill, or no kernel); RoPE through
// the plugin's rotary_embedding on q and k in place, or on decode steps through rotary_kv_store,
// which rotates and writes the cache in one kernel, or ABI 1.5's rotary_paged_attention_decode,
// which also attends in that kernel. Plugin calls run on LibTorch's current
// stream (Kernels::current_stream: queued in order with LibTorch's work, no wait for the
// device), or on the synchronous NULL stream where the plugin or LibTorch cannot share it.
#include "attention.hpp"

#include "../ops/attention.hpp"
#include "../ops/rotary.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/hw/kernels.hpp>

#include <ATen/ops/empty.h>

namespace verlpp::rollout::detail {
using hw::KernelId;

RolloutAttention::RolloutAttention(model::PagedKvCache& cache, model::PagedStep step, bool is_decode,
                                   const hw::Kernels* kernels, bool rotary_attention)
    : cache_(cache), step_(std::move(step)), kernels_(nullptr), rotary_(nullptr) {
  // fp64 (a test dtype) has no plugin kernel; the model's RoPE runs then.
  const at::ScalarType dtype = cache_.k(0).scalar_type();
  const bool kernel_dtype = dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf;
  if (kernels != nullptr && kernels->offers(KernelId::rotary_embedding) && kernel_dtype) rotary_ = kernels;
  if (is_decode && kernels != nullptr && kernels->offers(KernelId::paged_attention_decode)) {
    kernels_ = kernels;
    fused_store_ = kernel_dtype && kernels->offers(KernelId::rotary_kv_store);
    fused_attention_ = fused_store_ && rotary_attention && kernels->offers(KernelId::rotary_paged_attention_decode);
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
    if (fused_attention_) {
      // ABI 1.5: RoPE, the cache stores and the attention in one kernel, no rotated copy of q.
      at::Tensor out = at::empty(q.sizes(), q.options());  // contiguous [B, H, S]
      ops::rotary_paged_attention_decode(kernels_, q, k, v, positions_, inv_freq_, slots, kc, vc, block_tables_i32_,
                                         context_lens_i32_, scale, out);
      return out;
    }
    qc = at::empty(q.sizes(), q.options());
    ops::rotary_kv_store(kernels_, q, k, v, positions_, inv_freq_, slots, qc, kc, vc);
  } else {
    kc.view({-1, KV, D}).index_copy_(0, step_.slot_mapping, k.to(kc.scalar_type()));
    vc.view({-1, KV, D}).index_copy_(0, step_.slot_mapping, v.to(vc.scalar_type()));
    qc = q.to(kc.scalar_type()).contiguous();
  }
  at::Tensor out = at::empty(qc.sizes(), qc.options());
  ops::paged_attention_decode(kernels_, qc, kc, vc, block_tables_i32_, context_lens_i32_, scale, out);
  return out.to(q.scalar_type());
}

void RolloutAttention::rotate(at::Tensor& q, at::Tensor& k, const at::Tensor& position_ids,
                              const at::Tensor& inv_freq) {
  // The fused kernel reads q/k/v in place (rows may be strided: views of one fused projection)
  // in the cache's dtype, which is the model's.
  const at::ScalarType cache_dtype = cache_.k(0).scalar_type();
  if (fused_store_ && q.scalar_type() == cache_dtype && k.scalar_type() == cache_dtype && q.dim() == 3 &&
      k.dim() == 3 && q.stride(2) == 1 && q.stride(1) == q.size(2) && k.stride(2) == 1 && k.stride(1) == k.size(2)) {
    positions_ = position_ids.contiguous();
    inv_freq_ = inv_freq.contiguous();
    rotation_pending_ = true;
    return;
  }
  VERLPP_CHECK(rotary_ != nullptr,
               "RolloutAttention: q {} / k {} do not suit rotary_kv_store and the plugin has no "
               "rotary_embedding",
               c10::toString(q.scalar_type()), c10::toString(k.scalar_type()));
  // A copy when q/k are column slices of the fused q/k/v projection (prefill steps; the
  // rotary_embedding contract wants contiguous tensors); none for unfused ones.
  q = q.contiguous();
  k = k.contiguous();
  ops::rotary_embedding(rotary_, q, k, position_ids.contiguous(), inv_freq.contiguous());
}

}  // namespace verlpp::rollout::detail
