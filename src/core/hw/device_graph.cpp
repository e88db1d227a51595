// DeviceGraphs on LibTorch's CUDA graph API when this library is built against a CUDA LibTorch
// (VERLPP_TORCH_CUDA, set by src/core/CMakeLists.txt); an honest "unavailable" otherwise.
#include "device_graph.hpp"

#include <verlpp/core/error.hpp>

#include <map>
#include <mutex>
#include <vector>

#if VERLPP_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#if __has_include(<torch/version.h>)
#include <torch/version.h>
#endif
// Reading a captured graph's edges needs CUDAGraph(keep_graph), raw_cuda_graph() and
// instantiate() (LibTorch 2.6+) and edge data (CUDA 12.3+: cudaGraphGetEdges_v2, plain from 13).
#if defined(TORCH_VERSION_MAJOR) &&                                                                                   \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)) && defined(CUDART_VERSION) && \
    CUDART_VERSION >= 12030
#define VERLPP_GRAPH_EDGE_DATA 1
#if CUDART_VERSION >= 13000
#define VERLPP_GRAPH_GET_EDGES cudaGraphGetEdges
#else
#define VERLPP_GRAPH_GET_EDGES cudaGraphGetEdges_v2
#endif
#else
#define VERLPP_GRAPH_EDGE_DATA 0
#endif
#endif

