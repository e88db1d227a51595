// rotary_embedding and rotary_kv_store (rotary.hpp): the kernel calls, or the model's RoPE and
// index_copy_ into the caches.
#include "rotary.hpp"

#include "kernel_call.hpp"

#include <verlpp/model/layers.hpp>

namespace verlpp::ops {
using detail::KernelId;
using detail::Operand;

namespace {

// x [N, heads, S] rotated by the angles of positions [N], in x's dtype (a new tensor).
at::Tensor rotated(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& inv_freq) {
  const auto [cos, sin] = model::rope_cos_sin(inv_freq, positions, x.scalar_type());  // [N, S] each
  return model::apply_rope(x, cos, sin);
}

}  // namespace

void rotary_embedding(const hw::Kernels* kernels, const at::Tensor& q, const at::Tensor& k, const at::Tensor& positions,
                      const at::Tensor& inv_freq) {
  if (detail::offered(kernels, KernelId::rotary_embedding)) {
    kernels->call<KernelId::rotary_embedding>(Operand(q), Operand(k), Operand(positions), Operand(inv_freq),
                                              detail::kernel_stream(*kernels, positions));
    return;
  }
  if (q.defined()) q.copy_(rotated(q, positions, inv_freq));
  if (k.defined()) k.copy_(rotated(k, positions, inv_freq));
}

void rotary_kv_store(const hw::Kernels* kernels, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& positions, const at::Tensor& inv_freq, const at::Tensor& slot_mapping,
                     const at::Tensor& q_out, const at::Tensor& k_cache, const at::Tensor& v_cache) {
  if (detail::offered(kernels, KernelId::rotary_kv_store)) {
    kernels->call<KernelId::rotary_kv_store>(Operand(q), Operand(k), Operand(v), Operand(positions), Operand(inv_freq),
                                             Operand(slot_mapping), Operand(q_out), Operand(k_cache), Operand(v_cache),
                                             detail::kernel_stream(*kernels, q));
    return;
  }
  const int64_t kv = k_cache.size(2), s = k_cache.size(3);
  q_out.copy_(rotated(q, positions, inv_freq));
  k_cache.view({-1, kv, s}).index_copy_(0, slot_mapping, rotated(k, positions, inv_freq));
  v_cache.view({-1, kv, s}).index_copy_(0, slot_mapping, v);
}

}  // namespace verlpp::ops
