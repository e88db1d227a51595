// Reward models: a decoder with a one-label score head (HF ...ForSequenceClassification or
// ...ForTokenClassification) whose output at a sequence's last valid token is its reward, read
// where verl's reward-model worker reads it, and placed in the token-level reward where verl
// places it. RewardModelTrainer (reward_model_trainer.hpp) fits such a head on preference pairs.
#pragma once

#include <verlpp/data/batch.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/model/model_config.hpp>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace verlpp::train {

// An Error (naming `where`, the architecture and the value) unless `config` has a score head
// with exactly one label: a ...ForCausalLM folder has none, num_labels 2+ is a classifier.
void check_reward_model_config(const model::ModelConfig& config, const std::string& where);

// A causal LM's config turned into a fresh ...ForSequenceClassification one (num_labels 1, the
// score without bias), the starting point of a reward model trained from a policy checkpoint;
// a config that already has a score head is returned as it is.
model::ModelConfig sequence_classification_config(model::ModelConfig config);

// Each row's last valid token, verl's argmax(position_ids * attention_mask) over the sequence:
// [B] int64. A row whose mask is all zero gives 0.
at::Tensor last_valid_token(const at::Tensor& attention_mask /*[B, T]*/, const at::Tensor& position_ids /*[B, T]*/);

// How the reward model's forwards are batched (verl's reward_model.micro_batch_size_per_gpu,
// use_dynamic_bsz and forward_max_token_len_per_gpu).
struct RewardModelOptions {
  int64_t micro_batch_size = 1;   // rows per forward (without use_dynamic_bsz)
  bool use_dynamic_bsz = false;   // group rows by token count instead
  int64_t max_token_len = 32768;  // tokens per forward with use_dynamic_bsz
};

// The score of every row of `batch` (input_ids, attention_mask, position_ids: any padding) at
// its last valid token, [B] fp32, without a graph; the rows keep their order whatever the
// micro-batching.
at::Tensor reward_model_scores(const model::DecoderLM& reward_model, const data::Batch& batch,
                               const RewardModelOptions& options = {});

// The scores as token-level rewards, verl's _expand_to_token_level: zeros [B, T] with each row's
// score at its last valid token of the whole sequence, then the last `response_length` columns
// ([B, R] fp32). A row with no valid response token thus gets no reward.
at::Tensor token_level_rm_scores(const at::Tensor& attention_mask /*[B, T]*/, const at::Tensor& position_ids,
                                 const at::Tensor& scores /*[B]*/, int64_t response_length);

}  // namespace verlpp::train
