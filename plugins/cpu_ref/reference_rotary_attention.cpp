// cpu_ref: ABI 1.5's rotary_paged_attention_decode as what the ABI defines it to be, the
// reference's own rotary_kv_store followed by its paged_attention_decode over the rotated q (in a
// host buffer of this call). Every argument and value is checked first, under the fused entry's
// name, so a refused call writes nothing.
#include "reference_kernels.hpp"

#include <verlpp/sdk/attention_args.hpp>
#include <verlpp/sdk/dlpack_util.hpp>

#include <vector>

namespace verlpp::cpu_ref {

verlpp_error* ReferenceKernels::rotary_paged_attention_decode(const DLTensor* q, const DLTensor* k, const DLTensor* v,
                                                              const DLTensor* positions, const DLTensor* inv_freq,
                                                              const DLTensor* slot_mapping, DLTensor* k_cache,
                                                              DLTensor* v_cache, const DLTensor* block_tables,
                                                              const DLTensor* context_lens, float scale, DLTensor* out,
                                                              verlpp_stream) {
  std::vector<unsigned char> rotated;  // q after RoPE, [B, H, S] contiguous in q's dtype
  DLTensor q_rotated{};
  verlpp_error* refused = sdk::guard("cpu_ref rotary_paged_attention_decode", [&] {
    const sdk::RotaryAttentionArgs a = sdk::check_rotary_paged_attention_args(
        q, k, v, positions, inv_freq, slot_mapping, k_cache, v_cache, block_tables, context_lens, out);
    for (const DLTensor* t :
         {q, k, v, positions, inv_freq, slot_mapping, static_cast<const DLTensor*>(k_cache),
          static_cast<const DLTensor*>(v_cache), block_tables, context_lens, static_cast<const DLTensor*>(out)})
      require_host(*t, "every rotary_paged_attention_decode tensor");
    const int64_t b = a.store.rope.tokens;
    sdk::check_last_slot_values(static_cast<const int64_t*>(sdk::data_ptr(*slot_mapping)),
                                static_cast<const int32_t*>(sdk::data_ptr(*block_tables)),
                                static_cast<const int32_t*>(sdk::data_ptr(*context_lens)), b, a.max_blocks,
                                a.store.block_size, a.store.slots());
    rotated.resize(size_t(b * a.store.q_heads * a.store.head_size) * sdk::dtype_size(q->dtype));
    q_rotated = *out;  // [B, H, S] contiguous, q's dtype, on the host
    q_rotated.data = rotated.data();
    q_rotated.byte_offset = 0;
    q_rotated.strides = nullptr;
  });
  if (refused != nullptr) return refused;
  if (verlpp_error* e =
          rotary_kv_store(q, k, v, positions, inv_freq, slot_mapping, &q_rotated, k_cache, v_cache, nullptr))
    return e;
  return paged_attention_decode(&q_rotated, k_cache, v_cache, block_tables, context_lens, scale, out, nullptr);
}

}  // namespace verlpp::cpu_ref
