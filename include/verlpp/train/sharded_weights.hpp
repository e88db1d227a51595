// ShardedWeights: a model's weights as flat per-unit shards (ZeRO-3 / FSDP-style). A unit is one
// decoder layer, plus one unit for everything outside the layers (embedding, final norm, heads).
// Each unit's parameters are laid end to end in one flat vector, padded to a multiple of the
// ranks, and each rank keeps one contiguous shard of it in the compute dtype. The model the
// forwards run on (model()) has its parameters as views into each unit's full buffer, whose
// memory exists only while the unit is gathered: a layer is all-gathered just before its forward
// and freed after it, gathered again for its backward, and its gradients are reduce-scattered
// straight into this rank's fp32 gradient shard. The outer unit stays gathered from the first
// forward until release_gathered(). Without per-use gathering (ZeRO-2, and ZeRO-0/1 layouts
// that still want flat state: offload) the full buffers stay resident. Trainable units split
// over several ranks (ZeRO-2 and 3) reduce-scatter each layer's gradients from its backward, in
// the background; whole units sum their gradients per unit until finish_gradients.
#pragma once

#include <verlpp/model/decoder.hpp>
#include <verlpp/train/data_parallel.hpp>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace verlpp::hw {
class Plugin;
}

namespace verlpp::train {

namespace detail {
struct ShardedUnits;
}

struct ShardedWeightsOptions {
  at::ScalarType dtype = at::kFloat;  // the weights the forwards run on (the compute dtype)
  DataParallel dp;                    // the ranks that share the units
  // Split each unit over dp's ranks (each keeps 1/N); false: every rank keeps whole units.
  bool shard = true;
  // ZeRO-3: a unit's full weights exist only while it is used (needs shard; with one rank the
  // shard is the whole unit and nothing is gathered).
  bool gather_per_use = true;
  // The model's parameters require grad and each backward's gradients are summed in fp32 per unit
  // (gradient_shard); false: a frozen model (the reference), forwards only.
  bool trainable = false;
  // Where offload() puts the device-resident weights: this plugin's pinned host memory (null:
  // plain host memory).
  const hw::Plugin* host_memory = nullptr;
  // With per-use gathering, the next layer's all-gather starts in the background (its own
  // thread and stream: hw::ProcessGroup::start_all_gather_into) while the current layer
  // computes, in forwards (fsdp_config.forward_prefetch) and in backwards (FSDP's default
  // BACKWARD_PRE); each holds one more layer's weights at a time.
  bool forward_prefetch = false;
  bool backward_prefetch = true;
  // Trainable units split over several ranks: a layer's gradient reduce-scatter runs in the
  // background (the communication thread and stream) while the layers below differentiate
  // (DeepSpeed's overlap_comm; FSDP always overlaps); false waits for each where it starts.
  bool overlap_reduce = true;
};

class ShardedWeights {
 public:
  // Lays `source`'s parameters out in units and keeps this rank's part, cast to options.dtype on
  // `source`'s device. `source` (any dtype, whole on every rank) is neither changed nor kept.
  // Collective when persistent and sharded (the full buffers are gathered once).
  ShardedWeights(const model::DecoderLM& source, ShardedWeightsOptions options);
  ~ShardedWeights();
  ShardedWeights(const ShardedWeights&) = delete;
  ShardedWeights& operator=(const ShardedWeights&) = delete;

  const ShardedWeightsOptions& options() const { return options_; }
  // Whether units are gathered per use (ZeRO-3 over several ranks) rather than resident whole.
  bool gathers_per_use() const;
  // The model over these weights (its forwards gather what they read). Copies of it share the
  // weights and the gathering.
  model::DecoderLM& model() { return model_; }
  const model::DecoderLM& model() const { return model_; }
  int64_t num_units() const;
  // The unit's name ("model.layers.3", or "outer") and its parameters' HF names.
  std::string unit_name(int64_t unit) const;
  std::vector<std::string> unit_parameter_names(int64_t unit) const;
  // Elements of one rank's shard of `unit`, and of the whole padded unit.
  int64_t shard_elements(int64_t unit) const;
  int64_t padded_elements(int64_t unit) const;
  // This rank's compute-dtype shard of `unit` ([shard_elements], on the device): what an
  // optimizer writes the updated weights into (then publish()).
  at::Tensor compute_shard(int64_t unit) const;
  // The parameters' elements of `unit` in flat order: (parameter position in named_parameters(),
  // flat offset within the unit, element count), for an optimizer that keeps state per parameter.
  struct Placement {
    size_t param = 0;
    int64_t offset = 0, numel = 0;
  };
  std::vector<Placement> placements(int64_t unit) const;

  // Frees every gathered unit (with per-use gathering; the outer unit included). The next
  // forward gathers again.
  void release_gathered();
  // After an optimizer wrote compute_shard(): with per-use gathering the gathered units are
  // dropped; resident sharded units all-gather the new shards into their full buffers. Bumps the
  // model's weights version.
  void publish();

  // --- gradients (trainable) ---
  // After each backward: the model's parameter gradients go into the fp32 per-unit sums and are
  // dropped (per-use gathering: only the outer unit's; the layers' went during the backward).
  void collect_gradients();
  // Collective, once per optimizer step after the last backward: the sums over the ranks land in
  // this rank's gradient shards (reduce-scatter, or all-reduce for whole units).
  void finish_gradients();
  // This rank's fp32 gradient shard of `unit` ([shard_elements]; undefined before any backward).
  at::Tensor gradient_shard(int64_t unit) const;
  // Forgets every gradient (the shards' memory is freed).
  void drop_gradients();

  // --- offload (fsdp_config.param_offload) ---
  // Moves the device-resident weights (shards and resident full buffers) to host memory and frees
  // them on the device; reload() brings them back. Forwards need reload() first.
  void offload();
  void reload();
  bool is_offloaded() const { return offloaded_; }

  // --- whole weights, unit by unit (collective) ---
  // Calls fn with each unit's parameters as (HF name, full tensor in the compute dtype) while the
  // unit is gathered; the tensors are valid only during the call.
  using UnitFn = std::function<void(const std::vector<std::pair<std::string, at::Tensor>>&)>;
  void for_each_unit(const UnitFn& fn);
  // Replaces the weights with `source`'s (same architecture, any dtype and device), as the
  // constructor took them; offloaded weights stay offloaded.
  void import(const model::DecoderLM& source);

  // --- memory held, from the tensors themselves ---
  // Bytes of weights on the device outside any gather (shards, resident full buffers).
  int64_t resident_weight_bytes() const;
  // Bytes of the gradient sums held now.
  int64_t gradient_bytes() const;
  // Layers gathered in the background (forward_prefetch, backward_prefetch) since construction.
  int64_t prefetched_units() const;
  // Gradient reduce-scatters run in the background (overlap_reduce) since construction.
  int64_t overlapped_reductions() const;

  // For the optimizer (src/core/train): the units themselves.
  detail::ShardedUnits& units() { return *units_; }

 private:
  ShardedWeightsOptions options_;
  std::shared_ptr<detail::ShardedUnits> units_;
  model::DecoderLM model_;
  bool offloaded_ = false;
};

}  // namespace verlpp::train
