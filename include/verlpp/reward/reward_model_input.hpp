// A reward model's input for a batch of responses when its tokenizer or chat template differs from
// the policy's (reward_model.model.input_tokenizer set; verl's _switch_chat_template): each
// response is decoded with the policy's tokenizer (special tokens kept, the EOS text removed),
// appended to its prompt's messages as the assistant's turn, rendered by the reward model's
// template without a generation prompt, encoded with the reward model's tokenizer, cut from the
// right to max_length and right-padded.
#pragma once

#include <verlpp/core/token_id.hpp>
#include <verlpp/data/batch.hpp>
#include <verlpp/model/chat_template.hpp>
#include <verlpp/model/tokenizer.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace verlpp::reward {

// The reward model's side of the re-encoding.
struct RewardModelText {
  const model::Tokenizer* tokenizer = nullptr;  // the reward model's (not owned)
  const model::ChatTemplate* chat = nullptr;    // the reward model's
  TokenId pad_token_id = 0;                     // its padding id
  int64_t vocab_size = 0;                       // its embedding rows (ids must be below)
  std::string where = "reward model";           // names it in errors
};

// input_ids, attention_mask, position_ids [B, T'] for the reward model (T' the longest row, at most
// `max_length`) from `batch`'s responses and response_mask, with row i's prompt `prompts[i]`.
// `eos_text` is removed from each decoded response ("" removes nothing). Error naming the row
// when the reward model's tokenizer cannot encode a text (its tokens do not decode back to it:
// characters outside its vocabulary) or gives an id outside its vocabulary.
data::Batch reencode_for_reward_model(const data::Batch& batch,
                                      const std::vector<std::vector<model::ChatMessage>>& prompts,
                                      const model::Tokenizer& policy_tokenizer, const std::string& eos_text,
                                      const RewardModelText& rm, int64_t max_length);

}  // namespace verlpp::reward
