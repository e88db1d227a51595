// cuda: tensor_copy (see the header).
#include "tensor_copy.hpp"
#include "cuda_check.hpp"
#include "kernels.hpp"
#include "stream_registry.hpp"

#include <verlpp/sdk/dlpack_util.hpp>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace verlpp::cuda {
namespace {

using sdk::require;

bool on_host(const DLTensor& t) { return t.device.device_type == kDLCPU || t.device.device_type == VERLPP_GPU_DL_HOST; }
bool on_device(const DLTensor& t) {
  return t.device.device_type == VERLPP_GPU_DL_DEVICE || t.device.device_type == VERLPP_GPU_DL_MANAGED;
}

// Element strides of `t` (row-major compact ones when it has none).
std::vector<int64_t> strides_of(const DLTensor& t) {
  std::vector<int64_t> out(size_t(t.ndim));
  int64_t step = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    out[size_t(d)] = t.strides ? t.strides[d] : step;
    step *= t.shape[d];
  }
  return out;
}

// Copies between a strided host view and a dense host buffer, element by element (row-major
// order over the shape). `pack` true: view -> dense; false: dense -> view.
void host_strided(const DLTensor& view, char* dense, size_t element, bool pack) {
  std::vector<int64_t> strides = strides_of(view), index(size_t(view.ndim), 0);
  char* base = static_cast<char*>(sdk::data_ptr(view));
  const int64_t n = sdk::numel(view);
  for (int64_t i = 0; i < n; ++i) {
    int64_t offset = 0;
    for (int d = 0; d < view.ndim; ++d) offset += index[size_t(d)] * strides[size_t(d)];
    char* element_ptr = base + offset * int64_t(element);
    if (pack)
      std::memcpy(dense + size_t(i) * element, element_ptr, element);
    else
      std::memcpy(element_ptr, dense + size_t(i) * element, element);
    for (int d = view.ndim - 1; d >= 0; --d) {
      if (++index[size_t(d)] < view.shape[d]) break;
      index[size_t(d)] = 0;
    }
  }
}

StridedLayout layout_of(const DLTensor& src, const DLTensor& dst) {
  require(src.ndim <= kMaxCopyDims, "tensor_copy: strided device copies support at most " +
                                        std::to_string(kMaxCopyDims) + " dimensions, got " + std::to_string(src.ndim));
  StridedLayout layout;
  layout.ndim = src.ndim;
  std::vector<int64_t> s = strides_of(src), d = strides_of(dst);
  for (int i = 0; i < src.ndim; ++i) {
    layout.shape[i] = src.shape[i];
    layout.src_strides[i] = s[size_t(i)];
    layout.dst_strides[i] = d[size_t(i)];
  }
  return layout;
}

// A contiguous device buffer for the life of one copy, allocated and freed in `stream`'s order
// (cudaMallocAsync/cudaFreeAsync), so that neither waits for the device and the copy stays
// asynchronous on a non-NULL stream: work queued before the free still owns the memory. Where
// the device has no stream-ordered pool (NotSupported), plain cudaMalloc, and the free waits for
// the stream first. The caller's DeviceGuard makes the buffer's device current.
class DeviceTemp {
 public:
  DeviceTemp(size_t bytes, gpuStream_t stream) : stream_(stream) {
    gpuError_t e = gpuMallocAsync(&ptr_, bytes, stream);
    if (e == gpuErrorNotSupported) {
      (void)gpuGetLastError();
      ordered_ = false;
      e = gpuMalloc(&ptr_, bytes);
    }
    cuda_check(e, "tensor_copy: " VERLPP_GPU_API "Malloc of a " + std::to_string(bytes) + "-byte temporary");
  }
  ~DeviceTemp() {
    if (ordered_) {
      (void)gpuFreeAsync(ptr_, stream_);
    } else {
      (void)gpuStreamSynchronize(stream_);
      (void)gpuFree(ptr_);
    }
  }
  DeviceTemp(const DeviceTemp&) = delete;
  DeviceTemp& operator=(const DeviceTemp&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  gpuStream_t stream_ = nullptr;
  bool ordered_ = true;
};

// `t` as a dense view of the same shape and dtype over `data`.
DLTensor dense_like(const DLTensor& t, void* data, DLDevice device) {
  DLTensor d = t;
  d.data = data;
  d.byte_offset = 0;
  d.strides = nullptr;
  d.device = device;
  return d;
}

}  // namespace

