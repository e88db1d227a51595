// Preference pairs for reward-model training (`verlpp train-rm`): JSONL or parquet rows with a
// prompt (chat messages or a string) and two responses, the chosen (preferred) and the
// rejected. Each side is the conversation with the response as the assistant's turn, rendered by
// the chat template without a generation prompt — the text a PPO run's reward model scores when it
// re-encodes a response (reward_model.model.input_tokenizer) — and tokenized once at load.
#pragma once

#include <verlpp/core/token_id.hpp>
#include <verlpp/data/batch.hpp>
#include <verlpp/model/chat_template.hpp>
#include <verlpp/model/tokenizer.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace verlpp::controller {

// One pair.
struct PreferencePair {
  std::string origin;  // "file:line" (or "file, row N" for parquet), for messages
  std::vector<model::ChatMessage> prompt;
  std::string chosen, rejected;       // the responses' texts
  TokenIds chosen_ids, rejected_ids;  // each side rendered and tokenized, cut to max_length
};

// rm_train.{prompt_key, chosen_key, rejected_key, max_length, truncation}.
struct PreferenceDataOptions {
  std::string prompt_key = "prompt";
  std::string chosen_key = "chosen";
  std::string rejected_key = "rejected";
  int64_t max_length = 512;          // tokens per side
  std::string truncation = "error";  // error | left | right: a longer side is an Error or cut
};

class PreferenceDataset {
 public:
  // Reads every file in order. A row without the keys, with a non-string response, or (with
  // truncation "error") a side longer than max_length is an Error naming file and line and the key.
  static PreferenceDataset load(const std::vector<std::string>& files, const model::Tokenizer& tokenizer,
                                const model::ChatTemplate& chat_template, const PreferenceDataOptions& options);

  size_t size() const { return pairs_.size(); }
  const PreferencePair& operator[](size_t i) const { return pairs_.at(i); }
  // Sides cut to max_length (truncation left or right).
  size_t truncated() const { return truncated_; }

 private:
  std::vector<PreferencePair> pairs_;
  size_t truncated_ = 0;
};

// The text of one side: `prompt` plus `response` as the assistant's turn, without a generation
// prompt.
std::string render_preference_side(const model::ChatTemplate& chat_template,
                                   const std::vector<model::ChatMessage>& prompt, const std::string& response);

// The pairs `indices` as a train::RewardModelTrainer batch (pair_fields): both sides right-padded
// with `pad_token_id` to the batch's longest side, positions counting from 0.
data::Batch collate_preference_pairs(const PreferenceDataset& dataset, const std::vector<size_t>& indices,
                                     TokenId pad_token_id);

}  // namespace verlpp::controller
