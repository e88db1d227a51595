// The units behind ShardedWeights (sharded_weights.hpp) and what the sharded optimizer reads:
// each unit's flat layout, its full buffer (the model's parameters view it), this rank's shard,
// and the gradient sums. Also the model's ParameterGather: gathering and releasing units around
// each use, and the autograd Function that brackets a layer's forward and backward
// (unit_function.cpp), whose backward starts the layer's gradient reduce-scatter. Internal to the
// train layer.
#pragma once

#include <verlpp/hw/process_group.hpp>
#include <verlpp/train/sharded_weights.hpp>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace verlpp::train::detail {

// Parameters start at multiples of this many elements inside a unit, and shards are multiples
// of it, so that every view and every shard is aligned for vector loads and GEMMs.
constexpr int64_t kUnitAlignment = 16;

// Gradient reduce-scatters a backward keeps running at once (each holds its unit's padded fp32
// gradient): one runs while the next layer differentiates, and the second's buffer is being
// filled; more would add memory without adding overlap, since they run one after another.
constexpr size_t kReductionsInFlight = 2;

struct UnitState {
  std::string name;                          // "model.layers.3" or "outer"
  std::vector<size_t> params;                // positions in named_parameters()
  std::vector<int64_t> offsets;              // flat element offset of each parameter
  std::vector<std::vector<int64_t>> shapes;  // each parameter's shape
  int64_t shard = 0;                         // elements per rank
  int64_t padded = 0;                        // shard * (ranks sharing the unit)

  at::Tensor full;                // [padded] compute dtype, device: the model's parameters are views of it
  at::Tensor local;               // [shard] compute dtype, device: this rank's part (a view of `full` when resident)
  at::Tensor grad;                // [shard] fp32, device: the gradient sum (undefined: none yet)
  std::vector<at::Tensor> views;  // the model's parameters, in `params` order
  bool gathered = false;          // per-use units: `full` holds memory now
  hw::ProcessGroup::Pending prefetch;  // per-use units: an all-gather into `full` still running
  at::Tensor host_copy;                // offload: the device-resident tensor's host copy
};

struct ShardedUnits : model::ParameterGather {
  ShardedWeightsOptions options;
  int32_t rank = 0;         // this rank in dp (rank 0 writes files)
  int64_t ranks = 1;        // ranks the units are split over (1 when not sharded)
  int32_t shard_index = 0;  // which shard of each unit this rank keeps (0 when not sharded)
  bool per_use = false;     // gather_per_use with more than one rank
  // Trainable units split over several ranks (ZeRO-2 and ZeRO-3): each layer's gradients are
  // reduce-scattered from its backward, the outer unit's after the backward.
  bool reduces_in_backward = false;
  bool offloaded = false;                // forwards refused until reload
  at::Tensor anchor;                     // [1] fp32 requiring grad: keeps every unit Function in the graph
  mutable std::vector<UnitState> units;  // [0]: outer; [1 + i]: decoder layer i
  // A gradient reduce-scatter running in the background: unit `unit`'s flat fp32 gradient
  // `flat` [padded] being summed into `mine` [shard].
  struct Reduction {
    size_t unit = 0;
    at::Tensor flat, mine;
    hw::ProcessGroup::Pending done;
  };
  mutable std::deque<Reduction> reductions;  // oldest first

  // All-gathers unit `u` into its full buffer (per-use units; others are always whole), or waits
  // for its prefetch.
  void gather(size_t u) const;
  // Starts gathering unit `u` in the background (forward_prefetch / backward_prefetch: the next
  // unit of a pass while the current one computes); nothing for a unit outside the layers, one
  // already gathered, or without per-use gathering. gather(u) finishes it.
  void prefetch(size_t u) const;
  // Frees unit `u`'s full buffer (per-use units), after any prefetch into it has finished.
  void release(size_t u) const;
  // Units gathered in the background so far (for tests and metrics).
  mutable int64_t prefetched = 0;
  void gather_outer() const override { gather(0); }
  at::Tensor run_layer(int64_t index, const model::LayerFn& layer, const at::Tensor& hidden,
                       bool recompute) const override;
  // Whole resident units run their layers as a plain model does; gather_outer only checks that
  // they are not offloaded.
  bool gathers_layers() const override { return per_use || reduces_in_backward; }
  // Sums `grads` (unit `u`'s parameter gradients in `params` order; undefined = zero) over the
  // ranks into this rank's gradient shard: flattened into fp32, reduce-scattered, accumulated.
  // With options.overlap_reduce the reduce-scatter runs in the background
  // (hw::ProcessGroup::start_reduce_scatter_sum) and is added to the shard by a later
  // finish_reductions; at most kReductionsInFlight run at once.
  void reduce_gradients(size_t u, const std::vector<at::Tensor>& grads) const;
  // Waits for the background reduce-scatters, oldest first, until at most `keep` run, adding
  // each to its unit's gradient shard (the order of the calls, so the sums round as a
  // synchronous run's do).
  void finish_reductions(size_t keep = 0) const;
  // Reduce-scatters started in the background so far (for tests and metrics).
  mutable int64_t overlapped_reductions = 0;
  // Adds `grads` flattened into `target` ([padded] fp32).
  void add_flat(size_t u, const at::Tensor& target, const std::vector<at::Tensor>& grads) const;
  // The device-resident tensor of unit `u`: its shard when gathered per use, else its full buffer.
  const at::Tensor& resident(size_t u) const { return per_use ? units[u].local : units[u].full; }
};

// gathered_layer (unit_function.cpp): `layer(hidden)` recorded for autograd so that unit `u` is
// gathered for the forward and again for the backward, which reduce-scatters the unit's
// gradients (ShardedUnits::reduce_gradients). `recompute`: the forward keeps no graph and the
// backward runs the layer again (gradient checkpointing); otherwise the forward's graph is kept
// (its saved weights are views of the released buffer and are read again after the re-gather).
at::Tensor gathered_layer(const ShardedUnits& units, size_t u, const model::LayerFn& layer, const at::Tensor& hidden,
                          bool recompute);

}  // namespace verlpp::train::detail
