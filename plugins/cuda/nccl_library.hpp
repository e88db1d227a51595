// cuda: NCCL, opened at run time. The plugin does not link NCCL: it dlopen()s libnccl.so.2 (in
// a PyTorch process that is the wheel's NCCL, already loaded, so both share one copy) and, if
// that fails, the file named by VERLPP_NCCL_LIBRARY. nccl.h supplies the types; the functions
// are looked up by name. Only the entry points the communicator needs are listed.
#pragma once

#include "gpu_runtime.hpp"

#if defined(VERLPP_GPU_HIP) && VERLPP_GPU_HIP
#include <rccl/rccl.h>  // RCCL: the NCCL API (same names and types) on HIP streams
#else
#include <nccl.h>
#endif

#include <string>

namespace verlpp::cuda {

struct NcclLibrary {
  std::string path;  // what was opened (for messages)
  int version = 0;   // ncclGetVersion, e.g. 22809 for 2.28.9

  ncclResult_t (*GetVersion)(int*) = nullptr;
  ncclResult_t (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) = nullptr;
  ncclResult_t (*CommAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
  const char* (*GetLastError)(ncclComm_t) = nullptr;  // NCCL >= 2.13; may stay NULL
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, gpuStream_t) = nullptr;
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, gpuStream_t) = nullptr;
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                gpuStream_t) = nullptr;
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, gpuStream_t) = nullptr;
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, gpuStream_t) = nullptr;
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, gpuStream_t) = nullptr;
};

// The loaded library, or NULL with `problem` set (both cached: the first call decides).
const NcclLibrary* nccl_library(std::string* problem = nullptr);

// "2.28.9" from ncclGetVersion's integer.
std::string nccl_version_text(int version);

}  // namespace verlpp::cuda
