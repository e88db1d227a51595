// cpu_ref: reference kernels in plain loops (fp32 accumulation). They define the math the
// other plugins' fast kernels are checked against by the conformance suite.
#pragma once

#include <verlpp/plugin_abi.h>

namespace verlpp::cpu_ref {

// The kernel table: logprob_entropy, rms_norm, rotary_embedding, paged_attention_decode, sample,
// 1.2's logprob_backward, silu_mul, silu_mul_backward, and 1.3's add_rms_norm, rotary_kv_store.
const verlpp_kernel_table* reference_kernels();

}  // namespace verlpp::cpu_ref
