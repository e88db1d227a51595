// cpu_ref: reference kernels in plain loops (fp32 accumulation). They define the math the
// other plugins' fast kernels are checked against by the conformance suite.
#pragma once

#include <verlpp/plugin_abi.h>

namespace verlpp::cpu_ref {

// The kernel table: logprob_entropy, rms_norm, rotary_embedding, paged_attention_decode, sample,
// 1.2's logprob_backward, silu_mul, silu_mul_backward, 1.3's add_rms_norm, rotary_kv_store,
// 1.4's adamw_update and 1.5's rotary_paged_attention_decode.
const verlpp_kernel_table* reference_kernels();

// Refuses (INVALID_ARGUMENT) a tensor that is not in host memory, naming it.
void require_host(const DLTensor& t, const char* what);

// adamw_update (reference_adamw.cpp).
verlpp_error* reference_adamw_update(int32_t count, DLTensor* const* params, const DLTensor* const* grads,
                                     DLTensor* const* exp_avg, DLTensor* const* exp_avg_sq, DLTensor* const* copies,
                                     const verlpp_adamw_options* options, const DLTensor* grad_scale, verlpp_stream stream);

// rotary_paged_attention_decode (reference_rotary_attention.cpp): rotary_kv_store, then
// paged_attention_decode, of this table.
verlpp_error* reference_rotary_paged_attention_decode(const DLTensor* q, const DLTensor* k, const DLTensor* v,
                                                      const DLTensor* positions, const DLTensor* inv_freq,
                                                      const DLTensor* slot_mapping, DLTensor* k_cache, DLTensor* v_cache,
                                                      const DLTensor* block_tables, const DLTensor* context_lens, float scale,
                                                      DLTensor* out, verlpp_stream stream);

}  // namespace verlpp::cpu_ref