void copy_tensor(const DLTensor& src, DLTensor& dst, verlpp_stream stream) {
  require(on_host(src) || on_device(src), "tensor_copy: src is neither host nor " VERLPP_GPU_PLATFORM
                                          " memory (DLPack device type " +
                                              std::to_string(int(src.device.device_type)) + ")");
  require(on_host(dst) || on_device(dst), "tensor_copy: dst is neither host nor " VERLPP_GPU_PLATFORM
                                          " memory (DLPack device type " +
                                              std::to_string(int(dst.device.device_type)) + ")");
  const int64_t n = sdk::numel(src);
  if (n == 0) return;
  const size_t element = sdk::dtype_size(src.dtype), bytes = size_t(n) * element;
  int current = 0;
  (void)gpuGetDevice(&current);
  const int32_t device = on_device(src) ? src.device.device_id : on_device(dst) ? dst.device.device_id : current;
  StreamTarget target = resolve_stream(stream, device);
  DeviceGuard device_guard(target.device);
  const bool src_dense = sdk::is_contiguous(src), dst_dense = sdk::is_contiguous(dst);

  if (on_host(src) && on_host(dst)) {
    // Host to host: the caller's stream may still be writing src (pinned memory), so wait.
    cuda_check(gpuStreamSynchronize(target.stream), "tensor_copy: waiting for the stream");
    std::vector<char> dense(src_dense ? 0 : bytes);
    const char* from = static_cast<const char*>(sdk::data_ptr(src));
    if (!src_dense) {
      host_strided(src, dense.data(), element, true);
      from = dense.data();
    }
    if (dst_dense)
      std::memcpy(sdk::data_ptr(dst), from, bytes);
    else
      host_strided(dst, const_cast<char*>(from), element, false);
    return;
  }

  if (src_dense && dst_dense) {
    cuda_check(gpuMemcpyAsync(sdk::data_ptr(dst), sdk::data_ptr(src), bytes, gpuMemcpyDefault, target.stream),
               "tensor_copy: " VERLPP_GPU_API "MemcpyAsync of " + std::to_string(bytes) + " bytes");
    finish_if_default(target, "tensor_copy");
    return;
  }

  if (on_device(src) && on_device(dst)) {
    cuda_check(launch_strided_copy(sdk::data_ptr(src), sdk::data_ptr(dst), layout_of(src, dst), n, int32_t(element),
                                   target.stream),
               "tensor_copy: strided copy kernel");
    finish_if_default(target, "tensor_copy");
    return;
  }

  const DLDevice cuda_device{VERLPP_GPU_DL_DEVICE, device};
  if (on_host(src)) {
    // Host -> device: dense host bytes (src itself, or src packed on the host), then to dst
    // directly or through a stream-ordered dense device temporary and a scatter kernel. Packed
    // bytes are a temporary of this call, so then the call waits for the stream before they go
    // (CUDA stages pageable sources before returning, but HIP does not promise it).
    std::vector<char> packed(src_dense ? 0 : bytes);
    const void* from = sdk::data_ptr(src);
    if (!src_dense) {
      host_strided(src, packed.data(), element, true);
      from = packed.data();
    }
    if (dst_dense) {
      cuda_check(gpuMemcpyAsync(sdk::data_ptr(dst), from, bytes, gpuMemcpyHostToDevice, target.stream),
                 "tensor_copy: host->device");
    } else {
      DeviceTemp temp(bytes, target.stream);
      cuda_check(gpuMemcpyAsync(temp.get(), from, bytes, gpuMemcpyHostToDevice, target.stream),
                 "tensor_copy: host->device");
      DLTensor dense = dense_like(src, temp.get(), cuda_device);
      cuda_check(launch_strided_copy(temp.get(), sdk::data_ptr(dst), layout_of(dense, dst), n, int32_t(element),
                                     target.stream),
                 "tensor_copy: strided scatter kernel");
    }
    if (!src_dense)
      cuda_check(gpuStreamSynchronize(target.stream), "tensor_copy: waiting for the copy of the packed bytes");
    else
      finish_if_default(target, "tensor_copy");
    return;
  }

  // Device -> host: dense device bytes (src itself, or gathered into a stream-ordered temporary),
  // then to dst directly (asynchronous on a non-NULL stream: the caller synchronises before
  // reading dst), or through dense host bytes unpacked on the host (which must wait).
  std::unique_ptr<DeviceTemp> temp;
  const void* from = sdk::data_ptr(src);
  if (!src_dense) {
    temp = std::make_unique<DeviceTemp>(bytes, target.stream);
    DLTensor dense = dense_like(src, temp->get(), cuda_device);
    cuda_check(
        launch_strided_copy(sdk::data_ptr(src), temp->get(), layout_of(src, dense), n, int32_t(element), target.stream),
        "tensor_copy: strided gather kernel");
    from = temp->get();
  }
  if (dst_dense) {
    cuda_check(gpuMemcpyAsync(sdk::data_ptr(dst), from, bytes, gpuMemcpyDeviceToHost, target.stream),
               "tensor_copy: device->host");
    finish_if_default(target, "tensor_copy");
    return;
  }
  std::vector<char> unpacked(bytes);
  cuda_check(gpuMemcpyAsync(unpacked.data(), from, bytes, gpuMemcpyDeviceToHost, target.stream),
             "tensor_copy: device->host");
  cuda_check(gpuStreamSynchronize(target.stream), "tensor_copy: waiting for the copy");
  host_strided(dst, unpacked.data(), element, false);
}

}  // namespace verlpp::cuda
