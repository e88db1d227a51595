// cuda: SwiGLU's product silu(gate) * up and its backward (ABI 1.2's silu_mul and
// silu_mul_backward), and their launchers. Elementwise over [N, F] rows at any stride (gate and
// up are often the two halves of one [N, 2F] projection), so the kernels are bound by memory:
// 16-byte vectors where every row stride and the row length allow them (8 bf16/f16 values),
// scalars otherwise, over a grid-stride loop. fp32 math with the dtype's rounding where HF's
// forward and autograd's backward round, so results match LibTorch's ops to the last bit but for
// the exp (expf against LibTorch's std::exp: both within an ulp).
#include "dependent_launch.cuh"
#include "block_reduce.cuh"
#include "kernels.hpp"
#include "layer_ops.cuh"

#include "gpu_device.cuh"

#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

namespace verlpp::cuda {
namespace {

// Rows of `f` values; element (r, j) of operand k is at base_k + r * stride_k + j.
struct Rows {
  int64_t n, f, items;  // items = n * f / VEC work items
};

// Calls f(r, c) for every work item (row r, first column c of a pack of VEC) in a grid-stride
// loop. I: the index type, 32-bit whenever the items fit (a 64-bit division per item costs more
// than the loads at decode sizes).
template <int VEC, class I, class F>
__device__ __forceinline__ void for_each_item(const Rows& rows, F&& f) {
  const I per_row = I(rows.f / VEC), items = I(rows.items);
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < items; i += I(gridDim.x) * I(blockDim.x))
    f(int64_t(i / per_row), int64_t(i % per_row) * VEC);
}

template <class T, int VEC, class I>
__global__ void silu_mul_kernel(const T* __restrict__ gate, int64_t gate_stride, const T* __restrict__ up,
                                int64_t up_stride, T* __restrict__ out, int64_t out_stride, Rows rows) {
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
  using P = Pack<T, VEC>;
  for_each_item<VEC, I>(rows, [&](int64_t r, int64_t c) {
    const P g = *reinterpret_cast<const P*>(gate + r * gate_stride + c);
    const P u = *reinterpret_cast<const P*>(up + r * up_stride + c);
    P o;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      o.v[e] = from_float<T>(silu_product<T>(to_float(g.v[e]), to_float(u.v[e])));
    }
    *reinterpret_cast<P*>(out + r * out_stride + c) = o;
  });
}

template <class T, int VEC, class I>
__global__ void silu_mul_backward_kernel(const T* __restrict__ gate, int64_t gate_stride, const T* __restrict__ up,
                                         int64_t up_stride, const T* __restrict__ grad, int64_t grad_stride,
                                         T* __restrict__ grad_gate, int64_t grad_gate_stride, T* __restrict__ grad_up,
                                         int64_t grad_up_stride, Rows rows) {
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
  using P = Pack<T, VEC>;
  for_each_item<VEC, I>(rows, [&](int64_t r, int64_t c) {
    const P g = *reinterpret_cast<const P*>(gate + r * gate_stride + c);
    const P u = *reinterpret_cast<const P*>(up + r * up_stride + c);
    const P dy = *reinterpret_cast<const P*>(grad + r * grad_stride + c);
    P dg, du;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const float x = to_float(g.v[e]), d = to_float(dy.v[e]);
      const float s = round_to<T>(silu_f32(x));
      const float grad_s = round_to<T>(d * to_float(u.v[e]));
      const float sig = 1.0f / (1.0f + expf(-x));
      dg.v[e] = from_float<T>(grad_s * sig * (1.0f + x * (1.0f - sig)));
      du.v[e] = from_float<T>(d * s);
    }
    *reinterpret_cast<P*>(grad_gate + r * grad_gate_stride + c) = dg;
    *reinterpret_cast<P*>(grad_up + r * grad_up_stride + c) = du;
  });
}

// Whether 16-byte packs fit every operand: the row length and strides in whole packs, the
// bases aligned.
template <class T>
bool vectors_fit(int64_t f, std::initializer_list<std::pair<const void*, int64_t>> operands) {
  constexpr int64_t kVec = 16 / sizeof(T);
  if (f % kVec != 0) return false;
  for (const auto& [base, stride] : operands)
    if (reinterpret_cast<uintptr_t>(base) % 16 != 0 || stride % kVec != 0) return false;
  return true;
}

// Blocks of 256 threads, enough for a few waves on any GPU; the loop strides over the rest.
dim3 grid_for(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  return dim3(unsigned(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536));
}

