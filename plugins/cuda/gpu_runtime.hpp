// The GPU runtime portability layer: one set of names (gpu*) for the runtime API that the cuda
// and rocm plugins share. nvcc/g++ builds (the cuda plugin) map every name to the identical cuda*
// call, so the CUDA code is what it was before this header existed; VERLPP_GPU_HIP=1 (the rocm
// plugin, hipcc + g++) maps them to hip*. Message strings go through VERLPP_GPU_API etc. so an
// AMD user reads "hipMalloc", not "cudaMalloc". Device-side names live in gpu_device.cuh; the
// kDL* names below are used only where <dlpack/dlpack.h> is included.
#pragma once

#if defined(VERLPP_GPU_HIP) && VERLPP_GPU_HIP
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>
#define VERLPP_GPU_NAME(suffix) hip##suffix
#define VERLPP_GPU_API "hip"            // prefix of runtime calls in messages
#define VERLPP_GPU_PLATFORM "HIP"       // "... is not HIP device memory"
#define VERLPP_GPU_PLUGIN_NAME "rocm"   // the plugin's ABI name
#define VERLPP_GPU_DL_DEVICE kDLROCM    // DLPack device type of the plugin's memory
#define VERLPP_GPU_DL_HOST kDLROCMHost  // pinned host memory as DLPack names it
#define VERLPP_GPU_DL_MANAGED kDLROCM   // DLPack 0.6 has no ROCm managed type
#define VERLPP_CCL_LIBRARY_NAME "librccl.so.1"
#define VERLPP_CCL_LIBRARY_ENV "VERLPP_RCCL_LIBRARY"
#define VERLPP_CCL_LIBRARY_HINT "(a ROCm PyTorch wheel has it in site-packages/torch/lib)"
// The few names HIP spells differently.
#define gpuDeviceProp hipDeviceProp_t
#define gpuErrorMemoryAllocation hipErrorOutOfMemory
#define gpuHostAlloc hipHostMalloc
#define gpuFreeHost hipHostFree
#define gpuHostAllocPortable hipHostMallocPortable
#define gpuPointerAttributes hipPointerAttribute_t
#define gpuDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define gpuDevAttrComputeCapabilityMajor hipDeviceAttributeComputeCapabilityMajor
#else
#include <cuda_runtime_api.h>
#define VERLPP_GPU_NAME(suffix) cuda##suffix
#define VERLPP_GPU_API "cuda"
#define VERLPP_GPU_PLATFORM "CUDA"
#define VERLPP_GPU_PLUGIN_NAME "cuda"
#define VERLPP_GPU_DL_DEVICE kDLCUDA
#define VERLPP_GPU_DL_HOST kDLCUDAHost
#define VERLPP_GPU_DL_MANAGED kDLCUDAManaged
#define VERLPP_CCL_LIBRARY_NAME "libnccl.so.2"
#define VERLPP_CCL_LIBRARY_ENV "VERLPP_NCCL_LIBRARY"
#define VERLPP_CCL_LIBRARY_HINT "(a PyTorch wheel has it in site-packages/nvidia/nccl/lib)"
#define gpuDeviceProp cudaDeviceProp
#define gpuErrorMemoryAllocation cudaErrorMemoryAllocation
#define gpuHostAlloc cudaHostAlloc
#define gpuFreeHost cudaFreeHost
#define gpuHostAllocPortable cudaHostAllocPortable
#define gpuPointerAttributes cudaPointerAttributes
#define gpuDevAttrMultiProcessorCount cudaDevAttrMultiProcessorCount
#define gpuDevAttrComputeCapabilityMajor cudaDevAttrComputeCapabilityMajor
#endif

// Types.
#define gpuError_t VERLPP_GPU_NAME(Error_t)
#define gpuStream_t VERLPP_GPU_NAME(Stream_t)
#define gpuEvent_t VERLPP_GPU_NAME(Event_t)
#define gpuMemcpyKind VERLPP_GPU_NAME(MemcpyKind)

// Status values.
#define gpuSuccess VERLPP_GPU_NAME(Success)
#define gpuErrorInvalidValue VERLPP_GPU_NAME(ErrorInvalidValue)
#define gpuErrorInvalidDevice VERLPP_GPU_NAME(ErrorInvalidDevice)
#define gpuErrorInvalidDevicePointer VERLPP_GPU_NAME(ErrorInvalidDevicePointer)
#define gpuErrorInvalidMemcpyDirection VERLPP_GPU_NAME(ErrorInvalidMemcpyDirection)
#define gpuErrorInvalidResourceHandle VERLPP_GPU_NAME(ErrorInvalidResourceHandle)
#define gpuErrorInvalidConfiguration VERLPP_GPU_NAME(ErrorInvalidConfiguration)
#define gpuErrorInsufficientDriver VERLPP_GPU_NAME(ErrorInsufficientDriver)
#define gpuErrorNoDevice VERLPP_GPU_NAME(ErrorNoDevice)
#define gpuErrorNotReady VERLPP_GPU_NAME(ErrorNotReady)
#define gpuErrorNotSupported VERLPP_GPU_NAME(ErrorNotSupported)

// Errors.
#define gpuGetLastError VERLPP_GPU_NAME(GetLastError)
#define gpuPeekAtLastError VERLPP_GPU_NAME(PeekAtLastError)
#define gpuGetErrorName VERLPP_GPU_NAME(GetErrorName)
#define gpuGetErrorString VERLPP_GPU_NAME(GetErrorString)

