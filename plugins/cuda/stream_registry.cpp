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
  if (cudaGetDevice(&current) == cudaSuccess && current == device) return;
  cuda_check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  previous_ = current;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && primary_context_active(previous_)) (void)cudaSetDevice(previous_);
}

verlpp_stream create_stream(int32_t device) {
  DeviceGuard device_guard(device);
  cudaStream_t s = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags on device " + std::to_string(device));
  auto* handle = new CudaStream{s, device};
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
    if (r.streams.erase(s) == 0) sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT, "unknown stream handle (not created by the cuda plugin, or destroyed)");
  }
  DeviceGuard device_guard(s->device);
  cudaError_t e = cudaStreamDestroy(s->stream);
  delete s;
  cuda_check(e, "cudaStreamDestroy");
}

CudaStream lookup_stream(verlpp_stream handle) {
  auto* s = reinterpret_cast<CudaStream*>(handle);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.streams.count(s) == 0) sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT, "unknown stream handle (not created by the cuda plugin, or destroyed)");
  return *s;
}

verlpp_event create_event(int32_t device) {
  DeviceGuard device_guard(device);
  cudaEvent_t e = nullptr;
  cuda_check(cudaEventCreate(&e), "cudaEventCreate on device " + std::to_string(device));
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
    if (r.events.erase(e) == 0) sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT, "unknown event handle (not created by the cuda plugin, or destroyed)");
  }
  DeviceGuard device_guard(e->device);
  cudaError_t err = cudaEventDestroy(e->event);
  delete e;
  cuda_check(err, "cudaEventDestroy");
}

CudaEvent lookup_event(verlpp_event handle) {
  auto* e = reinterpret_cast<CudaEvent*>(handle);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.events.count(e) == 0) sdk::fail(VERLPP_STATUS_INVALID_ARGUMENT, "unknown event handle (not created by the cuda plugin, or destroyed)");
  return *e;
}

StreamTarget resolve_stream(verlpp_stream handle, int32_t default_device) {
  if (handle == nullptr) return StreamTarget{nullptr, default_device, true};
  CudaStream s = lookup_stream(handle);
  return StreamTarget{s.stream, s.device, false};
}

void finish_if_default(const StreamTarget& target, const char* what) {
  if (!target.is_default) return;
  cuda_check(cudaStreamSynchronize(target.stream), std::string(what) + ": waiting on the default stream of device " +
                                                       std::to_string(target.device));
}

}  // namespace verlpp::cuda
