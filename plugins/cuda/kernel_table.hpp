// cuda: the plugin's kernel table. Only kernels the conformance suite checks are offered
// (logprob_entropy, rms_norm, rotary_embedding, paged_attention_decode, sample, and 1.2's
// logprob_backward, silu_mul and silu_mul_backward, 1.3's add_rms_norm and rotary_kv_store, 1.4's
// adamw_update); every other entry stays NULL so the host runs its LibTorch path for it.
#pragma once

#include <verlpp/plugin_abi.h>

namespace verlpp::cuda {

const verlpp_kernel_table* cuda_kernels();

}  // namespace verlpp::cuda
