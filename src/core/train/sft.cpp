// SftTrainer: response-token NLL with gradient accumulation (see sft.hpp).
#include <ATen/core/grad_mode.h>
#include <verlpp/train/sft.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/train/parameters.hpp>
#include <verlpp/train/logprob.hpp>

#include "device_sums.hpp"

namespace verlpp::train {

SftTrainer::SftTrainer(model::DecoderLM& model, SftConfig config, LrSchedule schedule)
    : model_(model), config_(std::move(config)), precision_(model_, config_.param_dtype) {
  VERLPP_CHECK(config_.micro_batch_size >= 1, "sft micro_batch_size {} must be >= 1", config_.micro_batch_size);
  model_.set_requires_grad(true);
  params_ = parameter_tensors(model_);
  optimizer_ = std::make_unique<OptimizerStep>(params_, config_.optim, std::move(schedule));
  optimizer_->use_kernels(config_.kernels);
}

SftTrainer::~SftTrainer() = default;

nlohmann::json SftTrainer::train_step(const data::Batch& batch) {
  const double lr = optimizer_->set_lr_for_update(updates_++);
  const int64_t response_length = batch.tensor("responses").size(1);
  // Every micro-batch's loss is its sum over the batch's total token count, so the accumulated
  // gradient is exactly the full batch's token-mean gradient.
  const double tokens = batch.tensor("response_mask").sum().item<double>();
  VERLPP_CHECK(tokens > 0, "the SFT batch of {} rows has no response tokens", batch.size());
  optimizer_->zero_grad();
  precision_.defer_casts(optimizer_->updates_through_plugin() && !dp_.is_distributed());
  detail::DeviceSums loss(1);  // summed on the device: no wait for it per micro-batch
  for (const data::Batch& micro : dp_.local_rows(batch).split(config_.micro_batch_size)) {
    ResponseLogProbs out = response_log_probs(precision_.compute(), micro.tensor("input_ids"), micro.tensor("attention_mask"),
                                              micro.tensor("position_ids"), response_length, 1.0, false,
                                              config_.log_prob_chunk_rows, config_.remove_padding, config_.kernels,
                                              config_.logits_in_backward);
    at::Tensor nll = out.log_probs.mul(micro.tensor("response_mask")).sum().neg().div(tokens);
    nll.backward();
    precision_.accumulate_gradients();
    loss.add(0, nll);
  }
  dp_.all_reduce_gradients(params_);
  std::vector<double> sums = loss.values();
  dp_.all_reduce_sum(sums);
  const double loss_sum = sums[0];
  const double grad_norm = optimizer_->clip_and_step(precision_);
  return {{"sft/loss", loss_sum}, {"sft/grad_norm", grad_norm}, {"sft/lr", lr}, {"sft/tokens", tokens},
          {"sft/skipped_steps", optimizer_->skipped()}};
}

double SftTrainer::loss(const data::Batch& batch) const {
  at::NoGradGuard no_grad;
  ResponseLogProbs out = response_log_probs(precision_.compute(), batch.tensor("input_ids"), batch.tensor("attention_mask"),
                                            batch.tensor("position_ids"), batch.tensor("responses").size(1), 1.0, false,
                                            config_.log_prob_chunk_rows, config_.remove_padding, config_.kernels,
                                              config_.logits_in_backward);
  const at::Tensor& mask = batch.tensor("response_mask");
  return out.log_probs.mul(mask).sum().neg().item<double>() / std::max(1.0, mask.sum().item<double>());
}

}  // namespace verlpp::train
