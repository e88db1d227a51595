// Critic: values from the score head and the clipped value-loss update (verl's dp_critic).
#include <ATen/core/grad_mode.h>
#include <verlpp/train/critic.hpp>

#include <verlpp/algo/value_loss.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/train/actor.hpp>

#include "device_sums.hpp"

namespace verlpp::train {

Critic::Critic(model::DecoderLM& model, CriticConfig config, LrSchedule schedule)
    : TrainingRole(model, config, std::move(schedule)), config_(std::move(config)) {
  VERLPP_CHECK(model.config().head != model::ModelHead::kCausalLM && model.config().num_labels == 1,
               "the critic needs a score head with one label (a ...ForTokenClassification model)");
  VERLPP_CHECK(config_.ppo_mini_batch_size >= 1, "ppo_mini_batch_size {} must be >= 1", config_.ppo_mini_batch_size);
  VERLPP_CHECK(config_.use_dynamic_bsz || (config_.ppo_micro_batch_size >= 1 &&
                                           config_.ppo_mini_batch_size % config_.ppo_micro_batch_size == 0),
               "ppo_micro_batch_size {} must divide ppo_mini_batch_size {}", config_.ppo_micro_batch_size,
               config_.ppo_mini_batch_size);
}

Critic::~Critic() = default;

at::Tensor Critic::values_of(const data::Batch& batch) const {
  const at::Tensor& ids = batch.tensor("input_ids");
  const int64_t t = ids.size(1), r = batch.tensor("responses").size(1);
  VERLPP_CHECK(r >= 1 && r < t, "response length {} must be in [1, T) with T = {}", r, t);
  const model::DecoderLM& m = trained_.compute();
  at::Tensor hidden = m.forward_padded(ids, batch.tensor("attention_mask"), batch.tensor("position_ids"));
  return m.scores(hidden.narrow(1, t - r - 1, r)).select(-1, 0).to(at::kFloat);  // [B, R]
}

at::Tensor Critic::compute_values(const data::Batch& batch) const {
  at::NoGradGuard no_grad;
  at::Tensor values = values_of(batch);
  trained_.release_gathered();  // sharded weights: the outer unit is not kept between stages
  return values;
}

nlohmann::json Critic::update_critic(const data::Batch& batch) {
  VERLPP_CHECK(batch.size() % config_.ppo_mini_batch_size == 0,
               "the batch of {} sequences is not a multiple of ppo_mini_batch_size {}", batch.size(),
               config_.ppo_mini_batch_size);
  const double lr = trained_.begin_update();
  enum Metric : size_t { kLoss, kClipfrac, kVpred, kMetrics };  // summed on the device
  detail::DeviceSums device_sums(kMetrics);
  int64_t micro_count = 0;
  for (int64_t epoch = 0; epoch < config_.ppo_epochs; ++epoch) {
    for (const data::Batch& mini : batch.split(config_.ppo_mini_batch_size)) {
      const at::Tensor mask = mini.tensor("response_mask");
      algo::AggLossOptions agg;
      agg.batch_num_tokens = mask.sum().item<double>();
      agg.global_batch_size = mask.sum(1).gt(0).sum().item<double>();
      trained_.zero_grad();
      const data::Batch local = trained_.data_parallel().local_rows(mini);
      for (const data::Batch& micro : micro_batches(local, config_.use_dynamic_bsz, config_.ppo_micro_batch_size,
                                                    config_.ppo_max_token_len, trained_.data_parallel())) {
        at::Tensor vpreds = values_of(micro);
        const at::Tensor m = micro.tensor("response_mask");
        algo::ValueLossOutput out = algo::compute_value_loss(vpreds, micro.tensor("returns"), micro.tensor("values"), m,
                                                             config_.cliprange_value, config_.loss_agg_mode, agg);
        trained_.backward(out.loss);
        device_sums.add(kLoss, out.loss);
        device_sums.add(kClipfrac, out.clipfrac);
        // the mean prediction over the micro-batch's response tokens (fp64, as the host did)
        device_sums.add(kVpred,
                        vpreds.detach().mul(m).sum().to(at::kDouble).div(m.sum().to(at::kDouble).clamp_min(1.0)));
        ++micro_count;
      }
      trained_.step();
    }
  }
  const std::vector<double> mean = detail::micro_batch_means(device_sums, micro_count, trained_.data_parallel());
  return {{"critic/vf_loss", mean[kLoss]},
          {"critic/vf_clipfrac", mean[kClipfrac]},
          {"critic/vpred_mean", mean[kVpred]},
          {"critic/grad_norm", trained_.mean_grad_norm()},
          {"critic/lr", lr},
          {"critic/skipped_steps", trained_.skipped_steps()}};
}

}  // namespace verlpp::train
