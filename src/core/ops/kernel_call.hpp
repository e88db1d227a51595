// What every ops function shares when it calls a plugin kernel: an Operand turns an at::Tensor
// into the borrowed DLPack view the ABI takes (an undefined tensor into NULL, an optional
// operand left out) for the duration of one call expression, and kernel_stream picks the stream
// (LibTorch's current one on the tensors' device, hw::Kernels::current_stream).
#pragma once

#include "../hw/dlpack_view.hpp"

#include <verlpp/hw/kernels.hpp>

#include <ATen/core/Tensor.h>

namespace verlpp::ops::detail {

using hw::KernelId;

// A view of `t` (NULL when undefined), valid while `t` lives: pass Operand(t) straight into
// hw::Kernels::call, whose call expression outlives it.
class Operand {
 public:
  explicit Operand(const at::Tensor& t, bool as_unsigned = false) : present_(t.defined()) {
    if (present_) view_ = hw::detail::dl_view(t, as_unsigned);
  }
  operator DLTensor*() { return present_ ? &view_ : nullptr; }
  operator const DLTensor*() { return present_ ? &view_ : nullptr; }

 private:
  DLTensor view_{};
  bool present_;
};

// Whether `kernels` (may be null) offers kernel `id`.
inline bool offered(const hw::Kernels* kernels, KernelId id) { return kernels != nullptr && kernels->offers(id); }

// The stream for a kernel over tensors on `t`'s device.
inline verlpp_stream kernel_stream(const hw::Kernels& kernels, const at::Tensor& t) {
  return kernels.current_stream(t.device());
}

}  // namespace verlpp::ops::detail
