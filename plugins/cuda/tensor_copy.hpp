// cuda: tensor_copy, the ABI's copy between two tensors of equal shape and dtype with any
// strides, host<->device or device<->device. Dense pairs are one cudaMemcpyAsync; strided
// device views go through the strided copy kernel (via a contiguous, stream-ordered device
// temporary when the other side is on the host); strided host views are packed or unpacked on
// the host.
#pragma once

#include <verlpp/plugin_abi.h>

namespace verlpp::cuda {

// Shapes and dtypes are already checked equal (by the SDK). On the NULL stream the call waits
// for the copy. On any other stream it returns once the copy is queued (device temporaries are
// stream-ordered), except where the host itself must touch the data: host-to-host copies (after
// the stream's earlier work), strided host sources (packed into a temporary) and strided host
// destinations (unpacked after the copy) wait for the stream.
void copy_tensor(const DLTensor& src, DLTensor& dst, verlpp_stream stream);

}  // namespace verlpp::cuda
