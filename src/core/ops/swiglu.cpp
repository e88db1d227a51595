// silu_mul and silu_mul_backward (swiglu.hpp): the kernel calls, or LibTorch's silu ops.
#include "swiglu.hpp"

#include "kernel_call.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/silu_backward.h>

namespace verlpp::ops {
using detail::KernelId;
using detail::Operand;

void silu_mul(const hw::Kernels* kernels, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& out) {
  if (detail::offered(kernels, KernelId::silu_mul)) {
    kernels->call<KernelId::silu_mul>(Operand(gate), Operand(up), Operand(out), detail::kernel_stream(*kernels, gate));
    return;
  }
  out.copy_(at::silu(gate) * up);
}

void silu_mul_backward(const hw::Kernels* kernels, const at::Tensor& gate, const at::Tensor& up,
                       const at::Tensor& grad_out, const at::Tensor& grad_gate, const at::Tensor& grad_up) {
  if (detail::offered(kernels, KernelId::silu_mul_backward)) {
    kernels->call<KernelId::silu_mul_backward>(Operand(gate), Operand(up), Operand(grad_out), Operand(grad_gate),
                                               Operand(grad_up), detail::kernel_stream(*kernels, gate));
    return;
  }
  grad_up.copy_(grad_out * at::silu(gate));
  grad_gate.copy_(at::silu_backward(grad_out * up, gate));
}

}  // namespace verlpp::ops
