// RewardModelTrainer: the Bradley–Terry pairwise loss with gradient accumulation (see
// reward_model_trainer.hpp).
#include <ATen/core/grad_mode.h>
#include <verlpp/train/reward_model_trainer.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/train/reward_model.hpp>

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/log_sigmoid.h>

#include "device_sums.hpp"

namespace verlpp::train {
namespace {

using namespace pair_fields;

// The reward at each row's last valid token, [rows] fp32 (a graph when grad mode is on).
at::Tensor last_token_rewards(const model::DecoderLM& m, const at::Tensor& ids, const at::Tensor& mask,
                              const at::Tensor& positions) {
  const at::Tensor hidden = m.forward_padded(ids, mask, positions);
  const at::Tensor last = last_valid_token(mask, positions);
  return m.scores(hidden.index({at::arange(ids.size(0), last.options()), last})).select(-1, 0).to(at::kFloat);
}

// The batch the data-parallel partition balances: one row per pair, its mask both sides' tokens.
data::Batch pair_lengths(const data::Batch& pairs) {
  data::Batch b;
  b.set("attention_mask", at::cat({pairs.tensor(kChosenMask), pairs.tensor(kRejectedMask)}, 1));
  return b;
}

}  // namespace

RewardModelTrainer::RewardModelTrainer(model::DecoderLM& model, RewardModelTrainerConfig config, LrSchedule schedule)
    : TrainingRole(model, config, std::move(schedule)), config_(std::move(config)) {
  check_reward_model_config(model.config(), "the trained reward model");
  VERLPP_CHECK(config_.micro_batch_size >= 1, "reward model micro_batch_size {} must be >= 1",
               config_.micro_batch_size);
}

RewardModelTrainer::~RewardModelTrainer() = default;

std::pair<at::Tensor, at::Tensor> RewardModelTrainer::rewards_of(const data::Batch& pairs) const {
  const model::DecoderLM& m = trained_.compute();
  VERLPP_CHECK(pairs.tensor(kChosenIds).size(1) == pairs.tensor(kRejectedIds).size(1),
               "chosen and rejected rows must have the same length, got {} and {}", pairs.tensor(kChosenIds).size(1),
               pairs.tensor(kRejectedIds).size(1));
  // Both sides in one forward: twice the rows, one pass over the weights.
  const at::Tensor rewards =
      last_token_rewards(m, at::cat({pairs.tensor(kChosenIds), pairs.tensor(kRejectedIds)}),
                         at::cat({pairs.tensor(kChosenMask), pairs.tensor(kRejectedMask)}),
                         at::cat({pairs.tensor(kChosenPositions), pairs.tensor(kRejectedPositions)}));
  const int64_t p = pairs.size();
  return {rewards.narrow(0, 0, p), rewards.narrow(0, p, p)};
}

nlohmann::json RewardModelTrainer::train_step(const data::Batch& pairs) {
  const int64_t total = pairs.size();
  VERLPP_CHECK(total >= 1, "a reward model step needs at least one pair");
  const double lr = trained_.begin_update();
  trained_.zero_grad();
  enum Metric : size_t { kLoss, kCorrect, kMargin, kChosen, kRejected, kMetrics };
  detail::DeviceSums sums(kMetrics);  // summed on the device: no wait per micro-batch
  const DataParallel& dp = trained_.data_parallel();
  const data::Batch local = dp.is_distributed() ? dp.local_rows(pairs, dp.partition(pair_lengths(pairs))) : pairs;
  for (const data::Batch& micro : local.split(config_.micro_batch_size)) {
    auto [chosen, rejected] = rewards_of(micro);
    const at::Tensor margin = chosen.sub(rejected);
    // Each micro-batch's loss is its sum over the whole batch's pair count, so the accumulated
    // (and, over ranks, summed) gradient is exactly the batch mean's.
    const at::Tensor loss = at::log_sigmoid(margin).sum().neg().div(double(total));
    trained_.backward(loss);
    const at::Tensor m = margin.detach();
    sums.add(kLoss, loss.detach());
    sums.add(kCorrect, m.gt(0).to(at::kDouble).add(m.eq(0).to(at::kDouble).mul(0.5)).sum());
    sums.add(kMargin, m.sum());
    sums.add(kChosen, chosen.detach().sum());
    sums.add(kRejected, rejected.detach().sum());
  }
  const double grad_norm = trained_.step();
  std::vector<double> v = sums.values();
  dp.all_reduce_sum(v);
  const double n = double(total);
  return {{"rm/loss", v[kLoss]},
          {"rm/accuracy", v[kCorrect] / n},
          {"rm/margin", v[kMargin] / n},
          {"rm/chosen_score", v[kChosen] / n},
          {"rm/rejected_score", v[kRejected] / n},
          {"rm/grad_norm", grad_norm},
          {"rm/lr", lr},
          {"rm/skipped_steps", trained_.skipped_steps()}};
}

PairwiseSums RewardModelTrainer::evaluate(const data::Batch& pairs) const {
  at::NoGradGuard no_grad;
  PairwiseSums out;
  for (const data::Batch& micro : pairs.split(config_.micro_batch_size)) {
    auto [chosen, rejected] = rewards_of(micro);
    const at::Tensor m = chosen.sub(rejected).to(at::kDouble);
    out.loss += at::log_sigmoid(m).sum().neg().item<double>();
    out.correct += m.gt(0).to(at::kDouble).add(m.eq(0).to(at::kDouble).mul(0.5)).sum().item<double>();
    out.margin += m.sum().item<double>();
    out.pairs += micro.size();
  }
  return out;
}

}  // namespace verlpp::train
