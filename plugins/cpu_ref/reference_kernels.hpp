// cpu_ref: reference kernels in plain loops (fp32 accumulation). They define the math the
// other plugins' fast kernels are checked against by the conformance suite. Every entry of the
// ABI's kernel list is implemented; the table is filled from this struct by the SDK.
#pragma once

#include <verlpp/plugin_abi.h>
#include <verlpp/sdk/kernel_list.hpp>

namespace verlpp::cpu_ref {

// The kernels, each with its kernel-table entry's exact type (plugin_abi.h states the math).
struct ReferenceKernels {
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
  VERLPP_SDK_KERNEL(adamw_update);                   // reference_adamw.cpp
  VERLPP_SDK_KERNEL(rotary_paged_attention_decode);  // reference_rotary_attention.cpp
};

// The kernel table over ReferenceKernels.
const verlpp_kernel_table* reference_kernels();

// Refuses (INVALID_ARGUMENT) a tensor that is not in host memory, naming it.
void require_host(const DLTensor& t, const char* what);

}  // namespace verlpp::cpu_ref