namespace verlpp::hw {

#if VERLPP_TORCH_CUDA

namespace {
// The stream every graph set of the process captures on, one per device. Measured on H200
// (docs/benchmarks-log.md, 2026-12-01 12:09-12:36): graphs captured on a second pool stream, by an
// engine's later graph set (its block tables grew wider), replayed 5% slower at batch 256
// (137-138k against 145k tokens/s, with overlapped steps): the same kernels at the same
// durations, but longer launch gaps between them (median 0.54 against 0.22 us). On the stream
// of the first set they replay as fast as the first set's own.
c10::cuda::CUDAStream capture_stream(const c10::Device& d) {
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams.find(d.index());
  if (it == streams.end())
    it = streams.emplace(d.index(), c10::cuda::getStreamFromPool(/*isHighPriority=*/false, d.index())).first;
  return it->second;
}

#if VERLPP_GRAPH_EDGE_DATA
// Edges of `graph` that fire at their upstream kernel's launch completion: the ones the cuda
// plugin sets while it is captured, so that its kernel after a library kernel (a cuBLAS GEMM) is
// placed while that kernel runs (plugins/cuda/dependent_launch.cuh). Counted for the engine's
// statistics and tests; the graph is not changed. -1 when CUDA cannot list the edges.
int64_t early_launch_edges_of(cudaGraph_t graph) {
  size_t count = 0;
  if (VERLPP_GRAPH_GET_EDGES(graph, nullptr, nullptr, nullptr, &count) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  std::vector<cudaGraphNode_t> from(count), to(count);
  std::vector<cudaGraphEdgeData> data(count);
  if (VERLPP_GRAPH_GET_EDGES(graph, from.data(), to.data(), data.data(), &count) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  int64_t early = 0;
  for (size_t i = 0; i < count; ++i) early += data[i].from_port == cudaGraphKernelNodePortLaunchCompletion ? 1 : 0;
  return early;
}
#endif
}  // namespace

struct DeviceGraphs::Impl {
  explicit Impl(const c10::Device& d) : device(d), side(capture_stream(d)), pool(at::cuda::graph_pool_handle()) {}
  c10::Device device;
  // Captures need a stream other than the default one; one stream for every capture (of every
  // set: capture_stream), so that the warm-up creates the library handles and workspaces the
  // capture then finds.
  c10::cuda::CUDAStream side;
  at::cuda::MempoolId_t pool;  // shared by every graph of this set
  std::map<int64_t, std::unique_ptr<at::cuda::CUDAGraph>> graphs;
  int64_t early_launch_edges = 0;  // early_launch_edges_of over the set's graphs
};

std::string DeviceGraphs::unavailable_reason(const c10::Device& device) {
  if (device.type() != c10::DeviceType::CUDA)
    return "device " + device.str() + " is not a CUDA device (graphs are captured through LibTorch's CUDA graphs)";
  return "";
}

DeviceGraphs::DeviceGraphs(const c10::Device& device) {
  const std::string why = unavailable_reason(device);
  if (!why.empty()) VERLPP_FAIL_AT("DeviceGraphs", "{}", why);
  c10::cuda::CUDAGuard on_device(device.index());
  impl_ = std::make_unique<Impl>(c10::Device(c10::DeviceType::CUDA, c10::cuda::current_device()));
}

void DeviceGraphs::capture(int64_t key, const std::function<void()>& body) {
  // Graph sets share their device's capture stream: two threads capturing at once would record
  // each other's work, so captures take turns (they are rare: once per bucket and pool).
  static std::mutex captures;
  std::lock_guard<std::mutex> one_at_a_time(captures);
  c10::cuda::CUDAGuard on_device(impl_->device.index());
  // The side stream must start after the work already queued (static inputs' last writes);
  // captures are rare, so a full device synchronisation is the simple way to order them.
  c10::cuda::device_synchronize();
  c10::cuda::CUDAStreamGuard on_side(impl_->side);
  body();
  impl_->side.synchronize();
#if VERLPP_GRAPH_EDGE_DATA
  auto graph = std::make_unique<at::cuda::CUDAGraph>(/*keep_graph=*/true);  // instantiated below
#else
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
#endif
  try {
    graph->capture_begin(impl_->pool);
    body();
    graph->capture_end();
#if VERLPP_GRAPH_EDGE_DATA
    const int64_t early = early_launch_edges_of(graph->raw_cuda_graph());
    if (early > 0) impl_->early_launch_edges += early;
    graph->instantiate();
#endif
  } catch (const std::exception& e) {
    // End the capture (it may already be invalid) so that the stream and the allocator leave
    // capture mode; the caller then runs the step eagerly.
    try {
      graph->capture_end();
    } catch (...) {
    }
    VERLPP_FAIL_AT("DeviceGraphs", "capturing graph {} on {} failed: {}", key, impl_->device.str(), e.what());
  }
  impl_->graphs[key] = std::move(graph);
}

void DeviceGraphs::replay(int64_t key) {
  auto found = impl_->graphs.find(key);
  if (found == impl_->graphs.end()) VERLPP_FAIL_AT("DeviceGraphs", "no graph {} was captured", key);
  c10::cuda::CUDAGuard on_device(impl_->device.index());
  found->second->replay();
}

bool DeviceGraphs::contains(int64_t key) const { return impl_->graphs.count(key) != 0; }
int64_t DeviceGraphs::size() const { return int64_t(impl_->graphs.size()); }
int64_t DeviceGraphs::early_launch_edges() const { return impl_->early_launch_edges; }

struct DeviceEvent::Impl {
  at::cuda::CUDAEvent event;
  bool recorded = false;
};

DeviceEvent::DeviceEvent() : impl_(std::make_unique<Impl>()) {}

void DeviceEvent::record(const c10::Device& device) {
  VERLPP_CHECK(device.is_cuda(), "DeviceEvent: device {} is not a CUDA device", device.str());
  impl_->event.record(c10::cuda::getCurrentCUDAStream(device.index()));
  impl_->recorded = true;
}

void DeviceEvent::synchronize() const {
  if (impl_->recorded) impl_->event.synchronize();
}

#else  // a LibTorch without CUDA: nothing to capture with

struct DeviceEvent::Impl {};
DeviceEvent::DeviceEvent() : impl_(std::make_unique<Impl>()) {}
void DeviceEvent::record(const c10::Device& device) {
  VERLPP_FAIL_AT("DeviceEvent", "cannot mark a stream of {}: this verlpp was built against a LibTorch without CUDA",
                 device.str());
}
void DeviceEvent::synchronize() const {}

struct DeviceGraphs::Impl {};

std::string DeviceGraphs::unavailable_reason(const c10::Device& device) {
  return "this verlpp was built against a LibTorch without CUDA, so nothing can be captured on " + device.str();
}

DeviceGraphs::DeviceGraphs(const c10::Device& device) {
  VERLPP_FAIL_AT("DeviceGraphs", "{}", unavailable_reason(device));
}
void DeviceGraphs::capture(int64_t key, const std::function<void()>&) {
  VERLPP_FAIL_AT("DeviceGraphs", "cannot capture graph {}: no CUDA LibTorch", key);
}
void DeviceGraphs::replay(int64_t key) { VERLPP_FAIL_AT("DeviceGraphs", "no graph {} was captured", key); }
bool DeviceGraphs::contains(int64_t) const { return false; }
int64_t DeviceGraphs::size() const { return 0; }
int64_t DeviceGraphs::early_launch_edges() const { return 0; }

#endif

DeviceGraphs::~DeviceGraphs() = default;
DeviceEvent::~DeviceEvent() = default;
DeviceEvent::DeviceEvent(DeviceEvent&&) noexcept = default;
DeviceEvent& DeviceEvent::operator=(DeviceEvent&&) noexcept = default;

}  // namespace verlpp::hw
