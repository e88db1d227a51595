// logprob_entropy and logprob_backward (logprob.hpp): the kernel call, or the reference in fp32
// LibTorch ops over the whole [N, V] at once.
#include "logprob.hpp"

#include "kernel_call.hpp"

#include <verlpp/core/error.hpp>

#include <ATen/TensorOperators.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/logsumexp.h>
#include <ATen/ops/one_hot.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/zeros_like.h>

namespace verlpp::ops {
using detail::KernelId;
using detail::Operand;

void logprob_entropy(const hw::Kernels* kernels, const at::Tensor& logits, const at::Tensor& labels, double temperature,
                     const at::Tensor& logprob, const at::Tensor& entropy) {
  VERLPP_CHECK(logits.dim() == 2 && labels.dim() == 1 && logprob.dim() == 1,
               "ops::logprob_entropy: logits must be [N, V], labels and logprob [N]; got {} / {} / {} dims",
               logits.dim(), labels.dim(), logprob.dim());
  if (detail::offered(kernels, KernelId::logprob_entropy)) {
    kernels->call<KernelId::logprob_entropy>(Operand(logits), Operand(labels), float(temperature), Operand(logprob),
                                             Operand(entropy), detail::kernel_stream(*kernels, logits));
    return;
  }
  const at::Tensor z = logits.to(at::kFloat).div(temperature);  // [N, V]
  const at::Tensor lse = at::logsumexp(z, {-1});                // [N]
  logprob.copy_(z.gather(1, labels.unsqueeze(1)).squeeze(1).sub(lse));
  if (entropy.defined()) entropy.copy_(lse.sub(at::softmax(z, -1).mul(z).sum(-1)));
}

void logprob_backward(const hw::Kernels* kernels, const at::Tensor& logits, const at::Tensor& labels,
                      const at::Tensor& lse, const at::Tensor& grad_logprob, const at::Tensor& mean_z,
                      const at::Tensor& grad_entropy, double temperature, const at::Tensor& out_grad) {
  VERLPP_CHECK(mean_z.defined() == grad_entropy.defined(),
               "ops::logprob_backward: mean_z and grad_entropy go together");
  if (detail::offered(kernels, KernelId::logprob_backward)) {
    kernels->call<KernelId::logprob_backward>(Operand(logits), Operand(labels), Operand(lse), Operand(grad_logprob),
                                              Operand(mean_z), Operand(grad_entropy), float(temperature),
                                              Operand(out_grad), detail::kernel_stream(*kernels, logits));
    return;
  }
  const at::Tensor z = logits.to(at::kFloat).div(temperature);  // [N, V]
  const at::Tensor p = at::exp(z.sub(lse.unsqueeze(1)));
  at::Tensor g = at::zeros_like(z);
  if (grad_logprob.defined())
    g.add_(at::one_hot(labels, z.size(1)).to(at::kFloat).sub(p).mul(grad_logprob.unsqueeze(1)));
  if (grad_entropy.defined()) g.sub_(p.mul(z.sub(mean_z.unsqueeze(1))).mul(grad_entropy.unsqueeze(1)));
  out_grad.copy_(g.div_(temperature));
}

}  // namespace verlpp::ops
