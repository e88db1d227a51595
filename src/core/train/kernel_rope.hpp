// KernelRope: the training forwards' RoPE through a plugin's rotary_embedding kernel, with a
// backward of its own. RoPE is a rotation by +angle of each (j, j + D/2) pair, so its gradient
// is the rotation of the output gradient by -angle: the same kernel at negated positions
// (float(-p) * f = -(float(p) * f) exactly, so cos is unchanged and sin flips sign). The kernel
// rounds like the model's apply_rope (docs/plugin-abi.md, "Kernel contracts"), and so does this
// backward like autograd's through apply_rope. One launch rotates q and k together; LibTorch's
// path took about ten broadcasting kernels a layer each way (6 ms of a 90 ms training step of
// Qwen2.5-0.5B on an H200).
#pragma once

#include <verlpp/model/decoder.hpp>

#include <atomic>
#include <cstdint>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::train::detail {

class KernelRope : public model::RopeBackend {
 public:
  // `kernels` must outlive this object and every backward through it.
  explicit KernelRope(const hw::Kernels& kernels) : kernels_(kernels) {}
  // Whether the kernels offer rotary_embedding (then rotate() takes f32/bf16/f16 q and k).
  static bool offered(const hw::Kernels* kernels);

  // Rotated copies of q and k; {} for a dtype the kernel does not take (fp64) or q/k dtypes that differ.
  std::pair<at::Tensor, at::Tensor> rotate(const at::Tensor& q, const at::Tensor& k, const at::Tensor& positions,
                                           const at::Tensor& inv_freq) const override;
  // How many rotations ran through the kernel (forward calls), for tests.
  int64_t rotations() const { return rotations_.load(); }

 private:
  const hw::Kernels& kernels_;
  mutable std::atomic<int64_t> rotations_{0};
};

}  // namespace verlpp::train::detail
