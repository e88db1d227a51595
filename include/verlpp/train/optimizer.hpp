// The optimizer step shared by the actor and the critic: AdamW (LibTorch's) over a model's
// parameters, the LR from a schedule, gradient clipping as torch.nn.utils.clip_grad_norm_, and a
// step whose gradient norm is not finite skipped (weights kept, counted), as verl does. Its state
// saves to and loads from one .safetensors file, so a resumed run continues bit-identically.
#pragma once

#include <verlpp/train/data_parallel.hpp>
#include <verlpp/train/lr_schedule.hpp>

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::train {

class MixedPrecision;
namespace detail {
class ShardedOptimizer;
}

struct AdamWConfig {
  double weight_decay = 0.01;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double grad_clip = 1.0;  // max L2 norm of all gradients together
};

class OptimizerStep {
 public:
  OptimizerStep(std::vector<at::Tensor> params, AdamWConfig config, LrSchedule schedule);
  ~OptimizerStep();

  // Shards the optimizer over dp's ranks (nothing changes with one rank). Call before the first
  // step. `zero_stage` 1 (ZeRO-1): this rank keeps AdamW state only for the parameters it owns
  // (whole parameters, balanced by size); after each step every parameter is broadcast from its
  // owner. Gradients must be summed over the ranks before clip_and_step
  // (DataParallel::all_reduce_gradients). `zero_stage` 2 (ZeRO-2): the parameters laid end to end
  // are split into one flat shard per rank; clip_and_step itself reduce-scatters the (unsummed)
  // gradients into this rank's shard and drops them, clips by the global norm, steps AdamW on
  // the shard and all-gathers the new values, so only the shard's gradient and moments persist
  // (the parameters stay whole on every rank). Either way save_state and load_state become
  // collective and the file still holds every parameter's state (rank 0 writes it), so a
  // checkpoint resumes on any number of ranks at any stage. (TrainedModel's ZeRO-2 keeps its
  // state in ShardedWeights' units instead: use_sharded_state.)
  void shard(const DataParallel& dp, int zero_stage = 1);
  // From now on the state is `sharded`'s (ZeRO-3 and offloaded layouts, TrainedModel sets it up
  // over its ShardedWeights): clip_and_step steps it, save_state/load_state gather and scatter it
  // (collective over `dp`), and this object keeps only the counters and the LR. Before the first step.
  void use_sharded_state(std::unique_ptr<detail::ShardedOptimizer> sharded, const DataParallel& dp, int zero_stage);
  bool is_sharded() const;
  // 0 (replicated), 1, 2 or 3: what shard() or use_sharded_state() set up.
  int zero_stage() const;
  // Whether clip_and_step sums the gradients over the ranks itself (ZeRO-2, sharded state).
  bool sums_gradients() const;
  // The sharded state of use_sharded_state (null otherwise).
  const detail::ShardedOptimizer* sharded_state() const;
  detail::ShardedOptimizer* sharded_state();
  // Elements of AdamW state this rank holds (exp_avg + exp_avg_sq), for memory reports.
  int64_t state_elements() const;
  // Elements of gradient this rank keeps between steps: its shard's at ZeRO-2, 0 otherwise (the
  // parameters' own gradients are dropped by zero_grad, or kept whole at ZeRO-1).
  int64_t sharded_gradient_elements() const;

  // Sets the LR for update number `update` (0-based) and returns it.
  double set_lr_for_update(int64_t update);
  void zero_grad();
  // Clips, then steps unless the norm is not finite. Returns the norm before clipping.
  double clip_and_step();
  // The plugin kernels whose adamw_update (ABI 1.4) clip_and_step(MixedPrecision&) uses where it
  // can; null (the default): LibTorch's AdamW. `kernels` must outlive this object.
  void use_kernels(const hw::Kernels* kernels);
  // Whether clip_and_step(MixedPrecision&) goes through the plugin's adamw_update: offered, and
  // the state not sharded. Only then is MixedPrecision::defer_casts worth turning on.
  bool updates_through_plugin() const;
  // The step of a model trained through `precision`, equal in effect to flushing its deferred
  // casts, clip_and_step() and (unless skipped) refresh_compute(). Through the plugin it is one
  // pass: 16-bit gradients read as they are, the clipping factor computed and applied on the
  // device (so nothing waits for the norm until the update is queued), the compute copy written
  // by the update. Returns the norm before clipping.
  double clip_and_step(MixedPrecision& precision);
  // Whether the last clip_and_step(MixedPrecision&) went through the plugin's adamw_update.
  bool last_step_through_plugin() const { return last_through_plugin_; }

  // Writes AdamW's per-parameter state (step, exp_avg, exp_avg_sq), the step/skip counters, and the config, to one
  // .safetensors file at `path` (parameters named by `names`, same order as the params given to the constructor).
  // Tensors "<name>.step" ([1] int64), "<name>.exp_avg", "<name>.exp_avg_sq" (the param's shape
  // and dtype); a parameter never stepped has none. Counters, LR, config and names: __metadata__.
  void save_state(const std::string& path, const std::vector<std::string>& names) const;
  // Restores what save_state wrote; Error naming the file and the tensor when a name, shape or dtype does not match.
  // Also restores the LR and the counters; the saved config must equal this one (an Error naming
  // the field otherwise). All or nothing: on an Error the optimizer is unchanged.
  void load_state(const std::string& path, const std::vector<std::string>& names);

  int64_t steps() const { return steps_; }
  int64_t skipped() const { return skipped_; }
  bool last_step_skipped() const { return last_skipped_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  AdamWConfig config_;
  LrSchedule schedule_;
  int64_t steps_ = 0, skipped_ = 0;
  bool last_skipped_ = false;
  bool last_through_plugin_ = false;
};

// torch.nn.utils.clip_grad_norm_ (L2): scales every gradient by min(1, max_norm / (norm + 1e-6))
// when the norm is finite; returns the norm before clipping.
double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace verlpp::train