// The work items of [n, f] operands (16-byte packs when `vec`, else single values), and a call
// of launch(pack width, index type) with the kernel variant that fits: 32-bit indices while the
// grid-stride loop's i + stride stays below 2^31 (items below 2^30; the stride is at most 2^24).
template <class T, class Launch>
Rows dispatch_rows(bool vec, int64_t n, int64_t f, Launch&& launch) {
  constexpr int kVec = 16 / sizeof(T);
  const Rows rows{n, f, vec ? n * (f / kVec) : n * f};
  const bool narrow = rows.items < (int64_t(1) << 30);
  if (vec && narrow)
    launch(std::integral_constant<int, kVec>{}, uint32_t{}, rows);
  else if (vec)
    launch(std::integral_constant<int, kVec>{}, int64_t{}, rows);
  else if (narrow)
    launch(std::integral_constant<int, 1>{}, uint32_t{}, rows);
  else
    launch(std::integral_constant<int, 1>{}, int64_t{}, rows);
  return rows;
}

template <class T>
gpuError_t silu_mul_as(const void* gate, int64_t gs, const void* up, int64_t us, void* out, int64_t os, int64_t n,
                       int64_t f, gpuStream_t stream) {
  const T *g = static_cast<const T*>(gate), *u = static_cast<const T*>(up);
  T* o = static_cast<T*>(out);
  gpuError_t launched = gpuSuccess;
  dispatch_rows<T>(vectors_fit<T>(f, {{gate, gs}, {up, us}, {out, os}}), n, f,
                   [&](auto width, auto index, const Rows& rows) {
                     launched = launch_kernel(silu_mul_kernel<T, decltype(width)::value, decltype(index)>,
                                              grid_for(rows.items), kThreads, 0, stream, g, gs, u, us, o, os, rows);
                   });
  return launched;
}

template <class T>
gpuError_t silu_mul_backward_as(const void* gate, int64_t gs, const void* up, int64_t us, const void* grad, int64_t ds,
                                void* grad_gate, int64_t dgs, void* grad_up, int64_t dus, int64_t n, int64_t f,
                                gpuStream_t stream) {
  const T *g = static_cast<const T*>(gate), *u = static_cast<const T*>(up), *d = static_cast<const T*>(grad);
  T *dg = static_cast<T*>(grad_gate), *du = static_cast<T*>(grad_up);
  const bool vec = vectors_fit<T>(f, {{gate, gs}, {up, us}, {grad, ds}, {grad_gate, dgs}, {grad_up, dus}});
  gpuError_t launched = gpuSuccess;
  dispatch_rows<T>(vec, n, f, [&](auto width, auto index, const Rows& rows) {
    launched = launch_kernel(silu_mul_backward_kernel<T, decltype(width)::value, decltype(index)>, grid_for(rows.items),
                             kThreads, 0, stream, g, gs, u, us, d, ds, dg, dgs, du, dus, rows);
  });
  return launched;
}

}  // namespace

gpuError_t launch_silu_mul(const void* gate, int64_t gate_stride, const void* up, int64_t up_stride, void* out,
                           int64_t out_stride, FloatType type, int64_t n, int64_t f, gpuStream_t stream) {
  if (n == 0 || f == 0) return gpuSuccess;
  switch (type) {
    case FloatType::f32:
      return silu_mul_as<float>(gate, gate_stride, up, up_stride, out, out_stride, n, f, stream);
    case FloatType::f16:
      return silu_mul_as<__half>(gate, gate_stride, up, up_stride, out, out_stride, n, f, stream);
    case FloatType::bf16:
      return silu_mul_as<gpu_bfloat16>(gate, gate_stride, up, up_stride, out, out_stride, n, f, stream);
  }
  return gpuErrorInvalidValue;
}

gpuError_t launch_silu_mul_backward(const void* gate, int64_t gate_stride, const void* up, int64_t up_stride,
                                    const void* grad, int64_t grad_stride, void* grad_gate, int64_t grad_gate_stride,
                                    void* grad_up, int64_t grad_up_stride, FloatType type, int64_t n, int64_t f,
                                    gpuStream_t stream) {
  if (n == 0 || f == 0) return gpuSuccess;
  switch (type) {
    case FloatType::f32:
      return silu_mul_backward_as<float>(gate, gate_stride, up, up_stride, grad, grad_stride, grad_gate,
                                         grad_gate_stride, grad_up, grad_up_stride, n, f, stream);
    case FloatType::f16:
      return silu_mul_backward_as<__half>(gate, gate_stride, up, up_stride, grad, grad_stride, grad_gate,
                                          grad_gate_stride, grad_up, grad_up_stride, n, f, stream);
    case FloatType::bf16:
      return silu_mul_backward_as<gpu_bfloat16>(gate, gate_stride, up, up_stride, grad, grad_stride, grad_gate,
                                                grad_gate_stride, grad_up, grad_up_stride, n, f, stream);
  }
  return gpuErrorInvalidValue;
}

}  // namespace verlpp::cuda
