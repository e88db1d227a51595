// PluginLayerKernels (layer_kernels.hpp): torch::autograd::Functions around the ops of the
// plugin's rotary_embedding (or rotary_kv_store) and silu_mul / silu_mul_backward. Custom
// Functions need full autograd headers, hence the #undef below.
#undef TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include "layer_kernels.hpp"

#include "norm.hpp"
#include "rotary.hpp"
#include "swiglu.hpp"

#include <verlpp/hw/kernels.hpp>

#include <torch/csrc/autograd/custom_function.h>

namespace verlpp::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A contiguous [N, heads, D] copy of x [..., heads, D].
at::Tensor flat_copy(const at::Tensor& x) {
  return x.reshape({-1, x.size(-2), x.size(-1)}).clone(at::MemoryFormat::Contiguous);
}

struct RotaryFn : torch::autograd::Function<RotaryFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& positions, const at::Tensor& inv_freq, int64_t kernels_address) {
    const auto& kernels = *reinterpret_cast<const hw::Kernels*>(kernels_address);
    at::Tensor qr = flat_copy(q), kr = flat_copy(k);
    rotary_embedding(&kernels, qr, kr, positions, inv_freq);
    ctx->save_for_backward({positions, inv_freq});
    ctx->saved_data["kernels"] = kernels_address;
    return {qr.view(q.sizes()), kr.view(k.sizes())};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list saved = ctx->get_saved_variables();
    const auto& kernels = *reinterpret_cast<const hw::Kernels*>(ctx->saved_data["kernels"].toInt());
    const at::Tensor& positions = saved[0];
    const at::Tensor& inv_freq = saved[1];
    const at::Tensor& gq = grads[0];
    const at::Tensor& gk = grads[1];
    at::Tensor gqr, gkr;
    if (gq.defined()) gqr = flat_copy(gq);
    if (gk.defined()) gkr = flat_copy(gk);
    if (gq.defined() || gk.defined()) {
      // The inverse rotation: the same kernel at -positions. An absent gradient is no operand
      // (the kernel takes q or k NULL).
      rotary_embedding(&kernels, gqr, gkr, positions.neg(), inv_freq);
    }
    return {gq.defined() ? gqr.view(gq.sizes()) : at::Tensor(), gk.defined() ? gkr.view(gk.sizes()) : at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// [N, heads, D] rows of x [..., heads, D] as the fused kernel reads them (rows at any stride,
// heads and D dense), copying only a layout it cannot read.
at::Tensor token_rows(const at::Tensor& x) {
  at::Tensor r = x.reshape({-1, x.size(-2), x.size(-1)});
  if (r.stride(2) != 1 || r.stride(1) != r.size(2)) r = r.contiguous();
  return r;
}

// RoPE of a training forward through ABI 1.3's rotary_kv_store: rotated q and k and a copy of v,
// all contiguous, from the q/k/v projection's strided views in one kernel each way, where
// RotaryFn takes two copies and an in-place rotation (and attention then reads v strided). The
// backward is the same kernel at -positions on the output gradients (RotaryFn's reasoning),
// which also passes v's gradient through as a copy. The rotation rounds as rotary_embedding's
// (the kernel contract), so both functions compute the same bits. The kernel's "cache" is N
// one-token blocks written at slots 0..N-1: q_out [N, H, D], k_out and v_out [N, 1, K, D].
struct RotaryQkvFn : torch::autograd::Function<RotaryQkvFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& positions, const at::Tensor& inv_freq, const at::Tensor& slots,
                               int64_t kernels_address) {
    const auto& kernels = *reinterpret_cast<const hw::Kernels*>(kernels_address);
    const int64_t n = positions.size(0), heads = q.size(-2), kv = k.size(-2), d = q.size(-1);
    at::Tensor q_out = at::empty({n, heads, d}, q.options()), k_out = at::empty({n, 1, kv, d}, k.options());
    at::Tensor v_out = at::empty({n, 1, kv, d}, v.options());
    rotary_kv_store(&kernels, token_rows(q), token_rows(k), token_rows(v), positions, inv_freq, slots, q_out, k_out,
                    v_out);
    ctx->save_for_backward({positions, inv_freq, slots});
    ctx->saved_data["kernels"] = kernels_address;
    ctx->saved_data["q_shape"] = q.sizes().vec();
    ctx->saved_data["kv_shape"] = k.sizes().vec();
    return {q_out.view(q.sizes()), k_out.view(k.sizes()), v_out.view(v.sizes())};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list saved = ctx->get_saved_variables();
    const auto& kernels = *reinterpret_cast<const hw::Kernels*>(ctx->saved_data["kernels"].toInt());
    const at::Tensor &positions = saved[0], &inv_freq = saved[1], &slots = saved[2];
    const at::Tensor* any = nullptr;
    for (const at::Tensor& g : grads)
      if (g.defined()) any = &g;
    if (any == nullptr) return variable_list(7);
    // A missing gradient (an output nothing used) is zeros, so the kernel's operands stay whole.
    auto grad_or_zeros = [&](size_t i, const char* shape) {
      return grads[i].defined() ? grads[i] : at::zeros(ctx->saved_data[shape].toIntVector(), any->options());
    };
    const at::Tensor gq = grad_or_zeros(0, "q_shape"), gk = grad_or_zeros(1, "kv_shape"),
                     gv = grad_or_zeros(2, "kv_shape");
    const int64_t n = positions.size(0), heads = gq.size(-2), kv = gk.size(-2), d = gq.size(-1);
    at::Tensor q_out = at::empty({n, heads, d}, gq.options()), k_out = at::empty({n, 1, kv, d}, gk.options());
    at::Tensor v_out = at::empty({n, 1, kv, d}, gv.options());
    rotary_kv_store(&kernels, token_rows(gq), token_rows(gk), token_rows(gv), positions.neg(), inv_freq, slots, q_out,
                    k_out, v_out);
    return {q_out.view(gq.sizes()),
            k_out.view(gk.sizes()),
            v_out.view(gv.sizes()),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

bool kernel_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf; }

bool silu_mul_offered(const hw::Kernels& kernels) {
  return kernels.offers(hw::KernelId::silu_mul) && kernels.offers(hw::KernelId::silu_mul_backward);
}

// A [N, F] view of x [..., F] (rows at any stride: reshape copies only if it must).
at::Tensor rows_of(const at::Tensor& x) { return x.reshape({-1, x.size(-1)}); }

struct SiluMulFn : torch::autograd::Function<SiluMulFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up,
                            int64_t kernels_address) {
    const auto& kernels = *reinterpret_cast<const hw::Kernels*>(kernels_address);
    at::Tensor out = at::empty(gate.sizes(), gate.options());
    silu_mul(&kernels, rows_of(gate), rows_of(up), out.view({-1, gate.size(-1)}));
    ctx->save_for_backward({gate, up});
    ctx->saved_data["kernels"] = kernels_address;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list saved = ctx->get_saved_variables();
    const auto& kernels = *reinterpret_cast<const hw::Kernels*>(ctx->saved_data["kernels"].toInt());
    const at::Tensor &gate = saved[0], &up = saved[1];
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const at::Tensor grad = grads[0].contiguous();
    at::Tensor grad_gate = at::empty(gate.sizes(), gate.options()), grad_up = at::empty(up.sizes(), up.options());
    silu_mul_backward(&kernels, rows_of(gate), rows_of(up), rows_of(grad), grad_gate.view({-1, gate.size(-1)}),
                      grad_up.view({-1, up.size(-1)}));
    return {grad_gate, grad_up, at::Tensor()};
  }
};

