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
bool on_device(const DLTensor& t) { return t.device.device_type == VERLPP_GPU_DL_DEVICE || t.device.device_type == VERLPP_GPU_DL_MANAGED; }

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
    if (pack) std::memcpy(dense + size_t(i) * element, element_ptr, element);
    else std::memcpy(element_ptr, dense + size_t(i) * element, element);
    for (int d = view.ndim - 1; d >= 0; --d) {
      if (++index[size_t(d)] < view.shape[d]) break;
      index[size_t(d)] = 0;
    }
  }
}

StridedLayout layout_of(const DLTensor& src, const DLTensor& dst) {
  require(src.ndim <= kMaxCopyDims, "tensor_copy: strided device copies support at most " + std::to_string(kMaxCopyDims) +
                                        " dimensions, got " + std::to_string(src.ndim));
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

// A contiguous device buffer for the life of one copy.
class DeviceTemp {
 public:
  DeviceTemp(int32_t device, size_t bytes) {
    DeviceGuard device_guard(device);
    cuda_check(gpuMalloc(&ptr_, bytes), "tensor_copy: " VERLPP_GPU_API "Malloc of a " + std::to_string(bytes) + "-byte temporary");
  }
  ~DeviceTemp() { (void)gpuFree(ptr_); }
  DeviceTemp(const DeviceTemp&) = delete;
  DeviceTemp& operator=(const DeviceTemp&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
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
  require(on_host(src) || on_device(src), "tensor_copy: src is neither host nor " VERLPP_GPU_PLATFORM " memory (DLPack device type " +
                                              std::to_string(int(src.device.device_type)) + ")");
  require(on_host(dst) || on_device(dst), "tensor_copy: dst is neither host nor " VERLPP_GPU_PLATFORM " memory (DLPack device type " +
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
    if (dst_dense) std::memcpy(sdk::data_ptr(dst), from, bytes);
    else host_strided(dst, const_cast<char*>(from), element, false);
    return;
  }

  if (src_dense && dst_dense) {
    cuda_check(gpuMemcpyAsync(sdk::data_ptr(dst), sdk::data_ptr(src), bytes, gpuMemcpyDefault, target.stream),
               "tensor_copy: " VERLPP_GPU_API "MemcpyAsync of " + std::to_string(bytes) + " bytes");
    finish_if_default(target, "tensor_copy");
    return;
  }

  if (on_device(src) && on_device(dst)) {
    cuda_check(launch_strided_copy(sdk::data_ptr(src), sdk::data_ptr(dst), layout_of(src, dst), n, int32_t(element), target.stream),
               "tensor_copy: strided copy kernel");
    finish_if_default(target, "tensor_copy");
    return;
  }

  const DLDevice cuda_device{VERLPP_GPU_DL_DEVICE, device};
  if (on_host(src)) {
    // Host -> device: dense host bytes, then to dst directly or through a dense device temporary.
    std::vector<char> packed(src_dense ? 0 : bytes);
    const void* from = sdk::data_ptr(src);
    if (!src_dense) {
      host_strided(src, packed.data(), element, true);
      from = packed.data();
    }
    if (dst_dense) {
      cuda_check(gpuMemcpyAsync(sdk::data_ptr(dst), from, bytes, gpuMemcpyHostToDevice, target.stream), "tensor_copy: host->device");
    } else {
      DeviceTemp temp(device, bytes);
      cuda_check(gpuMemcpyAsync(temp.get(), from, bytes, gpuMemcpyHostToDevice, target.stream), "tensor_copy: host->device");
      DLTensor dense = dense_like(src, temp.get(), cuda_device);
      cuda_check(launch_strided_copy(temp.get(), sdk::data_ptr(dst), layout_of(dense, dst), n, int32_t(element), target.stream),
                 "tensor_copy: strided scatter kernel");
      cuda_check(gpuStreamSynchronize(target.stream), "tensor_copy: waiting for the scatter");
      return;
    }
    // The host bytes may be a temporary of this call: wait before it goes.
    cuda_check(gpuStreamSynchronize(target.stream), "tensor_copy: waiting for the copy");
    return;
  }

  // Device -> host: dense device bytes (src itself, or gathered into a temporary), then to dst
  // directly or through dense host bytes unpacked on the host.
  std::unique_ptr<DeviceTemp> temp;
  const void* from = sdk::data_ptr(src);
  if (!src_dense) {
    temp = std::make_unique<DeviceTemp>(device, bytes);
    DLTensor dense = dense_like(src, temp->get(), cuda_device);
    cuda_check(launch_strided_copy(sdk::data_ptr(src), temp->get(), layout_of(src, dense), n, int32_t(element), target.stream),
               "tensor_copy: strided gather kernel");
    from = temp->get();
  }
  std::vector<char> unpacked(dst_dense ? 0 : bytes);
  void* to = dst_dense ? sdk::data_ptr(dst) : unpacked.data();
  cuda_check(gpuMemcpyAsync(to, from, bytes, gpuMemcpyDeviceToHost, target.stream), "tensor_copy: device->host");
  cuda_check(gpuStreamSynchronize(target.stream), "tensor_copy: waiting for the copy");
  if (!dst_dense) host_strided(dst, unpacked.data(), element, false);
}

}  // namespace verlpp::cuda
