// SftTrainer: response-token NLL with gradient accumulation (see sft.hpp).
#include <ATen/core/grad_mode.h>
#include <verlpp/train/sft.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/train/logprob.hpp>

#include "device_sums.hpp"

namespace verlpp::train {

SftTrainer::SftTrainer(model::DecoderLM& model, SftConfig config, LrSchedule schedule)
    : TrainingRole(model, config, std::move(schedule)), config_(std::move(config)) {
  VERLPP_CHECK(config_.micro_batch_size >= 1, "sft micro_batch_size {} must be >= 1", config_.micro_batch_size);
}

SftTrainer::~SftTrainer() = default;

ResponseLogProbs SftTrainer::response_log_probs_of(const data::Batch& batch) const {
  return response_log_probs(trained_.compute(), batch.tensor("input_ids"), batch.tensor("attention_mask"),
                            batch.tensor("position_ids"), batch.tensor("responses").size(1), 1.0, false,
                            config_.log_prob_chunk_rows, config_.remove_padding, config_.kernels,
                            config_.logits_in_backward, config_.rotate_qkv);
}

nlohmann::json SftTrainer::train_step(const data::Batch& batch) {
  const double lr = trained_.begin_update();
  // Every micro-batch's loss is its sum over the batch's total token count, so the accumulated
  // gradient is exactly the full batch's token-mean gradient.
  const double tokens = batch.tensor("response_mask").sum().item<double>();
  VERLPP_CHECK(tokens > 0, "the SFT batch of {} rows has no response tokens", batch.size());
  trained_.zero_grad();
  detail::DeviceSums loss(1);  // summed on the device: no wait for it per micro-batch
  for (const data::Batch& micro : trained_.data_parallel().local_rows(batch).split(config_.micro_batch_size)) {
    at::Tensor nll = response_log_probs_of(micro).log_probs.mul(micro.tensor("response_mask")).sum().neg().div(tokens);
    trained_.backward(nll);
    loss.add(0, nll);
  }
  const double grad_norm = trained_.step();
  std::vector<double> sums = loss.values();  // the batch's NLL: every rank's share summed
  trained_.data_parallel().all_reduce_sum(sums);
  return {{"sft/loss", sums[0]},
          {"sft/grad_norm", grad_norm},
          {"sft/lr", lr},
          {"sft/tokens", tokens},
          {"sft/skipped_steps", trained_.skipped_steps()}};
}

double SftTrainer::loss(const data::Batch& batch) const {
  at::NoGradGuard no_grad;
  const at::Tensor log_probs = response_log_probs_of(batch).log_probs;
  const at::Tensor& mask = batch.tensor("response_mask");
  return log_probs.mul(mask).sum().neg().item<double>() / std::max(1.0, mask.sum().item<double>());
}

}  // namespace verlpp::train
