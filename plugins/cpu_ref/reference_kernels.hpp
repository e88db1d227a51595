// cpu_ref: reference kernels in plain loops (fp32 accumulation). They define the math the
// other plugins' fast kernels are checked against by the conformance suite. Every entry of the
// ABI's kernel list is implemented; the table is filled from this struct by the SDK.
#pragma once

#include <verlpp/plugin_abi.h>
#include <verlpp/sdk/kernel_list.hpp>

namespace verlpp::cpu_ref {

// The kernels, each with its kernel-table entry's exact type (plugin_abi.h states the math):
// every entry of the ABI's list, adamw_update in reference_adamw.cpp,
// rotary_paged_attention_decode in reference_rotary_attention.cpp, the rest in reference_kernels.cpp.
struct ReferenceKernels {
  VERLPP_SDK_EVERY_KERNEL
};

// The kernel table over ReferenceKernels.
const verlpp_kernel_table* reference_kernels();

// Refuses (INVALID_ARGUMENT) a tensor that is not in host memory, naming it.
void require_host(const DLTensor& t, const char* what);

}  // namespace verlpp::cpu_ref
