// TrainedModel: a model under training, the part Actor, Critic and SftTrainer have in common. It
// owns the precision (fp32 masters, a 16-bit compute copy), the optimizer step (AdamW, clipping,
// the LR schedule; a plugin's adamw_update; ZeRO-1/2 state), the data-parallel gradient sum and the
// checkpoint files, and runs an update's fixed sequence: backward → fp32 accumulation → sum over
// ranks → clip and step → compute copy refreshed. Its owner keeps only its loss and its loops.
// The compute copy's tensors are never replaced, only written: a rollout engine may hold them.
#pragma once

#include <verlpp/model/checkpoint.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/train/data_parallel.hpp>
#include <verlpp/train/lr_schedule.hpp>
#include <verlpp/train/mixed_precision.hpp>
#include <verlpp/train/optimizer.hpp>
#include <verlpp/train/sharding.hpp>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::train {

class ShardedWeights;

// What every trained model is set up with; ActorConfig, CriticConfig and SftConfig extend it.
struct TrainedModelOptions {
  AdamWConfig optim;  // weight decay, betas, eps, grad_clip
  // fsdp_config.mixed_precision.param_dtype: the dtype forwards and backwards run in; the model's
  // own (fp32) weights stay the optimizer's masters (mixed_precision.hpp).
  at::ScalarType param_dtype = at::kFloat;
  // A plugin's kernels, or null for LibTorch's paths: the optimizer step takes its adamw_update
  // (ABI 1.4) where it can (OptimizerStep::use_kernels), and the owner may pass them to its
  // passes (the LM-head log-probs, logprob.hpp). Not owned; must outlive the trained model.
  const hw::Kernels* kernels = nullptr;
  // With kernels: RoPE of the training forwards through rotary_kv_store where offered (q/k/v
  // read strided from the fused projection); false takes rotary_embedding on copies
  // (verlpp.train.rotary_qkv).
  bool rotate_qkv = true;
  // LoRA (model/lora.hpp): train these adapters instead of the model's weights. The model is
  // then the frozen base: it stays in its own dtype (no fp32 masters, no compute copy, no
  // gradients), forwards add the adapters' terms, and only the adapters (fp32, their own masters)
  // are in the optimizer. Checkpoints hold the adapters as a PEFT folder.
  std::shared_ptr<model::LoraAdapters> lora;
};

class TrainedModel {
 public:
  // The optimizer state file that save() writes beside the model's weights.
  static constexpr const char* kOptimizerStateFile = "optimizer.safetensors";

  // Trains `model`'s parameters (fp32) in place: `model` must outlive this object, which turns on
  // its requires_grad. A 16-bit options.param_dtype makes the compute copy here, once; the
  // schedule gives the LR of each update. With options.lora the adapters are trained instead
  // (set on `model`, whose weights stay frozen).
  TrainedModel(model::DecoderLM& model, const TrainedModelOptions& options, LrSchedule schedule);
  ~TrainedModel();
  TrainedModel(const TrainedModel&) = delete;
  TrainedModel& operator=(const TrainedModel&) = delete;

  // --- the model ---
  // The trained model: its weights are the fp32 masters the optimizer steps.
  model::DecoderLM& master() { return master_; }
  const model::DecoderLM& master() const { return master_; }
  // The trained LoRA adapters (null without LoRA).
  const model::LoraAdapters* lora() const { return lora_.get(); }
  // The model forwards and backwards run on: the master itself, or its compute copy, which always
  // holds the latest weights cast (a rollout engine of that dtype can share its tensors: steps
  // write into them in place).
  const model::DecoderLM& compute() const;
  // Casts the master weights into the compute copy again, after they changed outside step()
  // (with sharded units the compute weights are always current: nothing to do).
  void refresh_compute();
  const hw::Kernels* kernels() const { return kernels_; }

