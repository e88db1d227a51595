// Storage memory released and restored in place (tensor_storage.hpp). The storage object keeps
// its allocator and device; only its DataPtr and byte count change, which is what PyTorch's FSDP
// does to a flat parameter between uses (storage resize to 0 and back). Writers of a restored
// storage must not go through tensors that an autograd graph saved (a version-counter bump would
// invalidate the graph): the collectives write through DLPack views, which bump nothing.
#include <verlpp/hw/tensor_storage.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/hw/device.hpp>
#include <verlpp/hw/plugin.hpp>

#include <ATen/ops/from_blob.h>

#include <algorithm>

#include <c10/core/StorageImpl.h>

namespace verlpp::hw {
namespace {

// The bytes `t` reaches into its storage.
size_t needed_bytes(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return size_t(last + 1) * t.element_size();
}

}  // namespace

// A released storage keeps its byte count and loses its memory (a null DataPtr on its device), so
// restoring it through any of its views (a fused buffer's row views) brings the whole back.
void release_storage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (s->data() == nullptr) return;
  const c10::Device device = s->device();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, device));
}

void restore_storage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const size_t bytes = std::max<size_t>(s->nbytes(), needed_bytes(t));
  if (bytes == 0 || s->data() != nullptr) return;
  c10::Allocator* allocator = s->allocator();
  VERLPP_CHECK(allocator != nullptr, "restore_storage: the tensor's storage ({} on {}) has no allocator",
               c10::toString(t.scalar_type()), t.device().str());
  s->set_data_ptr_noswap(allocator->allocate(bytes));
  s->set_nbytes(bytes);
}

bool is_storage_released(const at::Tensor& t) {
  const c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  return s->nbytes() > 0 && s->data() == nullptr;
}

int64_t storage_bytes(const at::Tensor& t) {
  if (!t.defined() || is_storage_released(t)) return 0;
  return int64_t(t.storage().unsafeGetStorageImpl()->nbytes());
}

at::Tensor pinned_host_tensor(const Plugin& plugin, const std::vector<int64_t>& shape, at::ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const size_t bytes = size_t(numel) * c10::elementSize(dtype);
  // The buffer lives as long as the tensor's storage: the deleter owns it.
  auto* buffer = new PinnedBuffer(plugin, bytes);
  return at::from_blob(
      buffer->data(), shape, [buffer](void*) { delete buffer; }, at::TensorOptions().dtype(dtype));
}

bool has_pinned_host_memory(const Plugin& plugin) {
  if (plugin.api().host_alloc_pinned == nullptr || plugin.api().host_free_pinned == nullptr) return false;
  if (device_count(plugin) < 1) return false;
  return Device(plugin, 0).properties().has(VERLPP_DEVICE_CAP_PINNED_HOST_MEMORY);
}

}  // namespace verlpp::hw
