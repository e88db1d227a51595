// From the engine's outputs to the trainer's batch: the glue between RolloutEngine::generate and
// train::Actor (compute_log_prob, then update_policy), in the RL layout of data/rl_batch.hpp.
#pragma once

#include <verlpp/core/token_id.hpp>
#include <verlpp/data/batch.hpp>
#include <verlpp/rollout/engine.hpp>

#include <cstdint>
#include <vector>

namespace verlpp::rollout {

// One row per output, in the outputs' (request, sample) order: the request's prompt
// left-padded, its response right-padded to `response_length` (input_ids, attention_mask,
// position_ids, prompts, responses, response_mask, rollout_log_probs; data::fields names them)
// and the column uid = the request's index, so a request's samples form one GRPO group. Error
// naming the request when an output carries an error or a response is longer than
// response_length, or when an output's request_index is not one of `requests`.
data::Batch to_training_batch(const std::vector<GenerateRequest>& requests, const std::vector<GenerateOutput>& outputs,
                              int64_t response_length, TokenId pad_token_id);

}  // namespace verlpp::rollout
