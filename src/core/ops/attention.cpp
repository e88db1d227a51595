// paged_attention_decode and rotary_paged_attention_decode (attention.hpp): the kernel calls,
// or the gathered reference. The reference reads the longest context length on the host (one
// wait): it serves tests and plugins without the kernel, never a captured graph.
#include "attention.hpp"

#include "kernel_call.hpp"
#include "rotary.hpp"

#include <verlpp/model/layers.hpp>

#include <algorithm>
#include <vector>

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>

namespace verlpp::ops {
using detail::KernelId;
using detail::Operand;

void paged_attention_decode(const hw::Kernels* kernels, const at::Tensor& q, const at::Tensor& k_cache,
                            const at::Tensor& v_cache, const at::Tensor& block_tables, const at::Tensor& context_lens,
                            double scale, const at::Tensor& out) {
  if (detail::offered(kernels, KernelId::paged_attention_decode)) {
    kernels->call<KernelId::paged_attention_decode>(Operand(q), Operand(k_cache), Operand(v_cache),
                                                    Operand(block_tables), Operand(context_lens), float(scale),
                                                    Operand(out), detail::kernel_stream(*kernels, q));
    return;
  }
  const int64_t b = q.size(0), bs = k_cache.size(1), kv = k_cache.size(2), s = k_cache.size(3);
  const int64_t longest = b == 0 ? 0 : context_lens.max().item<int64_t>();
  if (longest == 0) {
    out.zero_();
    return;
  }
  // Position t of a sequence: block column t / bs (clamped to the table: rows past a sequence's
  // length are masked), row t % bs.
  std::vector<int64_t> columns, offsets;
  for (int64_t t = 0; t < longest; ++t) {
    columns.push_back(std::min(t / bs, block_tables.size(1) - 1));
    offsets.push_back(t % bs);
  }
  const auto i64 = at::TensorOptions().dtype(at::kLong);
  const at::Tensor column = at::tensor(columns, i64).to(q.device()).unsqueeze(0);  // [1, L]
  const at::Tensor offset = at::tensor(offsets, i64).to(q.device()).unsqueeze(0);  // [1, L]
  const at::Tensor blocks = block_tables.to(at::kLong).gather(1, column.expand({b, longest}));
  const at::Tensor rows = (blocks * bs + offset).view({-1});  // [B * L]
  // In fp32 (LibTorch's CPU has no 16-bit batched matmul), rounded once at the end, as the kernels round.
  const at::Tensor keys = k_cache.view({-1, kv, s}).index_select(0, rows).view({b, longest, kv, s}).to(at::kFloat);
  const at::Tensor values = v_cache.view({-1, kv, s}).index_select(0, rows).view({b, longest, kv, s}).to(at::kFloat);
  const at::Tensor lens = context_lens.to(at::kLong).unsqueeze(1);                // [B, 1]
  const at::Tensor t = at::arange(longest, i64.device(q.device())).unsqueeze(0);  // [1, L]
  const at::Tensor allowed = (t < lens).unsqueeze(1);                             // [B, 1, L]
  const at::Tensor attended = model::attention(q.to(at::kFloat).unsqueeze(1), keys, values, allowed, scale).squeeze(1);
  // A sequence without context attends to nothing: zeros, as the kernels write.
  out.copy_(at::where(lens.unsqueeze(2) > 0, attended, at::zeros_like(attended)));
}

void rotary_paged_attention_decode(const hw::Kernels* kernels, const at::Tensor& q, const at::Tensor& k,
                                   const at::Tensor& v, const at::Tensor& positions, const at::Tensor& inv_freq,
                                   const at::Tensor& slot_mapping, const at::Tensor& k_cache, const at::Tensor& v_cache,
                                   const at::Tensor& block_tables, const at::Tensor& context_lens, double scale,
                                   const at::Tensor& out) {
  if (detail::offered(kernels, KernelId::rotary_paged_attention_decode)) {
    kernels->call<KernelId::rotary_paged_attention_decode>(
        Operand(q), Operand(k), Operand(v), Operand(positions), Operand(inv_freq), Operand(slot_mapping),
        Operand(k_cache), Operand(v_cache), Operand(block_tables), Operand(context_lens), float(scale), Operand(out),
        detail::kernel_stream(*kernels, q));
    return;
  }
  const at::Tensor q_rotated = at::empty(q.sizes(), q.options());
  rotary_kv_store(kernels, q, k, v, positions, inv_freq, slot_mapping, q_rotated, k_cache, v_cache);
  paged_attention_decode(kernels, q_rotated, k_cache, v_cache, block_tables, context_lens, scale, out);
}

}  // namespace verlpp::ops