  // --- data parallelism ---
  // From now on each step sums the gradients over dp's ranks; the owner splits its rows
  // (DataParallel::local_rows) and sums its metrics. `zero_stage` 1 shards the optimizer
  // (OptimizerStep::shard: each rank keeps the AdamW state of its own parameters); 2 and 3 as
  // the ShardingOptions overload says; saving and loading the optimizer state become collective.
  // Call before the first step.
  void set_data_parallel(DataParallel dp, int zero_stage = 0);
  // The same with the whole ShardingOptions. ZeRO-2 or 3 on several ranks, or any offload, keeps
  // the state in ShardedWeights' flat units (sharded_weights.hpp): the master model's parameters are
  // then freed (holds_master_weights() turns false) and compute() is the units' model.
  // Collective where the layout is sharded.
  void set_data_parallel(DataParallel dp, const ShardingOptions& sharding);
  const DataParallel& data_parallel() const { return dp_; }
  const ShardingOptions& sharding() const { return sharding_; }
  // The flat units (null unless set_data_parallel chose them).
  ShardedWeights* sharded_weights() { return weights_.get(); }
  const ShardedWeights* sharded_weights() const { return weights_.get(); }
  // Whether master() holds the weights (false while they live in the sharded units: call
  // materialize_master() to fill it, import_master() to take it back).
  bool holds_master_weights() const { return !weights_ || master_present_; }
  // Collective with sharded units: the fp32 weights gathered into master() on every rank.
  void materialize_master();
  // With sharded units: master()'s weights become the units' (masters and compute weights) and
  // master()'s memory is freed again. Call after changing master() (a warm start trained it).
  void import_master();
  // Frees gathered units (the weights outside the layers stay gathered from a forward until this
  // or the next step); nothing without sharded units.
  void release_gathered() const;
  // Bytes this rank holds now, measured from the tensors themselves (memory reports, tests).
  struct MemoryHeld {
    int64_t master_weights = 0;    // the master model's parameters (0 while the units hold them)
    int64_t adapter_weights = 0;   // LoRA's adapters (their own fp32 masters)
    int64_t compute_weights = 0;   // a separate compute copy, or the units' resident weights
    int64_t masters_in_units = 0;  // the sharded optimizer's fp32 masters kept apart from them
    int64_t gradients = 0;         // every gradient held (whole ones, or the units' sums)
    int64_t optimizer_states = 0;  // AdamW's moments
  };
  MemoryHeld memory_held() const;
  // fsdp_config.param_offload: the compute weights to host memory and back (a no-op without it).
  void offload_parameters();
  void reload_parameters();

  // --- one update: begin_update(), then per optimizer step zero_grad(), backward() of each
  // micro-batch's loss, step() ---
  // Starts update number updates() and counts it: sets its LR (returned) and forgets the
  // gradient norms of the previous update.
  double begin_update();
  void zero_grad();
  // loss.backward() on the compute model, then its gradients added into the masters' fp32 ones
  // (or, for a single backward stepped by the plugin, kept in 16 bits for the kernel).
  void backward(const at::Tensor& loss);
  // Sums the gradients over the ranks, clips, steps (skipped when the norm is not finite) and
  // refreshes the compute copy; a step taken bumps the weights version (DecoderLM::
  // weights_version), so a rollout engine holding these weights refuses or syncs before it
  // generates again. Returns the norm before clipping.
  double step();
  bool last_step_skipped() const { return optimizer_.last_step_skipped(); }
  // Host seconds spent in step() since begin_update() (the offloaded AdamW is synchronous and
  // counted whole; on a device the queued work may finish later).
  double step_seconds() const { return step_seconds_; }
  // The mean norm of the steps taken (not skipped) since begin_update(); 0 when none was.
  double mean_grad_norm() const { return norm_sum_ / double(steps_in_update_ > 0 ? steps_in_update_ : 1); }

  // --- counters ---
  const OptimizerStep& optimizer() const { return optimizer_; }
  int64_t steps() const { return optimizer_.steps(); }
  int64_t skipped_steps() const { return optimizer_.skipped(); }
  // Updates begun so far (the LR schedule's position), and restoring it on resume.
  int64_t updates() const { return updates_; }
  void set_updates(int64_t updates) { updates_ = updates; }

  // --- files ---
  // The optimizer's state as one .safetensors file (OptimizerStep::save_state, the parameters
  // named as the model names them); load_optimizer_state restores it and refreshes the compute
  // copy (an Error naming the file and tensor when it does not fit this model).
  void save_optimizer_state(const std::string& path) const;
  void load_optimizer_state(const std::string& path);
  // A checkpoint folder `dir`: the model as a Hugging Face folder (save_pretrained; rank 0 creates
  // and writes it), or with LoRA the adapters as a PEFT folder (the base is not written: it never
  // changes), with the optimizer state in it as kOptimizerStateFile (gathered to rank 0 when
  // sharded). Every rank calls save. updates() is not in it: the caller keeps the LR schedule's
  // position (RlTrainer: trainer_state.json) and restores it with set_updates.
  void save(const std::string& dir, const model::SaveOptions& options = {}) const;
  // Restores what save wrote (every rank reads the whole folder): the master weights, the
  // optimizer state, the compute copy.
  void load(const std::string& dir);

 private:
  model::DecoderLM& master_;
  std::shared_ptr<model::LoraAdapters> lora_;  // options.lora
  MixedPrecision precision_;
  ShardingOptions sharding_;
  std::unique_ptr<ShardedWeights> weights_;  // flat units (ZeRO-2/3, offload); null otherwise
  bool master_present_ = true;               // with weights_: whether master_ holds memory
  std::vector<at::Tensor>
      params_;  // what the optimizer and the all-reduce see: the master's parameters or the adapters
  std::vector<std::string> names_;  // their names in the optimizer state file
  OptimizerStep optimizer_;
  const hw::Kernels* kernels_ = nullptr;
  DataParallel dp_;
  int64_t updates_ = 0;
  double norm_sum_ = 0;          // over this update's steps taken
  int64_t steps_in_update_ = 0;  // steps taken (not skipped) in this update
  double step_seconds_ = 0;      // in step() since begin_update()
};

}  // namespace verlpp::train
