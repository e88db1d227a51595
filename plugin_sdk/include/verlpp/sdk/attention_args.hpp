// Plugin SDK: the argument rules of the attention entries (plugin_abi.h), paged_attention_decode
// and ABI 1.5's rotary_paged_attention_decode, checked the same way by every plugin so that each
// refuses the same input with the same INVALID_ARGUMENT message. The fused entry's RoPE and
// cache-store operands follow rotary_kv_store's rules (kernel_args.hpp, with `out` in q_out's
// place); its attention operands paged_attention_decode's.
#pragma once

#include <verlpp/sdk/kernel_args.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

namespace verlpp::sdk {

// paged_attention_decode's operands once its rules hold.
struct PagedAttentionArgs {
  int64_t batch = 0, q_heads = 0, kv_heads = 0, head_size = 0;  // B, H, K, S
  int64_t num_blocks = 0, block_size = 0, max_blocks = 0;
};

// paged_attention_decode's rules: q [B, H, S]; k_cache, v_cache [num_blocks, block_size, K, S],
// one shape; out q's shape; one f32/bf16/f16 dtype; block_tables [B, max_blocks] int32 and
// context_lens [B] int32; everything contiguous; H a multiple of K (GQA). Lengths and table
// entries are the plugin's to check (they may live in device memory).
inline PagedAttentionArgs check_paged_attention_decode_args(const DLTensor* q_p, const DLTensor* k_cache_p,
                                                            const DLTensor* v_cache_p, const DLTensor* block_tables_p,
                                                            const DLTensor* context_lens_p, const DLTensor* out_p) {
  PagedAttentionArgs a;
  const DLTensor& q = checked(q_p, "q");
  require(q.ndim == 3, "q must be [B, H, S], got ndim " + std::to_string(q.ndim));
  const DLTensor& kc = checked(k_cache_p, "k_cache");
  require(kc.ndim == 4, "k_cache must be [num_blocks, block_size, K, S], got ndim " + std::to_string(kc.ndim));
  const DLTensor& vc = checked(v_cache_p, "v_cache");
  const DLTensor& bt = checked(block_tables_p, "block_tables");
  const DLTensor& lens = checked(context_lens_p, "context_lens");
  const DLTensor& out = checked(out_p, "out");
  a.batch = q.shape[0];
  a.q_heads = q.shape[1];
  a.head_size = q.shape[2];
  a.num_blocks = kc.shape[0];
  a.block_size = kc.shape[1];
  a.kv_heads = kc.shape[2];
  require(vc.ndim == 4 && std::equal(kc.shape, kc.shape + 4, vc.shape), "v_cache must have k_cache's shape");
  require(kc.shape[3] == a.head_size,
          "k_cache head size " + std::to_string(kc.shape[3]) + " != q's " + std::to_string(a.head_size));
  require(a.kv_heads > 0 && a.q_heads % a.kv_heads == 0,
          "query heads H = " + std::to_string(a.q_heads) +
              " must be a multiple of KV heads K = " + std::to_string(a.kv_heads));
  require(is_float_dtype(q.dtype) && same_dtype(q.dtype, kc.dtype) && same_dtype(q.dtype, vc.dtype) &&
              same_dtype(q.dtype, out.dtype),
          "q, k_cache, v_cache and out must share one float dtype");
  require(out.ndim == 3 && std::equal(q.shape, q.shape + 3, out.shape), "out must have q's shape");
  require(bt.ndim == 2 && bt.shape[0] == a.batch && bt.dtype.code == kDLInt && bt.dtype.bits == 32,
          "block_tables must be [B, max_blocks] int32");
  require(lens.ndim == 1 && lens.shape[0] == a.batch && lens.dtype.code == kDLInt && lens.dtype.bits == 32,
          "context_lens must be [B] int32");
  for (const DLTensor* t : {&q, &kc, &vc, &bt, &lens, &out})
    require(is_contiguous(*t), "paged_attention_decode needs contiguous tensors");
  a.max_blocks = bt.shape[1];
  return a;
}

// rotary_paged_attention_decode's operands once its rules hold.
struct RotaryAttentionArgs {
  RotaryKvStoreArgs store;  // q, k, v, positions, inv_freq, slot_mapping, the caches; N = B
  int64_t max_blocks = 0;   // block_tables' columns
};

// The rules: rotary_kv_store's for q, k, v, positions, inv_freq, slot_mapping, k_cache, v_cache
// and out (as q_out: [B, H, S] contiguous, q's dtype, sharing no byte with any operand);
// block_tables [B, max_blocks] int32 and context_lens [B] int32, contiguous, sharing no byte with
// the caches or out; H a multiple of K (GQA). Values (lengths, tables, slots) are checked by
// check_last_slot_values where the plugin can read them.
inline RotaryAttentionArgs check_rotary_paged_attention_args(const DLTensor* q, const DLTensor* k, const DLTensor* v,
                                                             const DLTensor* positions, const DLTensor* inv_freq,
                                                             const DLTensor* slot_mapping, const DLTensor* k_cache,
                                                             const DLTensor* v_cache, const DLTensor* block_tables_p,
                                                             const DLTensor* context_lens_p, const DLTensor* out) {
  RotaryAttentionArgs a;
  a.store = check_rotary_kv_store_args(q, k, v, positions, inv_freq, slot_mapping, out, k_cache, v_cache);
  const int64_t b = a.store.rope.tokens;
  require(a.store.kv_heads > 0 && a.store.q_heads % a.store.kv_heads == 0,
          "query heads H = " + std::to_string(a.store.q_heads) +
              " must be a multiple of KV heads K = " + std::to_string(a.store.kv_heads));
  const DLTensor& tables = checked(block_tables_p, "block_tables");
  const DLTensor& lens = checked(context_lens_p, "context_lens");
  const auto is_i32 = [](const DLTensor& t) {
    return t.dtype.code == kDLInt && t.dtype.bits == 32 && t.dtype.lanes == 1;
  };
  require(tables.ndim == 2 && tables.shape[0] == b && is_i32(tables),
          "block_tables must be [B, max_blocks] int32 with B = " + std::to_string(b));
  require(lens.ndim == 1 && lens.shape[0] == b && is_i32(lens),
          "context_lens must be [B] int32 with B = " + std::to_string(b));
  require_contiguous(tables, "block_tables");
  require_contiguous(lens, "context_lens");
  a.max_blocks = tables.shape[1];
  for (const auto& [t, what] :
       {std::pair<const DLTensor*, const char*>{&tables, "block_tables"}, {&lens, "context_lens"}})
    for (const auto& [w, written] :
         {std::pair<const DLTensor*, const char*>{k_cache, "k_cache"}, {v_cache, "v_cache"}, {out, "out"}})
      require(!overlaps(*t, *w),
              std::string(written) + " overlaps " + what + " (outputs must not overlap any operand)");
  return a;
}

// The values where the plugin can read them (host memory): every context length in
// [1, max_blocks * block_size], every slot the cache row of its sequence's last position
// (block_tables[b, (L - 1) / bs] * bs + (L - 1) % bs for L = context_lens[b]), and every slot
// in the cache and distinct (check_slot_values). Names the first bad sequence.
inline void check_last_slot_values(const int64_t* slots, const int32_t* tables, const int32_t* lens, int64_t b,
                                   int64_t max_blocks, int64_t block_size, int64_t capacity) {
  check_slot_values(slots, b, capacity);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t len = lens[i];
    require(len >= 1 && len <= max_blocks * block_size,
            "context_lens[" + std::to_string(i) + "] = " + std::to_string(len) +
                " is outside [1, max_blocks * block_size = " + std::to_string(max_blocks * block_size) +
                "] (the new token is the context's last position)");
    const int64_t last = len - 1;
    const int64_t row = int64_t(tables[i * max_blocks + last / block_size]) * block_size + last % block_size;
    require(slots[i] == row, "slot_mapping[" + std::to_string(i) + "] = " + std::to_string(slots[i]) +
                                 " is not the cache row of the sequence's last position " + std::to_string(last) +
                                 " (" + std::to_string(row) + " under its block table)");
  }
}

}  // namespace verlpp::sdk
