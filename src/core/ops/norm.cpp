// rms_norm and add_rms_norm (norm.hpp): the kernel call, or model::rms_norm after an in-place add.
#include "norm.hpp"

#include "kernel_call.hpp"

#include <verlpp/model/layers.hpp>

namespace verlpp::ops {
using detail::KernelId;
using detail::Operand;

void rms_norm(const hw::Kernels* kernels, const at::Tensor& x, const at::Tensor& weight, double eps,
              const at::Tensor& out) {
  if (detail::offered(kernels, KernelId::rms_norm)) {
    kernels->call<KernelId::rms_norm>(Operand(x), Operand(weight), float(eps), Operand(out),
                                      detail::kernel_stream(*kernels, x));
    return;
  }
  out.copy_(model::rms_norm(x, weight, eps));
}

void add_rms_norm(const hw::Kernels* kernels, const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                  double eps, const at::Tensor& out) {
  if (detail::offered(kernels, KernelId::add_rms_norm)) {
    kernels->call<KernelId::add_rms_norm>(Operand(x), Operand(residual), Operand(weight), float(eps), Operand(out),
                                          detail::kernel_stream(*kernels, x));
    return;
  }
  residual.add_(x);
  out.copy_(model::rms_norm(residual, weight, eps));
}

}  // namespace verlpp::ops