// silu_mul over [gate | up] = gate_up [..., 2F], one autograd input: the backward kernel writes
// grad_gate and grad_up as the halves of one gradient tensor.
struct SiluMulHalvesFn : torch::autograd::Function<SiluMulHalvesFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up, int64_t kernels_address) {
    const auto& kernels = *reinterpret_cast<const hw::Kernels*>(kernels_address);
    const int64_t f = gate_up.size(-1) / 2;
    std::vector<int64_t> shape(gate_up.sizes().begin(), gate_up.sizes().end());
    shape.back() = f;
    at::Tensor out = at::empty(shape, gate_up.options());
    const at::Tensor rows = rows_of(gate_up);
    silu_mul(&kernels, rows.narrow(1, 0, f), rows.narrow(1, f, f), out.view({-1, f}));
    ctx->save_for_backward({gate_up});
    ctx->saved_data["kernels"] = kernels_address;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor gate_up = ctx->get_saved_variables()[0];
    const auto& kernels = *reinterpret_cast<const hw::Kernels*>(ctx->saved_data["kernels"].toInt());
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor()};
    const int64_t f = gate_up.size(-1) / 2;
    const at::Tensor grad = grads[0].contiguous();
    at::Tensor grad_gate_up = at::empty(gate_up.sizes(), gate_up.options());
    const at::Tensor rows = rows_of(gate_up), grad_rows = grad_gate_up.view({-1, 2 * f});
    silu_mul_backward(&kernels, rows.narrow(1, 0, f), rows.narrow(1, f, f), rows_of(grad), grad_rows.narrow(1, 0, f),
                      grad_rows.narrow(1, f, f));
    return {grad_gate_up, at::Tensor()};
  }
};

}  // namespace

