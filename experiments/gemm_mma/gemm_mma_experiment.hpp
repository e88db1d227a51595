// The decode-GEMM experiment's entry points (gemm_mma_experiment.cu), for gemm_bench.cu only:
// not part of the cuda plugin (slower than cuBLAS on the H200; see that file's header and
// README.md beside it). Configurations by index: a [m, k] row block times W^T, W [rows, k] (row
// strides lda, ldb, ldo in elements), plus bias [rows] (NULL: none), into out [m, n], bf16.
// SwiGLU configurations read gate rows [0, n) and up rows [up_offset, up_offset + n) of W and
// bias and write silu_product(gate, up). Needs k % 8 == 0, n % 8 == 0, 16-byte aligned rows.
#pragma once

#include "gpu_runtime.hpp"

#include <cstdint>

namespace verlpp::cuda {

int gemm_config_count();
const char* gemm_config_name(int config);
bool gemm_config_silu(int config);
gpuError_t launch_gemm_config(int config, const void* a, int64_t lda, const void* b, int64_t ldb, const void* bias,
                              void* out, int64_t ldo, int64_t m, int64_t n, int64_t k, int64_t up_offset,
                              gpuStream_t stream);

}  // namespace verlpp::cuda
