// The model-based reward (reward_model.enable), as verl's RewardModelWorker computes it: the
// reward model scores each prompt + response at its last valid token, either on the policy's
// tokens as they are or, with reward_model.model.input_tokenizer set (verl's default), on the
// conversation decoded with the policy's tokenizer and re-encoded with the reward model's own
// tokenizer and chat template (verl's _switch_chat_template); the score sits at the response's
// last valid token (verl's _expand_to_token_level).
#include "rl_state.hpp"

#include <verlpp/config/keys.hpp>
#include <verlpp/reward/reward_model_input.hpp>
#include <verlpp/model/checkpoint.hpp>
#include <verlpp/train/reward_model.hpp>

namespace verlpp::controller {
namespace {

// The re-encoded input (reward_model_input.hpp); a row's prompt is its training-set row's.
Batch reencoded_batch(const RlTrainer::State& s, const Batch& batch) {
  const config::RewardModelSettings& r = s.settings.reward_model;
  std::vector<std::vector<model::ChatMessage>> prompts;
  for (const auto& index : batch.column("index")) prompts.push_back((*s.train_set)[index.get<size_t>()].prompt);
  reward::RewardModelText rm;
  rm.tokenizer = &*s.rm_tokenizer;
  rm.chat = &*s.rm_chat;
  rm.pad_token_id = s.rm_pad_id;
  rm.vocab_size = s.reward_model->config().vocab_size;
  rm.where = fmt::format("reward model (reward_model.model.path {})", r.path);
  const std::string eos = s.eos_ids.empty() ? std::string() : s.tokenizer->decode({s.eos_ids.front()});
  return reward::reencode_for_reward_model(batch, prompts, *s.tokenizer, eos, rm,
                                           r.max_length.value_or(batch.tensor(data::fields::kAttentionMask).size(1)));
}

// The policy's own tokens (reward_model.model.input_tokenizer = null).
Batch policy_token_batch(const RlTrainer::State& s, const Batch& batch) {
  const at::Tensor& ids = batch.tensor(data::fields::kInputIds);
  const int64_t largest = ids.max().item<int64_t>(), vocab = s.reward_model->config().vocab_size;
  if (largest >= vocab)
    throw Error(
        fmt::format("reward model (reward_model.model.path {})", s.settings.reward_model.path),
        fmt::format("the policy's token id {} is outside the reward model's vocabulary of {}:"
                    " with reward_model.model.input_tokenizer=null both must share one tokenizer (set it to re-encode "
                    "the text with the reward model's tokenizer)",
                    largest, vocab));
  Batch out;
  for (const char* name : {data::fields::kInputIds, data::fields::kAttentionMask, data::fields::kPositionIds})
    out.set(name, batch.tensor(name));
  return out;
}

}  // namespace

void build_reward_model(RlTrainer::State& s) {
  const config::RewardModelSettings& r = s.settings.reward_model;
  const std::string where = fmt::format("reward_model.model.path ({})", r.path);
  const model::ModelConfig mc = model::load_model_config(r.path);
  train::check_reward_model_config(mc, where);
  // verl's reward-model worker runs in bf16; the CPU keeps fp32. Only the ranks of its pool hold it.
  if (s.runs(config::RlRole::kRewardModel)) {
    s.reward_model = std::make_unique<model::DecoderLM>(
        model::load_pretrained(r.path, model_options(s, s.device.is_cpu() ? at::kFloat : at::kBFloat16)));
    s.reward_model->set_requires_grad(false);
  }
  if (r.input_tokenizer && s.runs(config::RlRole::kRewardModel)) {
    s.rm_tokenizer = model::Tokenizer::from_file(r.path);
    s.rm_chat = model::ChatTemplate::from_config_file(r.path);
    s.rm_pad_id = mc.pad_token_id.value_or(mc.eos_token_ids.empty() ? 0 : mc.eos_token_ids.front());
  } else if (s.tokenizer->vocab_size() > mc.vocab_size) {
    throw Error(where, fmt::format("the policy's tokenizer has {} ids but the reward model's vocabulary only {}:"
                                   " with reward_model.model.input_tokenizer=null it reads the policy's tokens as they "
                                   "are; set input_tokenizer to re-encode the text with the reward model's tokenizer",
                                   s.tokenizer->vocab_size(), mc.vocab_size));
  }
  s.message(fmt::format("reward model {} ({}, {:.2f}M parameters): {}", r.path, mc.architecture,
                        double(model::parameter_count(mc)) / 1e6,
                        r.input_tokenizer ? "responses re-encoded with its tokenizer and chat template"
                                          : "scores the policy's tokens as they are"));
}

void compute_rm_scores(RlTrainer::State& s, Batch& batch) {
  const config::RewardModelSettings& r = s.settings.reward_model;
  train::RewardModelOptions options;
  options.micro_batch_size = r.micro_batch_size_per_gpu;
  options.use_dynamic_bsz = r.use_dynamic_bsz;
  options.max_token_len = r.forward_max_token_len_per_gpu;
  // Only the reward model's ranks build its input (the others receive the scores).
  Batch input;
  if (s.runs(config::RlRole::kRewardModel))
    input = s.rm_tokenizer ? reencoded_batch(s, batch) : policy_token_batch(s, batch);
  const at::Tensor scores = dispatch_rows(s, config::RlRole::kRewardModel, input, [&](const Batch& rows) {
    return train::reward_model_scores(*s.reward_model, rows, options);
  });
  batch.set(data::fields::kRmScores, train::token_level_rm_scores(batch.tensor(data::fields::kAttentionMask),
                                                                  batch.tensor(data::fields::kPositionIds), scores,
                                                                  batch.tensor(data::fields::kResponses).size(1)));
}

}  // namespace verlpp::controller
