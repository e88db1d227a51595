// silu_mul and silu_mul_backward (swiglu.hpp): the kernel calls, or the formulas in fp32 LibTorch ops.
#include "swiglu.hpp"

#include "kernel_call.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/sigmoid.h>

namespace verlpp::ops {
using detail::KernelId;
using detail::Operand;

void silu_mul(const hw::Kernels* kernels, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& out) {
  if (detail::offered(kernels, KernelId::silu_mul)) {
    kernels->call<KernelId::silu_mul>(Operand(gate), Operand(up), Operand(out), detail::kernel_stream(*kernels, gate));
    return;
  }
  // silu in fp32 (LibTorch's 16-bit CPU silu is missing or rounds inside), rounded once, then
  // the product in the dtype: the contract's roundings.
  out.copy_(at::silu(gate.to(at::kFloat)).to(gate.scalar_type()) * up);
}

void silu_mul_backward(const hw::Kernels* kernels, const at::Tensor& gate, const at::Tensor& up,
                       const at::Tensor& grad_out, const at::Tensor& grad_gate, const at::Tensor& grad_up) {
  if (detail::offered(kernels, KernelId::silu_mul_backward)) {
    kernels->call<KernelId::silu_mul_backward>(Operand(gate), Operand(up), Operand(grad_out), Operand(grad_gate),
                                               Operand(grad_up), detail::kernel_stream(*kernels, gate));
    return;
  }
  const at::Tensor x = gate.to(at::kFloat), sig = at::sigmoid(x);
  grad_up.copy_(grad_out * at::silu(x).to(gate.scalar_type()));
  // round(grad_out * up) times silu's derivative in fp32, rounded once (LibTorch's silu_backward formula).
  grad_gate.copy_((grad_out * up).to(at::kFloat) * sig * (x * (1 - sig) + 1));
}

}  // namespace verlpp::ops
