// ops::PluginLayerKernels: a layer's RoPE and the MLP's silu(gate) * up through a plugin's kernels
// (rotary_embedding, or ABI 1.3's rotary_kv_store, which also hands back v as a contiguous copy
// from the same pass; ABI 1.2's silu_mul and silu_mul_backward), each with a backward of its own,
// for the training forwards and the engine's steps (model::LayerKernels); and, without autograd
// only, ABI 1.3's add_rms_norm (a residual add fused with the next RMSNorm).
//  - RoPE is a rotation by +angle of each (j, j + D/2) pair, so its gradient is the rotation of
//    the output gradient by -angle: the same kernel at negated positions (float(-p) * f =
//    -(float(p) * f) exactly, so cos is unchanged and sin flips sign). The kernel rounds like
//    the model's apply_rope (docs/plugin-abi.md, "Kernel contracts"), and so does this backward
//    like autograd's through apply_rope. One launch rotates q and k together; LibTorch's path
//    took about ten broadcasting kernels a layer each way (6 ms of a 90 ms training step of
//    Qwen2.5-0.5B on an H200).
//  - silu_mul replaces silu, a product, and in the backward a product per input and
//    silu_backward: one kernel each way, and only gate and up are kept for the backward.
#pragma once

#include <verlpp/model/decoder.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <tuple>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::ops {

// Which of the plugin's kernels a PluginLayerKernels uses.
struct LayerKernelsOptions {
  // Offer add_rms_norm (the rollout engine). The trainer's forwards leave it off: its kernel
  // rounds the normalised value before the weight (HF's order) where LibTorch's rms_norm rounds
  // once, and a no-grad old_log_prob pass must compute exactly what the training forward computes.
  bool fuse_adds = false;
  // RoPE through rotary_kv_store where offered (rotated q, k and a contiguous v in one pass);
  // false keeps rotary_embedding on contiguous copies (side-by-side timing, tests).
  bool rotate_qkv = true;
};

class PluginLayerKernels : public model::LayerKernels {
 public:
  // `kernels` must outlive this object and every backward through it.
  explicit PluginLayerKernels(const hw::Kernels& kernels, LayerKernelsOptions options = {})
      : kernels_(kernels), options_(options) {}
  // Whether the kernels offer any of rotary_embedding, rotary_kv_store, silu_mul with
  // silu_mul_backward, or (with fuse_adds) add_rms_norm.
  static bool offered(const hw::Kernels* kernels, bool fuse_adds = false);

  // Rotated copies of q and k, and v or (through rotary_kv_store, with options.rotate_qkv) a
  // contiguous copy of it; {} without a kernel, for a dtype they do not take (fp64) or q/k
  // dtypes that differ.
  std::tuple<at::Tensor, at::Tensor, at::Tensor> rotate(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                        const at::Tensor& positions,
                                                        const at::Tensor& inv_freq) const override;
  // silu(gate) * up; undefined without the kernels or for a dtype they do not take.
  at::Tensor silu_mul(const at::Tensor& gate, const at::Tensor& up) const override;
  // silu_mul over the halves of gate_up [..., 2F], its gradient one [..., 2F] tensor; undefined
  // without the kernels or for a dtype they do not take.
  at::Tensor silu_mul_halves(const at::Tensor& gate_up) const override;
  bool offers_silu_mul_halves() const override;
  // ABI 1.3's add_rms_norm, the sum written into `residual`; {} without the kernel, where
  // autograd would record (it has no backward) or for operands it does not take.
  std::pair<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
                                                 double eps) const override;
  // How many forward calls ran through the kernels (qkv_rotations: through rotary_kv_store), for tests.
  int64_t rotations() const { return rotations_.load(); }
  int64_t qkv_rotations() const { return qkv_rotations_.load(); }
  int64_t silu_muls() const { return silu_muls_.load(); }
  int64_t add_rms_norms() const { return add_rms_norms_.load(); }

 private:
  // slot_mapping 0..n-1 for rotary_kv_store, made once per forward's token count (every layer
  // and the backward share it).
  at::Tensor slots_for(int64_t n, const c10::Device& device) const;

  const hw::Kernels& kernels_;
  LayerKernelsOptions options_;
  mutable std::atomic<int64_t> rotations_{0}, qkv_rotations_{0}, silu_muls_{0}, add_rms_norms_{0};
  mutable std::mutex slots_mutex_;  // the backward thread may recompute layers (checkpointing)
  mutable at::Tensor slots_;        // [>= n] int64, on the last device asked for
};

// A PluginLayerKernels over `kernels`, or null when they offer none of its kernels (or are null).
// Used by the training forwards (response_log_probs) and, with fuse_adds, the rollout engine's steps.
std::shared_ptr<const model::LayerKernels> layer_kernels_for(const hw::Kernels* kernels,
                                                             LayerKernelsOptions options = {});

}  // namespace verlpp::ops
