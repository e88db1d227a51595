// Reward-model training on preference pairs: the Bradley–Terry loss -log sigmoid(r_chosen -
// r_rejected), each reward read at its sequence's last valid token (reward_model.hpp), averaged
// over the batch's pairs with gradient accumulation over micro-batches of pairs; precision,
// optimizer step, data parallelism and files are its TrainedModel's, as the actor's are.
#pragma once

#include <verlpp/data/batch.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/train/lr_schedule.hpp>
#include <verlpp/train/trained_model.hpp>
#include <verlpp/train/training_role.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>

namespace verlpp::train {

// A batch of preference pairs: row i of chosen_{input_ids, attention_mask, position_ids} and of
// rejected_{...} ([P, T] each, any padding, the same T) is pair i.
namespace pair_fields {
inline constexpr const char* kChosenIds = "chosen_input_ids";
inline constexpr const char* kChosenMask = "chosen_attention_mask";
inline constexpr const char* kChosenPositions = "chosen_position_ids";
inline constexpr const char* kRejectedIds = "rejected_input_ids";
inline constexpr const char* kRejectedMask = "rejected_attention_mask";
inline constexpr const char* kRejectedPositions = "rejected_position_ids";
}  // namespace pair_fields

// The optimizer, param_dtype and kernels are TrainedModelOptions'.
struct RewardModelTrainerConfig : TrainedModelOptions {
  int64_t micro_batch_size = 8;  // pairs per forward/backward (both sides in one forward)
};

// Sums over a set of pairs, for a held-out evaluation.
struct PairwiseSums {
  double loss = 0;     // sum of -log sigmoid(margin)
  double correct = 0;  // pairs with r_chosen > r_rejected (a tie counts half)
  double margin = 0;   // sum of r_chosen - r_rejected
  int64_t pairs = 0;
  double mean_loss() const { return pairs > 0 ? loss / double(pairs) : 0.0; }
  double accuracy() const { return pairs > 0 ? correct / double(pairs) : 0.0; }
};

class RewardModelTrainer : public TrainingRole {
 public:
  // Trains `model` (a one-label score head: check_reward_model_config) in place.
  RewardModelTrainer(model::DecoderLM& model, RewardModelTrainerConfig config, LrSchedule schedule);
  ~RewardModelTrainer();

  // One optimizer step on `pairs` (pair_fields). With data parallelism each rank takes its
  // share of the pairs and the loss is the mean over all of them. Metrics: rm/loss, rm/accuracy,
  // rm/margin, rm/chosen_score, rm/rejected_score (means over the pairs), rm/grad_norm, rm/lr,
  // rm/skipped_steps.
  nlohmann::json train_step(const data::Batch& pairs);

  // The sums of `pairs` without a graph (this rank's rows only: a caller splitting pairs over
  // ranks sums the results itself).
  PairwiseSums evaluate(const data::Batch& pairs) const;

  const RewardModelTrainerConfig& config() const { return config_; }

 private:
  // {r_chosen, r_rejected} [p] fp32 for `pairs` on the compute model (a graph when grad mode is on).
  std::pair<at::Tensor, at::Tensor> rewards_of(const data::Batch& pairs) const;
  RewardModelTrainerConfig config_;
};

}  // namespace verlpp::train
