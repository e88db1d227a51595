// Tensor memory that comes and goes while the tensor objects stay: the trainer's sharded weights
// (ZeRO-3) free a unit's full parameters between uses and the rollout engine frees its weights
// during training, while models, autograd graphs and views keep pointing at the same tensors.
// Also host tensors in the plugin's pinned memory, for offloaded optimizer states.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace verlpp::hw {

class Plugin;

// Frees the memory behind `t`'s storage but keeps the storage object, so every tensor that
// views it (model parameters, tensors an autograd graph saved) stays valid to hold, not to read,
// until restore_storage. A no-op when already released.
void release_storage(const at::Tensor& t);
// Gives `t`'s storage memory again, enough for `t` (contents undefined), from the allocator it
// was made with. A no-op when it has memory.
void restore_storage(const at::Tensor& t);
// Whether `t`'s storage is released (its memory freed by release_storage).
bool is_storage_released(const at::Tensor& t);
// Bytes of memory behind `t`'s storage now (0 when released).
int64_t storage_bytes(const at::Tensor& t);

// A host tensor [shape] of `dtype` in `plugin`'s pinned (page-locked) host memory, freed through
// the plugin when the last tensor viewing it goes; plain host memory where the plugin has no
// host_alloc_pinned. Copies between it and the plugin's devices can run asynchronously.
at::Tensor pinned_host_tensor(const Plugin& plugin, const std::vector<int64_t>& shape, at::ScalarType dtype);
// Whether `plugin`'s host_alloc_pinned gives real page-locked memory
// (VERLPP_DEVICE_CAP_PINNED_HOST_MEMORY on its devices).
bool has_pinned_host_memory(const Plugin& plugin);

}  // namespace verlpp::hw
