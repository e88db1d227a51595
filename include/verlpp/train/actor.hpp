// The actor: log-probs of responses, and the PPO-family policy update over mini- and
// micro-batches, as verl's dp_actor does it (policy loss by name, entropy bonus, KL loss,
// gradient clipping with non-finite steps skipped, AdamW, the LR schedule stepped once per
// update). Micro-batch losses are scaled by the mini-batch's global token/row counts, so the
// accumulated gradient equals the full mini-batch gradient exactly for every aggregation mode.
#pragma once

#include <verlpp/algo/policy_loss_types.hpp>
#include <verlpp/data/batch.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/train/data_parallel.hpp>
#include <verlpp/train/logprob.hpp>
#include <verlpp/train/lr_schedule.hpp>
#include <verlpp/train/mixed_precision.hpp>
#include <verlpp/train/optimizer.hpp>

#include <nlohmann/json.hpp>

#include <memory>
#include <vector>
#include <string>

namespace verlpp::train {

// verl's actor_rollout_ref.actor.* (batch sizes in sequences, i.e. already multiplied by n).
struct ActorConfig {
  int64_t ppo_mini_batch_size = 8;         // sequences per optimizer step
  int64_t ppo_micro_batch_size = 2;        // sequences per forward/backward (fixed mode)
  bool use_dynamic_bsz = false;            // micro-batches by token budget instead
  int64_t ppo_max_token_len = 16384;       // the budget per micro-batch (dynamic mode)
  int64_t ppo_epochs = 1;
  double entropy_coeff = 0.0;
  bool use_kl_loss = false;
  double kl_loss_coef = 0.001;
  std::string kl_loss_type = "low_var_kl";
  std::string loss_mode = "vanilla";       // policy_loss.loss_mode
  algo::PolicyLossConfig policy;           // clip ratios, agg mode, ...
  double temperature = 1.0;                // the rollout temperature the log-probs use
  AdamWConfig optim;                       // weight decay, betas, eps, grad_clip
  int64_t log_prob_chunk_rows = 4;
  bool remove_padding = false;             // model.use_remove_padding: packed forwards (logprob.hpp)
  // The LM head's logits kept for the backward (bf16: tokens x vocab x 2 bytes a micro-batch) or
  // recomputed there (model.use_fused_kernels: verl's memory-lean fused kernels).
  LogitsInBackward logits_in_backward = LogitsInBackward::kKeep;
  // fsdp_config.mixed_precision.param_dtype: the dtype forwards and backwards run in; the
  // optimizer keeps the model's own (fp32) weights as masters (mixed_precision.hpp).
  at::ScalarType param_dtype = at::kFloat;
  // The plugin's kernels for the LM-head log-probs (linear_log_probs.hpp), or null for LibTorch's
  // path; not owned, alive as long as the actor.
  const hw::Kernels* kernels = nullptr;
};

// Micro-batches of a mini-batch: `micro_size` rows each, or (dynamic) balanced groups whose
// attention_mask token counts fit `max_tokens`.
std::vector<data::Batch> micro_batches(const data::Batch& mini, bool dynamic, int64_t micro_size,
                                             int64_t max_tokens);

class Actor {
 public:
  // Trains `model`'s parameters (fp32) in place; the schedule gives the LR per update. With a
  // 16-bit config.param_dtype the passes run on a compute copy (compute_model()).
  Actor(model::DecoderLM& model, ActorConfig config, LrSchedule schedule);
  ~Actor();

  // Log-probs (and entropy) of batch's responses without building a graph. Needs tensors
  // input_ids, attention_mask, position_ids, responses [B, R].
  ResponseLogProbs compute_log_prob(const data::Batch& batch, bool with_entropy) const;

  // One policy update over `batch` (needs also response_mask, old_log_probs, advantages and,
  // with use_kl_loss, ref_log_prob). Returns verl-named metrics (actor/pg_loss, actor/grad_norm,
  // actor/lr, ...). A step whose gradient norm is not finite is skipped and counted.
  nlohmann::json update_policy(const data::Batch& batch);

  // Data parallelism: each mini-batch's rows are split over the ranks (the global token and
  // row counts still scale the losses), gradients are summed over ranks before the step, and
  // the metrics are averaged over every rank's micro-batches. Every rank must call
  // update_policy with the same batch.
  // With `shard_optimizer` (ZeRO-1) each rank keeps the AdamW state of its own parameters
  // only (OptimizerStep::shard); save_state/load_state then become collective.
  void set_data_parallel(DataParallel dp, bool shard_optimizer = false) {
    dp_ = dp;
    if (shard_optimizer) optimizer_->shard(dp);
  }
  const OptimizerStep& optimizer() const { return *optimizer_; }

  // Optimizer steps taken and skipped so far.
  int64_t steps() const { return optimizer_->steps(); }
  int64_t skipped_steps() const { return optimizer_->skipped(); }
  // Updates done so far (the LR schedule's position), and restoring it on resume.
  int64_t updates() const { return updates_; }
  void set_updates(int64_t updates) { updates_ = updates; }
  // The optimizer's state as one .safetensors file, for checkpoints; load_state restores it
  // (Error naming the file and tensor when it does not fit this model).
  void save_state(const std::string& path) const;
  void load_state(const std::string& path);
  const ActorConfig& config() const { return config_; }
  // The model the forwards run on: the trained model itself, or its 16-bit compute copy, which
  // always holds the latest weights (what a rollout engine of that dtype can share).
  const model::DecoderLM& compute_model() const { return precision_.compute(); }
  // Casts the model's weights into the compute copy again (after they changed outside update_policy).
  void refresh_compute_model() { precision_.refresh_compute(); }

 private:
  model::DecoderLM& model_;
  ActorConfig config_;
  MixedPrecision precision_;
  std::unique_ptr<OptimizerStep> optimizer_;
  std::vector<at::Tensor> params_;  // the optimizer's parameters, for the gradient all-reduce
  DataParallel dp_;
  int64_t updates_ = 0;
};

}  // namespace verlpp::train
