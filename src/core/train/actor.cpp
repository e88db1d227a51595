// Actor: log-probs and the policy update (verl's dp_actor.update_policy).
#include <ATen/core/grad_mode.h>
#include <verlpp/train/actor.hpp>

#include <verlpp/algo/agg_loss.hpp>
#include <verlpp/algo/kl.hpp>
#include <verlpp/algo/policy_loss.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/train/partition.hpp>

#include "device_sums.hpp"

#include <cmath>

namespace verlpp::train {

// Micro-batches of `mini`: fixed size, or balanced under a token budget, as many on every rank.
std::vector<data::Batch> micro_batches(const data::Batch& mini, bool dynamic, int64_t micro_size, int64_t max_tokens,
                                       const DataParallel& dp) {
  if (!dynamic) return mini.split(micro_size);
  at::Tensor lens = mini.tensor("attention_mask").sum(1).to(at::kLong).cpu().contiguous();
  std::vector<int64_t> seq_lens(lens.data_ptr<int64_t>(), lens.data_ptr<int64_t>() + lens.numel());
  // Each round every rank asks for at least the largest count of the last; a round in which no
  // rank made more than it asked for ends with one count everywhere (every rank sees the same
  // maximum, so all leave together).
  int64_t want = 1;
  std::vector<std::vector<int64_t>> groups;
  for (;;) {
    groups = dynamic_micro_batches(seq_lens, max_tokens, want);
    if (!dp.is_distributed()) break;
    const int64_t most = dp.max_over_ranks(int64_t(groups.size()));
    if (most == want) break;
    want = most;
  }
  VERLPP_CHECK(!dp.is_distributed() || int64_t(groups.size()) == want,
               "use_dynamic_bsz: rank {} has {} rows for {} micro-batches, the count another rank needs", dp.rank(),
               seq_lens.size(), want);
  std::vector<data::Batch> out;
  for (const auto& group : groups) out.push_back(mini.rows(group));
  return out;
}

Actor::Actor(model::DecoderLM& model, ActorConfig config, LrSchedule schedule)
    : TrainingRole(model, config, std::move(schedule)), config_(std::move(config)) {
  VERLPP_CHECK(config_.ppo_mini_batch_size >= 1, "ppo_mini_batch_size {} must be >= 1", config_.ppo_mini_batch_size);
  VERLPP_CHECK(config_.use_dynamic_bsz || (config_.ppo_micro_batch_size >= 1 &&
                                           config_.ppo_mini_batch_size % config_.ppo_micro_batch_size == 0),
               "ppo_micro_batch_size {} must divide ppo_mini_batch_size {}", config_.ppo_micro_batch_size,
               config_.ppo_mini_batch_size);
  VERLPP_CHECK(config_.ppo_epochs >= 1, "ppo_epochs {} must be >= 1", config_.ppo_epochs);
}

Actor::~Actor() = default;

ResponseLogProbs Actor::compute_log_prob(const data::Batch& batch, bool with_entropy) const {
  at::NoGradGuard no_grad;
  ResponseLogProbs out = response_log_probs(
      trained_.compute(), batch.tensor("input_ids"), batch.tensor("attention_mask"), batch.tensor("position_ids"),
      batch.tensor("responses").size(1), config_.temperature, with_entropy, config_.log_prob_chunk_rows,
      config_.remove_padding, config_.kernels, config_.logits_in_backward, config_.rotate_qkv);
  trained_.release_gathered();  // sharded weights: the outer unit is not kept between stages
  return out;
}

nlohmann::json Actor::update_policy(const data::Batch& batch) {
  const int64_t rows = batch.size();
  VERLPP_CHECK(rows % config_.ppo_mini_batch_size == 0,
               "the batch of {} sequences is not a multiple of ppo_mini_batch_size {}", rows,
               config_.ppo_mini_batch_size);
  const double lr = trained_.begin_update();
  // Per-micro-batch metrics, summed on the device: pg_loss, pg_clipfrac, ppo_kl, clipfrac_lower,
  // kl_loss, entropy.
  enum Metric : size_t { kPgLoss, kClipfrac, kPpoKl, kLower, kKlLoss, kEntropy, kMetrics };
  detail::DeviceSums device_sums(kMetrics);
  int64_t micro_count = 0;
  const int64_t response_length = batch.tensor("responses").size(1);
  for (int64_t epoch = 0; epoch < config_.ppo_epochs; ++epoch) {
    for (const data::Batch& mini : batch.split(config_.ppo_mini_batch_size)) {
      // Global numbers of this mini-batch, so each micro-batch's loss is its exact share.
      const at::Tensor mask = mini.tensor("response_mask");
      algo::AggLossOptions agg = config_.policy.agg;
      agg.batch_num_tokens = mask.sum().item<double>();
      agg.global_batch_size = mask.sum(1).gt(0).sum().item<double>();
      const data::Batch local = trained_.data_parallel().local_rows(mini);
      const auto micros = micro_batches(local, config_.use_dynamic_bsz, config_.ppo_micro_batch_size,
                                        config_.ppo_max_token_len, trained_.data_parallel());
      trained_.zero_grad();
      for (const data::Batch& micro : micros) {
        const bool need_entropy = config_.entropy_coeff != 0.0;
        ResponseLogProbs out = response_log_probs(
            trained_.compute(), micro.tensor("input_ids"), micro.tensor("attention_mask"), micro.tensor("position_ids"),
            response_length, config_.temperature, need_entropy, config_.log_prob_chunk_rows, config_.remove_padding,
            config_.kernels, config_.logits_in_backward, config_.rotate_qkv);
        const at::Tensor m = micro.tensor("response_mask");
        algo::PolicyLossConfig policy = config_.policy;
        policy.agg = agg;
        algo::PolicyLossOutput pg = algo::compute_policy_loss(config_.loss_mode, micro.tensor("old_log_probs"),
                                                              out.log_probs, micro.tensor("advantages"), m, policy);
        at::Tensor loss = pg.loss;
        if (need_entropy) {
          at::Tensor entropy = algo::agg_loss(out.entropy, m, policy.loss_agg_mode, agg);
          loss = loss.sub(entropy.mul(config_.entropy_coeff));
          device_sums.add(kEntropy, entropy);
        }
        if (config_.use_kl_loss) {
          at::Tensor kld = algo::kl_penalty(out.log_probs, micro.tensor("ref_log_prob"), config_.kl_loss_type);
          at::Tensor kl_loss = algo::agg_loss(kld, m, policy.loss_agg_mode, agg);
          loss = loss.add(kl_loss.mul(config_.kl_loss_coef));
          device_sums.add(kKlLoss, kl_loss);
        }
        trained_.backward(loss);
        device_sums.add(kPgLoss, pg.loss);
        device_sums.add(kClipfrac, pg.clipfrac);
        device_sums.add(kPpoKl, pg.ppo_kl);
        device_sums.add(kLower, pg.clipfrac_lower);
        ++micro_count;
      }
      trained_.step();
    }
  }
  // With data parallelism: means over every rank's micro-batches (the same on every rank).
  const std::vector<double> mean = detail::micro_batch_means(device_sums, micro_count, trained_.data_parallel());
  nlohmann::json metrics = {{"actor/pg_loss", mean[kPgLoss]},
                            {"actor/pg_clipfrac", mean[kClipfrac]},
                            {"actor/ppo_kl", mean[kPpoKl]},
                            {"actor/pg_clipfrac_lower", mean[kLower]},
                            {"actor/grad_norm", trained_.mean_grad_norm()},
                            {"actor/lr", lr},
                            {"actor/skipped_steps", trained_.skipped_steps()},
                            {"perf/actor_optimizer_s", trained_.step_seconds()}};
  if (config_.entropy_coeff != 0.0) metrics["actor/entropy"] = mean[kEntropy];
  if (config_.use_kl_loss) {
    metrics["actor/kl_loss"] = mean[kKlLoss];
    metrics["actor/kl_coef"] = config_.kl_loss_coef;
  }
  return metrics;
}

}  // namespace verlpp::train
