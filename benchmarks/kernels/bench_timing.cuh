// What the standalone CUDA programs (attention_decode_bench.cu, sample_bench.cu here and
// experiments/gemm_mma/gemm_bench.cu) share: the abort-on-error check, the synthetic "roughly
// normal" inputs, and per-call timing of a launch eagerly and replayed from a CUDA graph. Built
// with the cuda plugin (cmake/VerlppCudaProgram.cmake), never part of the library.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

// Aborts the benchmark on a CUDA error, naming the call and the line.
#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      printf("CUDA error %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
      exit(2);                                                                       \
    }                                                                                \
  } while (0)

// A reproducible, roughly N(0, 1) value for element i: four 16-bit uniforms of a splitmix64
// hash of (i, seed), summed and centred (variance 4/12, scaled to 1).
__device__ __forceinline__ float normalish(uint64_t i, uint64_t seed) {
  uint64_t z = (i + seed) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float s = float(z & 0xffff) + float((z >> 16) & 0xffff) + float((z >> 32) & 0xffff) + float(z >> 48);
  return (s / 65536.0f - 2.0f) * 1.732f;
}

// Milliseconds between two events recorded around `body` on `st`.
template <class Body>
float elapsed_ms(cudaStream_t st, cudaEvent_t e0, cudaEvent_t e1, Body&& body) {
  CK(cudaEventRecord(e0, st));
  body();
  CK(cudaEventRecord(e1, st));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  return ms;
}

// Per-call microseconds of `calls` consecutive call(i) captured in one graph on `st`, replayed
// 10 times after one warm replay (after which `after_warm()` runs, e.g. to read the output).
// -1 when the capture fails (the reason is printed).
template <class Call, class AfterWarm>
float graph_us_per_call(cudaStream_t st, cudaEvent_t e0, cudaEvent_t e1, int calls, Call&& call,
                        AfterWarm&& after_warm) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  cudaError_t err = cudaSuccess;
  for (int i = 0; i < calls && err == cudaSuccess; ++i) err = call(i);
  const cudaError_t end = cudaStreamEndCapture(st, &g);
  if (err != cudaSuccess || end != cudaSuccess) {
    printf("  graph capture failed: %s / %s\n", cudaGetErrorString(err), cudaGetErrorString(end));
    (void)cudaGetLastError();
    return -1;
  }
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, st));
  CK(cudaStreamSynchronize(st));
  after_warm();
  const int reps = 10;
  const float ms = elapsed_ms(st, e0, e1, [&] {
    for (int r = 0; r < reps; ++r) CK(cudaGraphLaunch(ge, st));
  });
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return ms * 1000 / (reps * calls);
}