// Devices.
#define gpuGetDevice VERLPP_GPU_NAME(GetDevice)
#define gpuSetDevice VERLPP_GPU_NAME(SetDevice)
#define gpuGetDeviceCount VERLPP_GPU_NAME(GetDeviceCount)
#define gpuGetDeviceProperties VERLPP_GPU_NAME(GetDeviceProperties)
#define gpuDeviceCanAccessPeer VERLPP_GPU_NAME(DeviceCanAccessPeer)
#define gpuDeviceSynchronize VERLPP_GPU_NAME(DeviceSynchronize)
#define gpuMemGetInfo VERLPP_GPU_NAME(MemGetInfo)
#define gpuPointerGetAttributes VERLPP_GPU_NAME(PointerGetAttributes)
#define gpuDeviceGetAttribute VERLPP_GPU_NAME(DeviceGetAttribute)
#define gpuOccupancyMaxActiveBlocksPerMultiprocessor VERLPP_GPU_NAME(OccupancyMaxActiveBlocksPerMultiprocessor)

// Memory and copies.
#define gpuMalloc VERLPP_GPU_NAME(Malloc)
#define gpuFree VERLPP_GPU_NAME(Free)
#define gpuMemset VERLPP_GPU_NAME(Memset)
#define gpuMemsetAsync VERLPP_GPU_NAME(MemsetAsync)
#define gpuMemcpyAsync VERLPP_GPU_NAME(MemcpyAsync)
#define gpuMemcpyHostToHost VERLPP_GPU_NAME(MemcpyHostToHost)
#define gpuMemcpyHostToDevice VERLPP_GPU_NAME(MemcpyHostToDevice)
#define gpuMemcpyDeviceToHost VERLPP_GPU_NAME(MemcpyDeviceToHost)
#define gpuMemcpyDeviceToDevice VERLPP_GPU_NAME(MemcpyDeviceToDevice)
#define gpuMemcpyDefault VERLPP_GPU_NAME(MemcpyDefault)
#define gpuMallocAsync VERLPP_GPU_NAME(MallocAsync)  // stream-ordered allocator (CUDA 11.2+, HIP 5.2+)
#define gpuFreeAsync VERLPP_GPU_NAME(FreeAsync)

// Stream-ordered allocation from a memory pool (paged attention's split-K workspace).
#define gpuMemPool_t VERLPP_GPU_NAME(MemPool_t)
#define gpuMemPoolProps VERLPP_GPU_NAME(MemPoolProps)
#define gpuMemPoolCreate VERLPP_GPU_NAME(MemPoolCreate)
#define gpuMemPoolSetAttribute VERLPP_GPU_NAME(MemPoolSetAttribute)
#define gpuMemPoolAttrReleaseThreshold VERLPP_GPU_NAME(MemPoolAttrReleaseThreshold)
#define gpuMemAllocationTypePinned VERLPP_GPU_NAME(MemAllocationTypePinned)
#define gpuMemLocationTypeDevice VERLPP_GPU_NAME(MemLocationTypeDevice)
#define gpuMallocFromPoolAsync VERLPP_GPU_NAME(MallocFromPoolAsync)
#define gpuFreeAsync VERLPP_GPU_NAME(FreeAsync)

// Streams and events.
#define gpuStreamNonBlocking VERLPP_GPU_NAME(StreamNonBlocking)
#define gpuStreamCreateWithFlags VERLPP_GPU_NAME(StreamCreateWithFlags)
#define gpuStreamDestroy VERLPP_GPU_NAME(StreamDestroy)
#define gpuStreamSynchronize VERLPP_GPU_NAME(StreamSynchronize)
#define gpuStreamWaitEvent VERLPP_GPU_NAME(StreamWaitEvent)
#define gpuEventDisableTiming VERLPP_GPU_NAME(EventDisableTiming)
#define gpuEventCreate VERLPP_GPU_NAME(EventCreate)
#define gpuEventCreateWithFlags VERLPP_GPU_NAME(EventCreateWithFlags)
#define gpuEventDestroy VERLPP_GPU_NAME(EventDestroy)
#define gpuEventRecord VERLPP_GPU_NAME(EventRecord)
#define gpuEventQuery VERLPP_GPU_NAME(EventQuery)
#define gpuEventSynchronize VERLPP_GPU_NAME(EventSynchronize)
#define gpuEventElapsedTime VERLPP_GPU_NAME(EventElapsedTime)

namespace verlpp::cuda {

// Whether `ptr` is device (or managed) memory of this runtime; then `*device` is its ordinal.
// A failed query (host memory on older runtimes) is cleared and reads as "not device memory".
inline bool gpu_pointer_device(const void* ptr, int* device) {
  gpuPointerAttributes attributes{};
  if (gpuPointerGetAttributes(&attributes, ptr) != gpuSuccess) {
    (void)gpuGetLastError();
    return false;
  }
#if defined(VERLPP_GPU_HIP) && VERLPP_GPU_HIP
  const bool is_device = attributes.memoryType == hipMemoryTypeDevice || attributes.isManaged;
#else
  const bool is_device = attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
#endif
  if (is_device) *device = attributes.device;
  return is_device;
}

}  // namespace verlpp::cuda
