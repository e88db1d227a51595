// ShardedOptimizer: AdamW over ShardedWeights' units (ZeRO-2/3 on several ranks, and every
// layout with offloaded state). Per unit this rank keeps the fp32 masters and the two moments
// of its shard, on the device or (optimizer offload) in pinned host memory. A step takes the
// gradient shards (ShardedWeights::finish_gradients), the global norm, clips, runs AdamW on the
// shards (on the device; offloaded: on the host in one pass per chunk, or streamed through the
// device in chunks) and writes the new weights, cast, into the compute shards
// (ShardedWeights::publish).
// Internal to the train layer; OptimizerStep holds it.
#pragma once

#include <verlpp/train/sharded_weights.hpp>
#include <verlpp/train/trained_model.hpp>

#include "flat_adamw.hpp"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace verlpp::train::detail {

struct ShardedOptimizerOptions {
  bool offload = false;  // masters and moments in host memory
  OffloadedStep offloaded_step = OffloadedStep::kDevice;
  const hw::Plugin* host_memory = nullptr;    // pinned memory (null: plain host memory)
  int64_t chunk_elements = int64_t(1) << 24;  // host <-> device staging, per copy
};

class ShardedOptimizer {
 public:
  // `masters`: the fp32 weights (whole, on every rank) the masters start from.
  ShardedOptimizer(ShardedWeights& weights, const model::DecoderLM& masters, ShardedOptimizerOptions options);

  // Collective. Sums the gradients (finish_gradients), takes the global L2 norm, and when it is
  // finite clips (as clip_grad_norm), steps every parameter and publishes the new weights. The
  // gradients are dropped either way. Returns the norm before clipping.
  double step(const AdamWConfig& config, double lr);
  // Each parameter's AdamW step count (named_parameters() order; 0: no state yet).
  const std::vector<int64_t>& steps() const { return steps_; }

  // Replaces the masters by `masters`' weights (the compute weights are the caller's to import).
  void import(const model::DecoderLM& masters);
  // Collective: every parameter's whole fp32 master (host tensors) on rank 0, or on every rank
  // with `everywhere`; undefined elsewhere.
  std::vector<at::Tensor> gather_masters(bool everywhere) const;
  // Collective: every parameter's whole exp_avg and exp_avg_sq on rank 0 (host tensors;
  // undefined elsewhere and for a parameter without state).
  void gather_state(std::vector<at::Tensor>& exp_avg, std::vector<at::Tensor>& exp_avg_sq) const;
  // Takes this rank's part of whole states (undefined for a parameter whose step is 0).
  void set_state(const std::vector<int64_t>& steps, const std::vector<at::Tensor>& exp_avg,
                 const std::vector<at::Tensor>& exp_avg_sq);

  // Memory held now, from the tensors: masters kept apart from the compute shards, and moments.
  int64_t master_bytes() const;
  int64_t state_bytes() const;
  bool offloaded() const { return options_.offload; }

 private:
  struct UnitState {
    at::Tensor master;               // [shard] fp32 (the compute shard itself when that is fp32 on the device)
    at::Tensor exp_avg, exp_avg_sq;  // [shard] fp32, beside the master
    bool master_is_compute = false;
  };
  // AdamW's runs over unit `u`'s shard (each element with its parameter's step count; gaps and
  // padding with the parameter before them).
  std::vector<AdamwRun> runs_of(int64_t u) const;
  // Unit `u`'s shard of a whole per-parameter list (zeros where undefined), fp32 on `device`.
  at::Tensor shard_of(int64_t u, const std::vector<at::Tensor>& per_param, c10::Device device) const;
  // Collective: unit `u`'s [padded] vector gathered from every rank's `shard` (on the device).
  at::Tensor gather_unit(int64_t u, const at::Tensor& shard) const;
  double global_norm() const;
  // Buffers an offloaded step copies through, allocated once per step (pinned allocations are
  // slow and their release synchronises the device).
  struct Staging {
    at::Tensor host_grad;      // [chunk] fp32, pinned: a gradient chunk on its way to the host
    at::Tensor device_master;  // [chunk] fp32 on the device: an updated master on its way to the compute shard
  };
  Staging make_staging() const;
  void step_unit(int64_t u, const AdamWConfig& config, double lr, const Staging& staging);

  ShardedWeights& weights_;
  ShardedOptimizerOptions options_;
  std::vector<UnitState> units_;
  std::vector<int64_t> steps_;
  c10::Device device_;
};

}  // namespace verlpp::train::detail
