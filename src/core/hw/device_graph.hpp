// DeviceGraphs: recorded device work replayed with one launch (CUDA graphs through LibTorch's
// at::cuda::CUDAGraph). A step of a few hundred small kernels costs the host tens of
// microseconds per LibTorch op to launch; a replayed graph launches them all at once.
//
// Graphs of one set share one memory pool: what a captured body allocates (its intermediates
// and outputs) comes from that pool and is reused by the next replay. Sharing is safe for how
// the rollout engine uses it: every graph reads only memory it wrote in the same replay and
// tensors made outside the capture (static inputs, weights, the KV pool); outputs the caller
// keeps alive (a bucket's samples) are never handed to a later capture, so they hold until
// their own graph's next replay, and are read before it (the next step's ids come from them).
//
// Built only against a CUDA LibTorch (VERLPP_TORCH_CUDA); elsewhere unavailable_reason() says
// so and nothing is captured. The header carries no device headers.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace verlpp::hw {

class DeviceGraphs {
 public:
  // "" when graphs can be captured on `device`, otherwise why not (a CPU device, a LibTorch
  // built without CUDA, another device type).
  static std::string unavailable_reason(const c10::Device& device);

  explicit DeviceGraphs(const c10::Device& device);
  ~DeviceGraphs();
  DeviceGraphs(const DeviceGraphs&) = delete;
  DeviceGraphs& operator=(const DeviceGraphs&) = delete;

  // Runs `body` once eagerly on a side stream (warm-up: library handles, workspaces, lazy
  // initialisation) and once under capture, and keeps the graph under `key`. Everything in
  // `body` must be device work on LibTorch's current stream: no host synchronisation, no
  // host-dependent shapes. Throws Error naming the key when the capture fails.
  void capture(int64_t key, const std::function<void()>& body);
  bool contains(int64_t key) const;
  // Launches graph `key` on LibTorch's current stream.
  void replay(int64_t key);
  int64_t size() const;
  // Edges of this set's graphs that fire at their upstream kernel's launch completion: the cuda
  // plugin sets them in capture behind library kernels with VERLPP_GRAPH_EARLY_LAUNCH=1
  // (plugins/cuda/dependent_launch.cuh). 0 otherwise, and where LibTorch (< 2.6) or CUDA (< 12.3)
  // cannot list edges.
  int64_t early_launch_edges() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A mark in LibTorch's current CUDA stream (at::cuda::CUDAEvent): record() places it after the
// work queued so far, synchronize() blocks the host until the device has reached it. Lets the
// host read one step's results while the next step is already queued behind them.
class DeviceEvent {
 public:
  DeviceEvent();
  ~DeviceEvent();
  DeviceEvent(DeviceEvent&&) noexcept;
  DeviceEvent& operator=(DeviceEvent&&) noexcept;

  // Marks LibTorch's current stream on `device` (a CUDA device).
  void record(const c10::Device& device);
  // Waits for the last mark; returns at once when none was recorded.
  void synchronize() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace verlpp::hw
