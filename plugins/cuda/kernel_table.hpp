// cuda: the plugin's kernel table. Every entry of the ABI's kernel list is offered (each checked
// by the conformance suite); the SDK fills the table from CudaKernels by member name.
#pragma once

#include <verlpp/plugin_abi.h>
#include <verlpp/sdk/kernel_list.hpp>

namespace verlpp::cuda {

// The ABI entry points (kernel_table.cpp), each with its kernel-table entry's exact type.
struct CudaKernels {
  VERLPP_SDK_KERNEL(logprob_entropy);
  VERLPP_SDK_KERNEL(rms_norm);
  VERLPP_SDK_KERNEL(rotary_embedding);
  VERLPP_SDK_KERNEL(paged_attention_decode);
  VERLPP_SDK_KERNEL(sample);
  VERLPP_SDK_KERNEL(logprob_backward);
  VERLPP_SDK_KERNEL(silu_mul);
  VERLPP_SDK_KERNEL(silu_mul_backward);
  VERLPP_SDK_KERNEL(add_rms_norm);
  VERLPP_SDK_KERNEL(rotary_kv_store);
  VERLPP_SDK_KERNEL(adamw_update);
  VERLPP_SDK_KERNEL(rotary_paged_attention_decode);
};

const verlpp_kernel_table* cuda_kernels();

}  // namespace verlpp::cuda
