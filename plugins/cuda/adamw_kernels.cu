// cuda: ABI 1.4's adamw_update, one AdamW update of many tensors (a model's parameters) in a few
// launches. Why a kernel of our own: the trainer keeps fp32 master weights and a 16-bit compute
// copy, and LibTorch's fused AdamW wants gradients in the parameters' dtype. Its step was four
// passes over the weights (16-bit gradients cast into fp32 ones, clipping's multiply, AdamW,
// the compute copy refreshed from the masters: ~10 ms of a Qwen2.5-0.5B step on an H200); here it
// is one, reading 16-bit gradients and the clipping factor as they are and writing the compute
// copy in the same pass, 28 bytes a parameter instead of ~46.
//
// The work is split into tiles of kTile elements of one tensor, one block per tile; a launch
// covers up to kTensorsPerLaunch tensors whose pointers travel in the kernel's parameters (under
// HIP's 4 KB limit), so no table is copied to the device and the call needs no host sync.
#include "dependent_launch.cuh"
#include "block_reduce.cuh"
#include "kernels.hpp"

#include "gpu_device.cuh"

#include <cstdint>
#include <type_traits>

namespace verlpp::cuda {
namespace {

constexpr int kTensorsPerLaunch = 64;
constexpr int kVec = 4;                                  // elements per vector access
constexpr int64_t kTile = int64_t(kThreads) * kVec * 4;  // elements per block: 4 vectors a thread

struct AdamwBatch {
  float* params[kTensorsPerLaunch];
  const void* grads[kTensorsPerLaunch];
  float* exp_avg[kTensorsPerLaunch];
  float* exp_avg_sq[kTensorsPerLaunch];
  void* copies[kTensorsPerLaunch];
  int64_t numel[kTensorsPerLaunch];
  int32_t first_block[kTensorsPerLaunch + 1];  // tensor t's tiles are blocks [first_block[t], first_block[t + 1])
  uint64_t vector_ok;                          // bit t: tensor t's operands are aligned for kVec-element accesses
  int32_t count;
};
static_assert(sizeof(AdamwBatch) < 4000, "kernel parameters must stay under HIP's 4 KB");

struct NoCopy {};  // the copies template argument when there are none

// One element's update, in plugin_abi.h's order (fused multiply-adds allowed by the contract).
__device__ __forceinline__ float adamw_element(float& p, float& m, float& v, float g, const AdamwScalars& s) {
  float w = p - s.weight_decay_factor * p;
  const float mi = m + s.one_minus_beta1 * (g - m);
  const float vi = s.beta2 * v + s.one_minus_beta2 * g * g;
  w = w - s.step_size * mi / (sqrtf(vi) / s.bias_correction2_sqrt + s.eps);
  p = w;
  m = mi;
  v = vi;
  return w;
}

template <class C>
__device__ __forceinline__ void store_copy(void* copies, int64_t i, float w) {
  if constexpr (!std::is_same_v<C, NoCopy>) static_cast<C*>(copies)[i] = from_float<C>(w);
}

template <class G, class C>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(const AdamwBatch batch, const AdamwScalars s, const float* grad_scale) {
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
  float scale = 1.0f;
  if (grad_scale != nullptr) {
    scale = *grad_scale;
    if (!isfinite(scale)) return;  // a skipped step writes nothing
  }
  // This block's tensor: the last t with first_block[t] <= blockIdx.x.
  int lo = 0, hi = batch.count - 1;
  const int32_t block = int32_t(blockIdx.x);
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (batch.first_block[mid] <= block)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int t = lo;
  float* __restrict__ p = batch.params[t];
  float* __restrict__ m = batch.exp_avg[t];
  float* __restrict__ v = batch.exp_avg_sq[t];
  const G* __restrict__ g = static_cast<const G*>(batch.grads[t]);
  void* copies = batch.copies[t];
  const int64_t begin = int64_t(block - batch.first_block[t]) * kTile;
  const int64_t end = begin + kTile < batch.numel[t] ? begin + kTile : batch.numel[t];
  // Tiles start at multiples of kTile, so aligned bases keep every vector aligned.
  const int64_t vector_end = (batch.vector_ok >> t) & 1 ? begin + (end - begin) / kVec * kVec : begin;
  for (int64_t i = begin + int64_t(threadIdx.x) * kVec; i < vector_end; i += int64_t(kThreads) * kVec) {
    float4 pv = *reinterpret_cast<const float4*>(p + i);
    float4 mv = *reinterpret_cast<const float4*>(m + i);
    float4 vv = *reinterpret_cast<const float4*>(v + i);
    const Pack<G, kVec> gv = *reinterpret_cast<const Pack<G, kVec>*>(g + i);
    float w[kVec];
    w[0] = adamw_element(pv.x, mv.x, vv.x, to_float(gv.v[0]) * scale, s);
    w[1] = adamw_element(pv.y, mv.y, vv.y, to_float(gv.v[1]) * scale, s);
    w[2] = adamw_element(pv.z, mv.z, vv.z, to_float(gv.v[2]) * scale, s);
    w[3] = adamw_element(pv.w, mv.w, vv.w, to_float(gv.v[3]) * scale, s);
    *reinterpret_cast<float4*>(p + i) = pv;
    *reinterpret_cast<float4*>(m + i) = mv;
    *reinterpret_cast<float4*>(v + i) = vv;
    if constexpr (!std::is_same_v<C, NoCopy>) {
      Pack<C, kVec> cv;
#pragma unroll
      for (int e = 0; e < kVec; ++e) cv.v[e] = from_float<C>(w[e]);
      *reinterpret_cast<Pack<C, kVec>*>(static_cast<C*>(copies) + i) = cv;
    }
  }
  for (int64_t i = vector_end + threadIdx.x; i < end; i += kThreads) {
    const float w = adamw_element(p[i], m[i], v[i], to_float(g[i]) * scale, s);
    store_copy<C>(copies, i, w);
  }
}

bool aligned(const void* ptr, size_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

template <class G, class C>
gpuError_t adamw_as(const AdamwTensors* tensors, int32_t count, const AdamwScalars& s, const float* grad_scale,
                    gpuStream_t stream) {
  for (int32_t first = 0; first < count; first += kTensorsPerLaunch) {
    AdamwBatch batch{};
    batch.count = count - first < kTensorsPerLaunch ? count - first : kTensorsPerLaunch;
    int64_t blocks = 0;
    for (int32_t k = 0; k < batch.count; ++k) {
      const AdamwTensors& x = tensors[first + k];
      batch.params[k] = x.param;
      batch.grads[k] = x.grad;
      batch.exp_avg[k] = x.exp_avg;
      batch.exp_avg_sq[k] = x.exp_avg_sq;
      batch.copies[k] = x.copy;
      batch.numel[k] = x.numel;
      batch.first_block[k] = int32_t(blocks);
      blocks += (x.numel + kTile - 1) / kTile;
      const size_t copy_bytes = std::is_same_v<C, NoCopy> ? 1 : sizeof(C) * kVec;
      if (aligned(x.param, 16) && aligned(x.exp_avg, 16) && aligned(x.exp_avg_sq, 16) &&
          aligned(x.grad, sizeof(G) * kVec) && (x.copy == nullptr || aligned(x.copy, copy_bytes)))
        batch.vector_ok |= uint64_t(1) << k;
    }
    batch.first_block[batch.count] = int32_t(blocks);
    if (blocks >= (int64_t(1) << 31)) return gpuErrorInvalidValue;  // 8.8e12 elements: beyond any device
    if (blocks == 0) continue;
    const gpuError_t e =
        launch_kernel(adamw_kernel<G, C>, dim3(unsigned(blocks)), dim3(kThreads), 0, stream, batch, s, grad_scale);
    if (e != gpuSuccess) return e;
  }
  return gpuSuccess;
}

template <class G>
gpuError_t adamw_with_grads(const AdamwTensors* tensors, int32_t count, bool has_copies, FloatType copy_type,
                            const AdamwScalars& s, const float* grad_scale, gpuStream_t stream) {
  if (!has_copies) return adamw_as<G, NoCopy>(tensors, count, s, grad_scale, stream);
  switch (copy_type) {
    case FloatType::f32:
      return adamw_as<G, float>(tensors, count, s, grad_scale, stream);
    case FloatType::f16:
      return adamw_as<G, __half>(tensors, count, s, grad_scale, stream);
    case FloatType::bf16:
      return adamw_as<G, gpu_bfloat16>(tensors, count, s, grad_scale, stream);
  }
  return gpuErrorInvalidValue;
}

}  // namespace

gpuError_t launch_adamw_update(const AdamwTensors* tensors, int32_t count, FloatType grad_type, bool has_copies,
                               FloatType copy_type, const AdamwScalars& scalars, const float* grad_scale,
                               gpuStream_t stream) {
  if (count <= 0) return gpuSuccess;
  switch (grad_type) {
    case FloatType::f32:
      return adamw_with_grads<float>(tensors, count, has_copies, copy_type, scalars, grad_scale, stream);
    case FloatType::f16:
      return adamw_with_grads<__half>(tensors, count, has_copies, copy_type, scalars, grad_scale, stream);
    case FloatType::bf16:
      return adamw_with_grads<gpu_bfloat16>(tensors, count, has_copies, copy_type, scalars, grad_scale, stream);
  }
  return gpuErrorInvalidValue;
}

}  // namespace verlpp::cuda
