// Critic: values from the score head and the clipped value-loss update (verl's dp_critic).
#include <ATen/core/grad_mode.h>
#include <verlpp/train/critic.hpp>

#include <verlpp/algo/value_loss.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/train/parameters.hpp>
#include <verlpp/train/actor.hpp>

#include "device_sums.hpp"

namespace verlpp::train {

Critic::Critic(model::DecoderLM& model, CriticConfig config, LrSchedule schedule) : model_(model), config_(std::move(config)), precision_(model_, config_.param_dtype) {
  VERLPP_CHECK(model_.config().head != model::ModelHead::kCausalLM && model_.config().num_labels == 1,
               "the critic needs a score head with one label (a ...ForTokenClassification model)");
  VERLPP_CHECK(config_.ppo_mini_batch_size >= 1, "ppo_mini_batch_size {} must be >= 1", config_.ppo_mini_batch_size);
  VERLPP_CHECK(config_.use_dynamic_bsz || (config_.ppo_micro_batch_size >= 1 &&
                                           config_.ppo_mini_batch_size % config_.ppo_micro_batch_size == 0),
               "ppo_micro_batch_size {} must divide ppo_mini_batch_size {}", config_.ppo_micro_batch_size,
               config_.ppo_mini_batch_size);
  model_.set_requires_grad(true);
  params_ = parameter_tensors(model_);
  optimizer_ = std::make_unique<OptimizerStep>(params_, config_.optim, std::move(schedule));
  optimizer_->use_kernels(config_.kernels);
}

Critic::~Critic() = default;

at::Tensor Critic::values_of(const data::Batch& batch) const {
  const at::Tensor& ids = batch.tensor("input_ids");
  const int64_t t = ids.size(1), r = batch.tensor("responses").size(1);
  VERLPP_CHECK(r >= 1 && r < t, "response length {} must be in [1, T) with T = {}", r, t);
  const model::DecoderLM& m = precision_.compute();
  at::Tensor hidden = m.forward_padded(ids, batch.tensor("attention_mask"), batch.tensor("position_ids"));
  return m.scores(hidden.narrow(1, t - r - 1, r)).select(-1, 0).to(at::kFloat);  // [B, R]
}

at::Tensor Critic::compute_values(const data::Batch& batch) const {
  at::NoGradGuard no_grad;
  return values_of(batch);
}

nlohmann::json Critic::update_critic(const data::Batch& batch) {
  VERLPP_CHECK(batch.size() % config_.ppo_mini_batch_size == 0,
               "the batch of {} sequences is not a multiple of ppo_mini_batch_size {}", batch.size(), config_.ppo_mini_batch_size);
  const double lr = optimizer_->set_lr_for_update(updates_);
  enum Metric : size_t { kLoss, kClipfrac, kVpred, kMetrics };  // summed on the device
  detail::DeviceSums device_sums(kMetrics);
  double norm_sum = 0;
  int64_t micro_count = 0, steps_taken = 0;
  // 16-bit gradients straight into the plugin's AdamW, unless a data-parallel sum needs fp32 ones.
  precision_.defer_casts(optimizer_->updates_through_plugin() && !dp_.is_distributed());
  for (int64_t epoch = 0; epoch < config_.ppo_epochs; ++epoch) {
    for (const data::Batch& mini : batch.split(config_.ppo_mini_batch_size)) {
      const at::Tensor mask = mini.tensor("response_mask");
      algo::AggLossOptions agg;
      agg.batch_num_tokens = mask.sum().item<double>();
      agg.global_batch_size = mask.sum(1).gt(0).sum().item<double>();
      optimizer_->zero_grad();
      const data::Batch local = dp_.local_rows(mini);
      for (const data::Batch& micro :
           micro_batches(local, config_.use_dynamic_bsz, config_.ppo_micro_batch_size, config_.ppo_max_token_len)) {
        at::Tensor vpreds = values_of(micro);
        const at::Tensor m = micro.tensor("response_mask");
        algo::ValueLossOutput out = algo::compute_value_loss(vpreds, micro.tensor("returns"), micro.tensor("values"), m,
                                                             config_.cliprange_value, config_.loss_agg_mode, agg);
        out.loss.backward();
        precision_.accumulate_gradients();
        device_sums.add(kLoss, out.loss);
        device_sums.add(kClipfrac, out.clipfrac);
        // the mean prediction over the micro-batch's response tokens (fp64, as the host did)
        device_sums.add(kVpred, vpreds.detach().mul(m).sum().to(at::kDouble).div(m.sum().to(at::kDouble).clamp_min(1.0)));
        ++micro_count;
      }
      dp_.all_reduce_gradients(params_);
      const double norm = optimizer_->clip_and_step(precision_);
      if (!optimizer_->last_step_skipped()) {
        norm_sum += norm;
        ++steps_taken;
      }
    }
  }
  ++updates_;
  std::vector<double> sums = device_sums.values();
  sums.push_back(double(micro_count));
  dp_.all_reduce_sum(sums);
  const double loss_sum = sums[kLoss], clipfrac_sum = sums[kClipfrac], vpred_sum = sums[kVpred];
  micro_count = int64_t(sums[kMetrics]);
  const double per_micro = double(std::max<int64_t>(micro_count, 1));
  return {{"critic/vf_loss", loss_sum / per_micro},
          {"critic/vf_clipfrac", clipfrac_sum / per_micro},
          {"critic/vpred_mean", vpred_sum / per_micro},
          {"critic/grad_norm", norm_sum / double(std::max<int64_t>(steps_taken, 1))},
          {"critic/lr", lr},
          {"critic/skipped_steps", optimizer_->skipped()}};
}

void Critic::save_state(const std::string& path) const { optimizer_->save_state(path, parameter_names(model_)); }
void Critic::load_state(const std::string& path) {
  optimizer_->load_state(path, parameter_names(model_));
  precision_.refresh_compute();  // the caller may have loaded new master weights too
}

}  // namespace verlpp::train
