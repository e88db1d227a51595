// cuda: stream and event registry (see the header). One mutex guards the two handle sets; the
// CUDA objects themselves are used outside the lock.
#include "stream_registry.hpp"
#include "cuda_check.hpp"
#include "driver_probe.hpp"

#include <mutex>
#include <string>
#include <unordered_set>

namespace verlpp::cuda {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_set<CudaStream*> streams;
  std::unordered_set<CudaEvent*> events;
};

Registry& registry() {
  // Never destroyed: handles may still be released from static destructors of the host.
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

DeviceGuard::DeviceGuard(int32_t device) {
  int current = -1;
  if (gpuGetDevice(&current) == gpuSuccess && current == device) return;
  cuda_check(gpuSetDevice(device), VERLPP_GPU_API "SetDevice(" + std::to_string(device) + ")");
  previous_ = current;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && primary_context_active(previous_)) (void)gpuSetDevice(previous_);
}

verlpp_stream create_stream(int32_t device) {
  DeviceGuard device_guard(device);
  gpuStream_t s = nullptr;
  cuda_check(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking),
             VERLPP_GPU_API "StreamCreateWithFlags on device " + std::to_string(device));
  auto* handle = new CudaStream{s, device};
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.streams.insert(handle);
  return reinterpret_cast<verlpp_stream>(handle);
}

verlpp_stream wrap_native_stream(int32_t device, gpuStream_t native) {
  // Nothing to check cheaply: the runtime has no safe query for a foreign handle's device or
  // liveness. The caller promises a live stream of `device` (or NULL, the legacy default stream).
  auto* handle = new CudaStream{native, device, false};
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.streams.insert(handle);
  return reinterpret_cast<verlpp_stream>(handle);
}

void destroy_stream(verlpp_stream handle) {
  auto* s = reinterpret_cast<CudaStream*>(handle);
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.streams.erase(s) == 0)
      sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT,
                "unknown stream handle (not created by the " VERLPP_GPU_PLUGIN_NAME " plugin, or destroyed)");
  }
  if (!s->owned) {  // a wrapper: the native stream belongs to the caller
    delete s;
    return;
  }
  DeviceGuard device_guard(s->device);
  gpuError_t e = gpuStreamDestroy(s->stream);
  delete s;
  cuda_check(e, VERLPP_GPU_API "StreamDestroy");
}

CudaStream lookup_stream(verlpp_stream handle) {
  auto* s = reinterpret_cast<CudaStream*>(handle);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.streams.count(s) == 0)
    sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT,
              "unknown stream handle (not created by the " VERLPP_GPU_PLUGIN_NAME " plugin, or destroyed)");
  return *s;
}

verlpp_event create_event(int32_t device) {
  DeviceGuard device_guard(device);
  gpuEvent_t e = nullptr;
  cuda_check(gpuEventCreate(&e), VERLPP_GPU_API "EventCreate on device " + std::to_string(device));
  auto* handle = new CudaEvent{e, device};
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.events.insert(handle);
  return reinterpret_cast<verlpp_event>(handle);
}

void destroy_event(verlpp_event handle) {
  auto* e = reinterpret_cast<CudaEvent*>(handle);
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.events.erase(e) == 0)
      sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT,
                "unknown event handle (not created by the " VERLPP_GPU_PLUGIN_NAME " plugin, or destroyed)");
  }
  DeviceGuard device_guard(e->device);
  gpuError_t err = gpuEventDestroy(e->event);
  delete e;
  cuda_check(err, VERLPP_GPU_API "EventDestroy");
}

CudaEvent lookup_event(verlpp_event handle) {
  auto* e = reinterpret_cast<CudaEvent*>(handle);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.events.count(e) == 0)
    sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT,
              "unknown event handle (not created by the " VERLPP_GPU_PLUGIN_NAME " plugin, or destroyed)");
  return *e;
}

StreamTarget resolve_stream(verlpp_stream handle, int32_t default_device) {
  if (handle == nullptr) return StreamTarget{nullptr, default_device, true};
  CudaStream s = lookup_stream(handle);
  return StreamTarget{s.stream, s.device, false};
}

void finish_if_default(const StreamTarget& target, const char* what) {
  if (!target.is_default) return;
  cuda_check(gpuStreamSynchronize(target.stream),
             std::string(what) + ": waiting on the default stream of device " + std::to_string(target.device));
}

}  // namespace verlpp::cuda
