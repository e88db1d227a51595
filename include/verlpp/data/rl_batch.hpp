// The RL layout of a Batch, as verl's rollout and trainer exchange it: the tensor names
// (fields::), left-padded prompts, prompts plus sampled responses, and outcome scores placed on
// each response's last token. The controller's RL loop builds its batches with these, and a
// program that drives the engine and the actor itself uses the same ones
// (rollout::to_training_batch builds the whole batch from engine outputs).
#pragma once

#include <verlpp/core/token_id.hpp>
#include <verlpp/data/batch.hpp>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace verlpp::data {

// Tensor and column names of an RL batch. B rows (one per sample), P prompt and R response
// columns. Actor::update_policy reads kInputIds, kAttentionMask, kPositionIds, kResponses,
// kResponseMask, kOldLogProbs, kAdvantages (and kRefLogProb with use_kl_loss).
namespace fields {
constexpr const char* kInputIds = "input_ids";                     // [B, P + R] int64: prompt | response
constexpr const char* kAttentionMask = "attention_mask";           // [B, P + R] int64: 1 = token, 0 = padding
constexpr const char* kPositionIds = "position_ids";               // [B, P + R] int64
constexpr const char* kPrompts = "prompts";                        // [B, P] int64, left-padded
constexpr const char* kResponses = "responses";                    // [B, R] int64, right-padded
constexpr const char* kResponseMask = "response_mask";             // [B, R] float: 1 = generated token
constexpr const char* kRolloutLogProbs = "rollout_log_probs";      // [B, R] float: the engine's log-probs
constexpr const char* kOldLogProbs = "old_log_probs";              // [B, R] float: the actor's, before the update
constexpr const char* kRefLogProb = "ref_log_prob";                // [B, R] float: the reference model's
constexpr const char* kTokenLevelScores = "token_level_scores";    // [B, R] float: outcome_token_scores
constexpr const char* kRmScores = "rm_scores";                     // [B, R] float: a reward model's, at the last token
constexpr const char* kTokenLevelRewards = "token_level_rewards";  // [B, R] float: scores - KL penalty
constexpr const char* kValues = "values";                          // [B, R] float: the critic's
constexpr const char* kAdvantages = "advantages";                  // [B, R] float
constexpr const char* kReturns = "returns";                        // [B, R] float
constexpr const char* kUid = "uid";  // column: the prompt's id; rows with one uid form a GRPO group
}  // namespace fields

// Prompt tensors input_ids / attention_mask / position_ids [B, P] int64 (P = the longest
// prompt), left-padded with `pad_token_id` as verl pads prompts; positions count from 0 at each
// prompt's first token. Error for no prompts or an empty one (naming its row).
Batch collate_prompt_ids(const std::vector<TokenIds>& prompts, TokenId pad_token_id);

// `prompts` (a collate_prompt_ids batch, one row per response; other tensors and columns kept)
// with the responses appended: responses [B, R] right-padded with pad_token_id, response_mask
// [B, R] float, prompts = the prompt ids, and input_ids / attention_mask / position_ids replaced
// by [prompt | response] (positions continue after the prompt's last). Error naming the row
// when a response is longer than `response_length` (R).
Batch append_responses(const Batch& prompts, const std::vector<TokenIds>& responses, int64_t response_length,
                       TokenId pad_token_id);

// append_responses plus rollout_log_probs [B, R] float: log_probs[i] (one per token of
// responses[i], the engine's GenerateOutput::logprobs), 0 past each response's end.
Batch append_samples(const Batch& prompts, const std::vector<TokenIds>& responses,
                     const std::vector<std::vector<float>>& log_probs, int64_t response_length, TokenId pad_token_id);

// append_samples for multi-turn trajectories (verl's agent loop output): response_mask from
// `masks` (one 0/1 value per token of responses[i]: 1 the model's, 0 a tool's or a template's),
// attention_mask 1 over every response token, rollout_log_probs from `log_probs`, and
// position_ids = clamp(cumsum(attention_mask) - 1, 0) over the whole row, as verl's agent loop
// computes them. Errors name the row whose mask does not fit its response or holds another value.
Batch append_trajectories(const Batch& prompts, const std::vector<TokenIds>& responses,
                          const std::vector<std::vector<float>>& masks,
                          const std::vector<std::vector<float>>& log_probs, int64_t response_length,
                          TokenId pad_token_id);

// The response part of attention_mask [B, R] as float (1 at every response token, the tools'
// included; equal to response_mask for single-turn samples), on the batch's device.
at::Tensor response_attention(const Batch& batch);
// Each row's number of response tokens (response_attention's row sums), [B] int64 on the CPU.
at::Tensor response_lengths(const Batch& batch);

// Outcome rewards as verl places them: [B, R] float with scores[i] on row i's last response
// token (the last 1 of `valid` [B, R]: response_attention, or response_mask for single-turn
// samples) and 0 elsewhere; a row with an empty response gets none. On valid's device. Error
// unless scores has B values.
at::Tensor outcome_token_scores(const at::Tensor& valid, const std::vector<double>& scores);

}  // namespace verlpp::data
