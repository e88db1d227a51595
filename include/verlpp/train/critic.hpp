// The critic: a decoder with a one-label score head (HF ...ForTokenClassification layout) whose
// per-token outputs are values, and its clipped value-loss update over mini- and micro-batches
// (verl's dp_critic), with the actor's global-batch scaling; the optimizer step, precision and
// files are its TrainedModel's.
#pragma once

#include <verlpp/data/batch.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/train/data_parallel.hpp>
#include <verlpp/train/lr_schedule.hpp>
#include <verlpp/train/trained_model.hpp>
#include <verlpp/train/training_role.hpp>

#include <nlohmann/json.hpp>

#include <string>

namespace verlpp::train {

// verl's critic.* (batch sizes in sequences); the optimizer, param_dtype (critic.model.fsdp_config)
// and kernels (for the optimizer step only) are TrainedModelOptions'.
struct CriticConfig : TrainedModelOptions {
  int64_t ppo_mini_batch_size = 8;
  int64_t ppo_micro_batch_size = 2;
  bool use_dynamic_bsz = false;
  int64_t ppo_max_token_len = 32768;
  int64_t ppo_epochs = 1;
  double cliprange_value = 0.5;
  std::string loss_agg_mode = "token-mean";
};

class Critic : public TrainingRole {
 public:
  // `model` must have a score head with num_labels = 1.
  Critic(model::DecoderLM& model, CriticConfig config, LrSchedule schedule);
  ~Critic();

  // Values of the response positions, [B, R] fp32, without a graph: the score at the position
  // before each response token (verl: logits[:, -R-1:-1]).
  at::Tensor compute_values(const data::Batch& batch) const;

  // One update on `batch` (needs input_ids, attention_mask, position_ids, responses,
  // response_mask, values, returns). Metrics: critic/vf_loss, critic/vf_clipfrac,
  // critic/vpred_mean, critic/grad_norm, critic/lr. Data parallelism as the actor's
  // (Actor::update_policy).
  nlohmann::json update_critic(const data::Batch& batch);

  const CriticConfig& config() const { return config_; }

 private:
  at::Tensor values_of(const data::Batch& batch) const;  // with grad when enabled
  CriticConfig config_;
};

}  // namespace verlpp::train