at::Tensor PluginLayerKernels::silu_mul_halves(const at::Tensor& gate_up) const {
  if (!silu_mul_offered(kernels_) || !kernel_dtype(gate_up.scalar_type()) || gate_up.dim() == 0 ||
      gate_up.size(-1) % 2 != 0 || gate_up.stride(-1) != 1)
    return {};
  ++silu_muls_;
  return SiluMulHalvesFn::apply(gate_up, static_cast<int64_t>(reinterpret_cast<intptr_t>(&kernels_)));
}

bool PluginLayerKernels::offers_silu_mul_halves() const { return silu_mul_offered(kernels_); }

bool PluginLayerKernels::offered(const hw::Kernels* kernels, bool fuse_adds) {
  return kernels != nullptr &&
         (kernels->offers(hw::KernelId::rotary_embedding) || kernels->offers(hw::KernelId::rotary_kv_store) ||
          silu_mul_offered(*kernels) || (fuse_adds && kernels->offers(hw::KernelId::add_rms_norm)));
}

std::shared_ptr<const model::LayerKernels> layer_kernels_for(const hw::Kernels* kernels, LayerKernelsOptions options) {
  if (!PluginLayerKernels::offered(kernels, options.fuse_adds)) return nullptr;
  return std::make_shared<PluginLayerKernels>(*kernels, options);
}

at::Tensor PluginLayerKernels::silu_mul(const at::Tensor& gate, const at::Tensor& up) const {
  // The kernels take rows at any stride but dense columns (a transposed view is declined).
  if (!silu_mul_offered(kernels_) || !kernel_dtype(gate.scalar_type()) || up.scalar_type() != gate.scalar_type() ||
      up.sizes() != gate.sizes() || gate.dim() == 0 || gate.stride(-1) != 1 || up.stride(-1) != 1)
    return {};
  ++silu_muls_;
  return SiluMulFn::apply(gate, up, static_cast<int64_t>(reinterpret_cast<intptr_t>(&kernels_)));
}

at::Tensor PluginLayerKernels::slots_for(int64_t n, const c10::Device& device) const {
  std::lock_guard<std::mutex> lock(slots_mutex_);
  if (!slots_.defined() || slots_.size(0) < n || slots_.device() != device)
    slots_ = at::arange(n, at::TensorOptions().dtype(at::kLong).device(device));
  return slots_.narrow(0, 0, n);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> PluginLayerKernels::rotate(const at::Tensor& q, const at::Tensor& k,
                                                                          const at::Tensor& v,
                                                                          const at::Tensor& positions,
                                                                          const at::Tensor& inv_freq) const {
  const at::ScalarType t = q.scalar_type();
  if (!kernel_dtype(t) || k.scalar_type() != t) return {};
  const at::Tensor flat_positions = positions.reshape({-1}).contiguous();
  const auto address = static_cast<int64_t>(reinterpret_cast<intptr_t>(&kernels_));
  if (options_.rotate_qkv && kernels_.offers(hw::KernelId::rotary_kv_store) && v.scalar_type() == t &&
      v.sizes() == k.sizes()) {
    ++rotations_;
    ++qkv_rotations_;
    variable_list out = RotaryQkvFn::apply(q, k, v, flat_positions, inv_freq.contiguous(),
                                           slots_for(flat_positions.size(0), q.device()), address);
    return {out[0], out[1], out[2]};
  }
  if (!kernels_.offers(hw::KernelId::rotary_embedding)) return {};
  ++rotations_;
  variable_list out = RotaryFn::apply(q, k, flat_positions, inv_freq.contiguous(), address);
  return {out[0], out[1], v};
}

std::pair<at::Tensor, at::Tensor> PluginLayerKernels::add_rms_norm(const at::Tensor& x, at::Tensor& residual,
                                                                   const at::Tensor& weight, double eps) const {
  const bool recorded =
      at::GradMode::is_enabled() && (x.requires_grad() || residual.requires_grad() || weight.requires_grad());
  const at::ScalarType t = residual.scalar_type();
  if (!options_.fuse_adds || !kernels_.offers(hw::KernelId::add_rms_norm) || recorded || !kernel_dtype(t) ||
      x.scalar_type() != t || weight.scalar_type() != t || x.sizes() != residual.sizes() || residual.dim() == 0 ||
      weight.dim() != 1 || weight.size(0) != residual.size(-1) || !x.is_contiguous() || !residual.is_contiguous() ||
      !weight.is_contiguous())
    return {};
  ++add_rms_norms_;
  at::Tensor out = at::empty(residual.sizes(), residual.options());
  const int64_t d = residual.size(-1);
  ops::add_rms_norm(&kernels_, x.view({-1, d}), residual.view({-1, d}), weight, eps, out.view({-1, d}));
  return {residual, out};
}

}  // namespace verlpp::ops
