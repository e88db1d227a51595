// cuda: the streams and events this plugin handed out. ABI handles are pointers to the structs
// below; every use looks the handle up first, so a foreign or freed handle is INVALID_ARGUMENT
// instead of a crash. Shared by the plugin class and the kernel table (which gets streams too).
#pragma once

#include <verlpp/plugin_abi.h>

#include "gpu_runtime.hpp"

#include <cstdint>

namespace verlpp::cuda {

struct CudaStream {
  gpuStream_t stream = nullptr;  // NULL only in a wrapper of the legacy default stream
  int32_t device = 0;
  bool owned = true;  // false: a wrapper (stream_from_native); destroy forgets it only
};

struct CudaEvent {
  gpuEvent_t event = nullptr;
  int32_t device = 0;
};

// Creates a non-blocking stream on `device` (it does not wait for the legacy default stream,
// which the host's LibTorch may be using).
verlpp_stream create_stream(int32_t device);
// Registers `native`, a stream the caller owns (NULL: the legacy default stream of `device`), as
// a non-owned handle: work on it is asynchronous like on any plugin stream, and destroy_stream
// forgets the handle without destroying `native`.
verlpp_stream wrap_native_stream(int32_t device, gpuStream_t native);
// Destroys an owned stream; for a wrapper, forgets the handle only.
void destroy_stream(verlpp_stream handle);
// The registered stream behind `handle` (which must not be NULL); throws for unknown handles.
CudaStream lookup_stream(verlpp_stream handle);

verlpp_event create_event(int32_t device);
void destroy_event(verlpp_event handle);
CudaEvent lookup_event(verlpp_event handle);

// Where work for `handle` runs: the registered stream (created or wrapped: both asynchronous),
// or for NULL the legacy default stream of `default_device` (ABI: NULL = the device's default
// stream, synchronous with the host; the only case in which a call waits for its work).
struct StreamTarget {
  gpuStream_t stream = nullptr;
  int32_t device = 0;
  bool is_default = true;  // then the caller waits for the work before returning
};
StreamTarget resolve_stream(verlpp_stream handle, int32_t default_device);

// Makes `device` current on this thread for the guard's scope, then gives the thread its
// previous device back, so that plugin calls do not move the host's (LibTorch's) current
// device. Restoring is skipped when the previous device has no CUDA context yet: making it
// current again would create one (hundreds of MB on a GPU the process may never use).
class DeviceGuard {
 public:
  explicit DeviceGuard(int32_t device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

// Waits for `target`'s work when it is the default stream (the ABI's synchronous NULL stream).
void finish_if_default(const StreamTarget& target, const char* what);

}  // namespace verlpp::cuda
