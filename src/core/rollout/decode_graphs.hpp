// DecodeGraphs: the engine's decode steps replayed as device graphs. A decode step of a 24-layer
// model is ~600 small LibTorch ops and plugin kernels; launched one by one the host, not the
// device, sets the pace (the H200 profile showed the device ~7% busy). Here a whole step
// (embedding, layers with the plugin's rotary and paged-attention kernels, LM head, the
// plugin's sampler) is captured once per batch-size bucket and then replayed with one launch.
//
// A graph reads fixed addresses, so each bucket owns static inputs (one device byte buffer:
// ids, positions, KV slots, context lengths, top-k, seeds, block tables, temperatures, top-p)
// filled from pinned host memory with one copy per step. A step of b sequences runs in the
// smallest bucket B >= b; rows b..B-1 are padding that writes to and reads from a scratch KV
// block no sequence owns. Block tables are `table_width` blocks wide for every bucket.
//
// Whatever a captured graph baked in must stay put: the weights' and the KV pool's storage.
// The engine drops its DecodeGraphs when either moves (update_weights re-pointing a parameter,
// sleep/wake re-creating the pool).
#pragma once

#include "../hw/device_graph.hpp"

#include <verlpp/model/decoder.hpp>
#include <verlpp/model/kv_cache.hpp>
#include <verlpp/rollout/sampling.hpp>
#include <verlpp/rollout/scheduler.hpp>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::rollout::detail {

class DecodeGraphs {
 public:
  // "" when decode steps of `model` can run as graphs with `kernels`; otherwise why not (no
  // CUDA LibTorch, a CPU model, a plugin without the sample / paged-attention kernels, ...).
  static std::string unavailable_reason(const model::DecoderLM& model, const hw::Kernels* kernels);
  // The batch-size buckets up to `max_batch`: 1, 2, 4, ..., 32, then multiples of 32, then max_batch.
  static std::vector<int64_t> buckets(int64_t max_batch);

  // Graphs on `device` for batches up to `max_batch` and block tables `table_width` wide.
  // `scratch_block`: a block of the pool that no sequence owns (padding rows use it).
  DecodeGraphs(const c10::Device& device, int64_t scratch_block, const hw::Kernels& kernels, int64_t max_batch,
               int64_t table_width);

  // Runs decode `step` through the graph of its bucket, capturing that graph first when new;
  // token_ids / logprobs get one entry per sampler of the step. Returns false, having done
  // nothing, when the step does not fit (more sequences than the largest bucket, a block table
  // wider than table_width, samplers not one per sequence); the caller runs it eagerly then.
  // Throws Error when a capture fails.
  // The model and the pool must be the ones of every earlier call (their storage is baked in).
  bool run(const model::DecoderLM& model, model::PagedKvCache& cache, const ScheduledStep& step,
           std::vector<int64_t>& token_ids, std::vector<float>& logprobs);

  int64_t table_width() const { return table_width_; }
  int64_t num_captures() const { return num_captures_; }
  double capture_seconds() const { return capture_seconds_; }

 private:
  struct Bucket {
    int64_t size = 0;
    at::Tensor inputs;            // device bytes: the static inputs (layout in decode_graphs.cpp)
    DeviceSamples samples;        // the graph's outputs [size], rewritten by every replay
  };
  Bucket& bucket_for(int64_t batch);
  void capture(const model::DecoderLM& model, model::PagedKvCache& cache, Bucket& bucket);
  int64_t input_bytes(int64_t size) const;

  c10::Device device_;
  int64_t scratch_block_;
  const hw::Kernels& kernels_;
  int64_t table_width_;
  hw::DeviceGraphs graphs_;
  std::map<int64_t, Bucket> buckets_;  // by size
  at::Tensor staging_;                 // pinned host bytes for the largest bucket's inputs
  int64_t num_captures_ = 0;
  double capture_seconds_ = 0;
};

}  // namespace verlpp::rollout::detail
