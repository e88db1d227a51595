// Supervised fine-tuning on (prompt, response) pairs: the token-mean negative log-likelihood of
// the response tokens (verl's fsdp_sft_trainer loss), over micro-batches with gradient
// accumulation scaled by the whole batch's token count; precision, optimizer step and data
// parallelism are its TrainedModel's, as the actor's are.
// Batches use the RL layout ([left-padded prompt | right-padded response], collate_sft), so the
// warm start and the RL actor share one log-prob path.
#pragma once

#include <verlpp/data/batch.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/train/data_parallel.hpp>
#include <verlpp/train/linear_log_probs.hpp>
#include <verlpp/train/logprob.hpp>
#include <verlpp/train/lr_schedule.hpp>
#include <verlpp/train/trained_model.hpp>
#include <verlpp/train/training_role.hpp>

#include <nlohmann/json.hpp>

namespace verlpp::train {

// The optimizer, param_dtype and kernels (also for the log-probs) are TrainedModelOptions'.
struct SftConfig : TrainedModelOptions {
  int64_t micro_batch_size = 16;  // rows per forward/backward
  int64_t log_prob_chunk_rows = 8;
  bool remove_padding = false;  // packed forwards over the real tokens only (logprob.hpp)
  LogitsInBackward logits_in_backward = LogitsInBackward::kKeep;  // model.use_fused_kernels: kRecompute
};

class SftTrainer : public TrainingRole {
 public:
  // Trains `model`'s parameters in place; the schedule gives the LR per step.
  SftTrainer(model::DecoderLM& model, SftConfig config, LrSchedule schedule);
  ~SftTrainer();

  // One optimizer step on `batch` (input_ids, attention_mask, position_ids, responses,
  // response_mask). Metrics: sft/loss (token-mean NLL), sft/grad_norm, sft/lr, sft/tokens.
  // With data parallelism (set_data_parallel) each rank trains on its rows of the batch.
  nlohmann::json train_step(const data::Batch& batch);

  // The token-mean NLL of `batch`'s responses without a graph (for evaluation).
  double loss(const data::Batch& batch) const;

  const SftConfig& config() const { return config_; }

 private:
  // The log-probs of `batch`'s responses on the compute model (a graph when grad mode is on).
  ResponseLogProbs response_log_probs_of(const data::Batch& batch) const;
  SftConfig config_;
};

}  // namespace verlpp::train
