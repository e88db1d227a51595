// cuda: the plugin's kernel table. Every entry of the ABI's kernel list is offered (each checked
// by the conformance suite); the SDK fills the table from CudaKernels by member name.
#pragma once

#include <verlpp/plugin_abi.h>
#include <verlpp/sdk/kernel_list.hpp>

namespace verlpp::cuda {

// The ABI entry points (kernel_table.cpp), every entry of the ABI's list, each with its
// kernel-table entry's exact type.
struct CudaKernels {
  VERLPP_SDK_EVERY_KERNEL
};

const verlpp_kernel_table* cuda_kernels();

}  // namespace verlpp::cuda
