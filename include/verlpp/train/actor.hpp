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
#include <verlpp/train/trained_model.hpp>
#include <verlpp/train/training_role.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace verlpp::train {

// verl's actor_rollout_ref.actor.* (batch sizes in sequences, i.e. already multiplied by n); the
// optimizer, param_dtype and kernels are TrainedModelOptions' (kernels also run the log-probs).
struct ActorConfig : TrainedModelOptions {
  int64_t ppo_mini_batch_size = 8;    // sequences per optimizer step
  int64_t ppo_micro_batch_size = 2;   // sequences per forward/backward (fixed mode)
  bool use_dynamic_bsz = false;       // micro-batches by token budget instead
  int64_t ppo_max_token_len = 16384;  // the budget per micro-batch (dynamic mode)
  int64_t ppo_epochs = 1;
  double entropy_coeff = 0.0;
  bool use_kl_loss = false;
  double kl_loss_coef = 0.001;
  std::string kl_loss_type = "low_var_kl";
  std::string loss_mode = "vanilla";  // policy_loss.loss_mode
  algo::PolicyLossConfig policy;      // clip ratios, agg mode, ...
  double temperature = 1.0;           // the rollout temperature the log-probs use
  int64_t log_prob_chunk_rows = 4;
  bool remove_padding = false;  // model.use_remove_padding: packed forwards (logprob.hpp)
  // The LM head's logits kept for the backward (bf16: tokens x vocab x 2 bytes a micro-batch) or
  // recomputed there (model.use_fused_kernels: verl's memory-lean fused kernels).
  LogitsInBackward logits_in_backward = LogitsInBackward::kKeep;
};

// Micro-batches of a mini-batch: `micro_size` rows each, or (dynamic) balanced groups whose
// attention_mask token counts fit `max_tokens`. With `dp` distributed and dynamic, every rank
// makes as many as the rank that needs the most (verl's same_micro_num_in_dp): sharded weights
// gather and reduce-scatter in every micro-batch, collectively. Collective then.
std::vector<data::Batch> micro_batches(const data::Batch& mini, bool dynamic, int64_t micro_size, int64_t max_tokens,
                                       const DataParallel& dp = DataParallel());

class Actor : public TrainingRole {
 public:
  // Trains `model`'s parameters (fp32) in place; the schedule gives the LR per update. With a
  // 16-bit config.param_dtype the passes run on a compute copy (compute_model()).
  Actor(model::DecoderLM& model, ActorConfig config, LrSchedule schedule);
  // The same with a constant learning rate (LrSchedule::constant; Error unless > 0).
  Actor(model::DecoderLM& model, ActorConfig config, double learning_rate)
      : Actor(model, std::move(config), LrSchedule::constant(learning_rate)) {}
  ~Actor();

  // Log-probs (and entropy) of batch's responses without building a graph. Needs tensors
  // input_ids, attention_mask, position_ids, responses [B, R].
  ResponseLogProbs compute_log_prob(const data::Batch& batch, bool with_entropy) const;

  // One policy update over `batch` (needs also response_mask, old_log_probs, advantages and,
  // with use_kl_loss, ref_log_prob). Returns verl-named metrics (actor/pg_loss, actor/grad_norm,
  // actor/lr, ...). A step whose gradient norm is not finite is skipped and counted.
  // With data parallelism (set_data_parallel) each mini-batch's rows are split over the ranks
  // (the global token and row counts still scale the losses) and the metrics are averaged over
  // every rank's micro-batches; every rank must call it with the same batch.
  nlohmann::json update_policy(const data::Batch& batch);

  const ActorConfig& config() const { return config_; }
  // Shorthands for trained_model()'s compute() and refresh_compute(): the model the passes run
  // on, whose tensors a rollout engine of that dtype shares.
  const model::DecoderLM& compute_model() const { return trained_.compute(); }
  void refresh_compute_model() { trained_.refresh_compute(); }

 private:
  ActorConfig config_;
};

}  // namespace verlpp::train
