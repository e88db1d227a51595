// cuda: tensor_copy, the ABI's copy between two tensors of equal shape and dtype with any
// strides, host<->device or device<->device. Dense pairs are one cudaMemcpyAsync; strided
// device views go through the strided copy kernel (via a contiguous device temporary when the
// other side is on the host); strided host views are packed or unpacked on the host.
#pragma once

#include <verlpp/plugin_abi.h>

namespace verlpp::cuda {

// Shapes and dtypes are already checked equal (by the SDK). Copies that need a temporary
// (a strided view on one side, the host on the other) wait for their stream before returning.
void copy_tensor(const DLTensor& src, DLTensor& dst, verlpp_stream stream);

}  // namespace verlpp::cuda
