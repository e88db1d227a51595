// Supervised fine-tuning on (prompt, response) pairs: the token-mean negative log-likelihood of
// the response tokens (verl's fsdp_sft_trainer loss), over micro-batches with gradient
// accumulation scaled by the whole batch's token count, and the optimizer step the actor uses.
// Batches use the RL layout ([left-padded prompt | right-padded response], collate_sft), so the
// warm start and the RL actor share one log-prob path.
#pragma once

#include <verlpp/data/batch.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/train/data_parallel.hpp>
#include <verlpp/train/linear_log_probs.hpp>
#include <verlpp/train/lr_schedule.hpp>
#include <verlpp/train/mixed_precision.hpp>
#include <verlpp/train/optimizer.hpp>

#include <nlohmann/json.hpp>

#include <memory>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::train {

struct SftConfig {
  int64_t micro_batch_size = 16;  // rows per forward/backward
  AdamWConfig optim;              // weight decay, betas, eps, grad_clip
  int64_t log_prob_chunk_rows = 8;
  bool remove_padding = false;    // packed forwards over the real tokens only (logprob.hpp)
  LogitsInBackward logits_in_backward = LogitsInBackward::kKeep;  // model.use_fused_kernels: kRecompute
  at::ScalarType param_dtype = at::kFloat;  // the passes' dtype; fp32 masters (mixed_precision.hpp)
  const hw::Kernels* kernels = nullptr;      // the plugin's LM-head log-prob kernels, or null (logprob.hpp)
};

class SftTrainer {
 public:
  // Trains `model`'s parameters in place; the schedule gives the LR per step.
  SftTrainer(model::DecoderLM& model, SftConfig config, LrSchedule schedule);
  ~SftTrainer();

  // One optimizer step on `batch` (input_ids, attention_mask, position_ids, responses,
  // response_mask). Metrics: sft/loss (token-mean NLL), sft/grad_norm, sft/lr, sft/tokens.
  nlohmann::json train_step(const data::Batch& batch);

  // The token-mean NLL of `batch`'s responses without a graph (for evaluation).
  double loss(const data::Batch& batch) const;

  // Data parallelism as the actor's: each rank trains on its rows, gradients are summed.
  // With `shard_optimizer` (ZeRO-1) each rank keeps the AdamW state of its own parameters
  // only (OptimizerStep::shard); save_state/load_state then become collective.
  void set_data_parallel(DataParallel dp, bool shard_optimizer = false) {
    dp_ = dp;
    if (shard_optimizer) optimizer_->shard(dp);
  }
  const OptimizerStep& optimizer() const { return *optimizer_; }

  int64_t steps() const { return optimizer_->steps(); }

 private:
  model::DecoderLM& model_;
  SftConfig config_;
  MixedPrecision precision_;
  std::unique_ptr<OptimizerStep> optimizer_;
  std::vector<at::Tensor> params_;
  DataParallel dp_;
  int64_t updates_ = 0;
};

}  // namespace verlpp::train
