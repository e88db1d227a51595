// cuda: launchers of the plugin's CUDA kernels. Raw pointers, element strides and a stream in,
// a cudaError_t out: no DLPack and no plugin types, so kernels.cu (the only file nvcc compiles)
// stays small and the argument checks live in kernel_table.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace verlpp::cuda {

// Element type of a floating-point input.
enum class FloatType { f32, f16, bf16 };

// Per row r < n: z = logits[r, :] / temperature (fp32 math), lse = log(sum(exp(z)));
// out_logprob[r] = z[labels[r]] - lse; out_entropy[r] = lse - sum(softmax(z) * z) if not NULL.
// A label outside [0, v) gives NaN in out_logprob (checking it on the host would need a sync).
// logits [n, v] with row stride `row_stride` elements, columns dense; labels [n] int64;
// out_logprob, out_entropy [n] f32.
cudaError_t launch_logprob_entropy(const void* logits, FloatType type, int64_t n, int64_t v, int64_t row_stride,
                                   const int64_t* labels, float temperature, float* out_logprob,
                                   float* out_entropy, cudaStream_t stream);

// out[r, :] = weight * round_to_type(x[r, :] / sqrt(mean(x[r, :]^2) + eps)), as HF's RMSNorm
// (normalise in fp32, round to the input type, then scale). x, out [n, d]; weight [d]; one type.
cudaError_t launch_rms_norm(const void* x, const void* weight, FloatType type, int64_t n, int64_t d, float eps,
                            void* out, cudaStream_t stream);

}  // namespace verlpp::cuda
