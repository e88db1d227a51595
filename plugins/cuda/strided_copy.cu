// cuda: the strided copy kernel behind tensor_copy (gathers and scatters of non-contiguous
// views). One thread per element, grid-stride; each thread turns its linear index (row-major
// over the shape) into source and destination offsets. Elements move as whole words of their
// size, so any dtype of 1 to 16 bytes is copied bit for bit.
#include "dependent_launch.cuh"
#include "block_reduce.cuh"
#include "kernels.hpp"

#include <cstdint>

namespace verlpp::cuda {
namespace {

struct alignas(8) Bytes16 {
  uint64_t lo, hi;
};

template <class Word>
__global__ void strided_copy_kernel(const Word* __restrict__ src, Word* __restrict__ dst, StridedLayout layout,
                                    int64_t n) {
  wait_for_prior_grids();  // before any memory access (dependent_launch.cuh)
  allow_dependents();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i, src_offset = 0, dst_offset = 0;
    for (int d = layout.ndim - 1; d >= 0; --d) {
      const int64_t index = rest % layout.shape[d];
      rest /= layout.shape[d];
      src_offset += index * layout.src_strides[d];
      dst_offset += index * layout.dst_strides[d];
    }
    dst[dst_offset] = src[src_offset];
  }
}

template <class Word>
gpuError_t launch_as(const void* src, void* dst, const StridedLayout& layout, int64_t n, gpuStream_t stream) {
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const unsigned blocks = unsigned(wanted < 65535 ? wanted : 65535);  // the grid-stride loop covers the rest
  return launch_kernel(strided_copy_kernel<Word>, blocks, kThreads, 0, stream, static_cast<const Word*>(src),
                       static_cast<Word*>(dst), layout, n);
}

}  // namespace

gpuError_t launch_strided_copy(const void* src, void* dst, const StridedLayout& layout, int64_t numel,
                               int32_t element_size, gpuStream_t stream) {
  if (numel == 0) return gpuSuccess;
  switch (element_size) {
    case 1:
      return launch_as<uint8_t>(src, dst, layout, numel, stream);
    case 2:
      return launch_as<uint16_t>(src, dst, layout, numel, stream);
    case 4:
      return launch_as<uint32_t>(src, dst, layout, numel, stream);
    case 8:
      return launch_as<uint64_t>(src, dst, layout, numel, stream);
    case 16:
      return launch_as<Bytes16>(src, dst, layout, numel, stream);
    default:
      return gpuErrorInvalidValue;
  }
}

}  // namespace verlpp::cuda
