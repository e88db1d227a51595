// Reward-model scores at the last valid token and their token-level placement (see
// reward_model.hpp).
#include <ATen/core/grad_mode.h>
#include <verlpp/train/reward_model.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/train/partition.hpp>

#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <vector>

namespace verlpp::train {

void check_reward_model_config(const model::ModelConfig& config, const std::string& where) {
  if (config.head == model::ModelHead::kCausalLM)
    throw Error(where, fmt::format("'{}' is a causal LM without a classification head; a reward model is a "
                                   "...ForSequenceClassification or ...ForTokenClassification checkpoint "
                                   "(`verlpp train-rm` trains one from a causal LM)",
                                   config.architecture));
  if (config.num_labels != 1)
    throw Error(where, fmt::format("'{}' has num_labels = {}; a reward model has one label (a scalar score)",
                                   config.architecture, config.num_labels));
}

model::ModelConfig sequence_classification_config(model::ModelConfig config) {
  if (config.head != model::ModelHead::kCausalLM) return config;
  config.head = model::ModelHead::kSequenceClassification;
  config.num_labels = 1;
  config.score_bias = false;
  const std::string causal = "ForCausalLM";
  const auto at = config.architecture.find(causal);
  if (at != std::string::npos) config.architecture.replace(at, causal.size(), "ForSequenceClassification");
  config.raw["num_labels"] = 1;
  config.raw.erase("id2label");
  config.raw.erase("label2id");
  // Transformers' sequence classification finds the last token by pad_token_id; without one it
  // refuses batches of more than one row.
  if (!config.pad_token_id && !config.eos_token_ids.empty()) config.pad_token_id = config.eos_token_ids.front();
  if (config.pad_token_id) config.raw["pad_token_id"] = *config.pad_token_id;
  return config;
}

at::Tensor last_valid_token(const at::Tensor& attention_mask, const at::Tensor& position_ids) {
  VERLPP_CHECK(attention_mask.dim() == 2 && position_ids.sizes() == attention_mask.sizes(),
               "attention_mask and position_ids must both be [B, T] (dims {} and {})", attention_mask.dim(),
               position_ids.dim());
  return position_ids.to(at::kLong).mul(attention_mask.to(at::kLong)).argmax(1);
}

at::Tensor reward_model_scores(const model::DecoderLM& reward_model, const data::Batch& batch,
                               const RewardModelOptions& options) {
  check_reward_model_config(reward_model.config(), "reward model");
  at::NoGradGuard no_grad;
  const at::Tensor& ids = batch.tensor("input_ids");
  const at::Tensor& mask = batch.tensor("attention_mask");
  const at::Tensor& positions = batch.tensor("position_ids");
  const int64_t rows = batch.size();
  // Row groups, each one forward: fixed-size runs, or by token count (dynamic batch size).
  std::vector<std::vector<int64_t>> groups;
  if (options.use_dynamic_bsz) {
    const at::Tensor lens = mask.sum(1).to(at::kLong).cpu().contiguous();
    groups = dynamic_micro_batches(std::vector<int64_t>(lens.data_ptr<int64_t>(), lens.data_ptr<int64_t>() + rows),
                                   options.max_token_len);
  } else {
    VERLPP_CHECK(options.micro_batch_size >= 1, "reward model micro_batch_size {} must be >= 1",
                 options.micro_batch_size);
    for (int64_t start = 0; start < rows; start += options.micro_batch_size) {
      groups.emplace_back();
      for (int64_t r = start; r < std::min(rows, start + options.micro_batch_size); ++r) groups.back().push_back(r);
    }
  }
  at::Tensor out = at::empty({rows}, ids.options().dtype(at::kFloat));
  for (const std::vector<int64_t>& group : groups) {
    const at::Tensor index = at::tensor(group, ids.options().dtype(at::kLong));
    const at::Tensor m = mask.index_select(0, index), p = positions.index_select(0, index);
    const at::Tensor hidden = reward_model.forward_padded(ids.index_select(0, index), m, p);  // [b, T, C]
    const at::Tensor last = last_valid_token(m, p);
    const at::Tensor at_last = hidden.index({at::arange(int64_t(group.size()), last.options()), last});  // [b, C]
    out.index_copy_(0, index, reward_model.scores(at_last).select(-1, 0).to(at::kFloat));
  }
  return out;
}

at::Tensor token_level_rm_scores(const at::Tensor& attention_mask, const at::Tensor& position_ids,
                                 const at::Tensor& scores, int64_t response_length) {
  const int64_t rows = attention_mask.size(0), t = attention_mask.size(1);
  VERLPP_CHECK(scores.dim() == 1 && scores.numel() == rows, "scores ({} values) must be [B] with B = {}",
               scores.numel(), rows);
  VERLPP_CHECK(response_length >= 1 && response_length <= t, "response length {} must be in [1, {}]", response_length,
               t);
  at::Tensor full = at::zeros({rows, t}, scores.options().dtype(at::kFloat));
  const at::Tensor last = last_valid_token(attention_mask, position_ids).to(full.device());
  full.index_put_({at::arange(rows, last.options()), last}, scores.to(full.device(), at::kFloat));
  return full.narrow(1, t - response_length, response_length).contiguous();
}

}  // namespace verlpp::train
