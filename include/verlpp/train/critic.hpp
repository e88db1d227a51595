// The critic: a decoder with a one-label score head (HF ...ForTokenClassification layout) whose
// per-token outputs are values, and its clipped value-loss update over mini- and micro-batches
// (verl's dp_critic), with the same optimizer step and global-batch scaling as the actor.
#pragma once

#include <verlpp/data/batch.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/train/data_parallel.hpp>
#include <verlpp/train/lr_schedule.hpp>
#include <verlpp/train/mixed_precision.hpp>
#include <verlpp/train/optimizer.hpp>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::train {

// verl's critic.* (batch sizes in sequences).
struct CriticConfig {
  int64_t ppo_mini_batch_size = 8;
  int64_t ppo_micro_batch_size = 2;
  bool use_dynamic_bsz = false;
  int64_t ppo_max_token_len = 32768;
  int64_t ppo_epochs = 1;
  double cliprange_value = 0.5;
  std::string loss_agg_mode = "token-mean";
  AdamWConfig optim;
  // model.fsdp_config.mixed_precision.param_dtype: the passes' dtype; the model's own (fp32)
  // weights are the optimizer's masters (mixed_precision.hpp).
  at::ScalarType param_dtype = at::kFloat;
  // A plugin whose adamw_update (ABI 1.4) runs the optimizer step (OptimizerStep::use_kernels),
  // or null for LibTorch's AdamW. Must outlive the critic.
  const hw::Kernels* kernels = nullptr;
};

class Critic {
 public:
  // `model` must have a score head with num_labels = 1.
  Critic(model::DecoderLM& model, CriticConfig config, LrSchedule schedule);
  ~Critic();

  // Values of the response positions, [B, R] fp32, without a graph: the score at the position
  // before each response token (verl: logits[:, -R-1:-1]).
  at::Tensor compute_values(const data::Batch& batch) const;

  // One update on `batch` (needs input_ids, attention_mask, position_ids, responses,
  // response_mask, values, returns). Metrics: critic/vf_loss, critic/vf_clipfrac,
  // critic/vpred_mean, critic/grad_norm, critic/lr.
  nlohmann::json update_critic(const data::Batch& batch);

  // Data parallelism as the actor's (see Actor::set_data_parallel).
  // With `shard_optimizer` (ZeRO-1) each rank keeps the AdamW state of its own parameters
  // only (OptimizerStep::shard); save_state/load_state then become collective.
  void set_data_parallel(DataParallel dp, bool shard_optimizer = false) {
    dp_ = dp;
    if (shard_optimizer) optimizer_->shard(dp);
  }
  const OptimizerStep& optimizer() const { return *optimizer_; }

  int64_t steps() const { return optimizer_->steps(); }
  int64_t skipped_steps() const { return optimizer_->skipped(); }
  // Updates done so far (the LR schedule's position), and restoring it on resume.
  int64_t updates() const { return updates_; }
  void set_updates(int64_t updates) { updates_ = updates; }
  // The optimizer's state as one .safetensors file, for checkpoints; load_state restores it
  // (Error naming the file and tensor when it does not fit this model).
  void save_state(const std::string& path) const;
  void load_state(const std::string& path);

 private:
  at::Tensor values_of(const data::Batch& batch) const;  // with grad when enabled
  model::DecoderLM& model_;
  CriticConfig config_;
  MixedPrecision precision_;
  std::unique_ptr<OptimizerStep> optimizer_;
  std::vector<at::Tensor> params_;
  DataParallel dp_;
  int64_t updates_ = 0;
};

}  // namespace verlpp::train
