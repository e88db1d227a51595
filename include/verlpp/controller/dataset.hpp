// Prompt datasets in verl's schema (JSONL rows with data_source, prompt as chat messages,
// reward_model.ground_truth, extra_info), rendered with a chat template and tokenized once at
// load; a seeded, resumable data loader; and collation into a left-padded prompt Batch.
#pragma once

#include <verlpp/agent/agent_loop_config.hpp>
#include <verlpp/agent/tool_agent_loop.hpp>
#include <verlpp/controller/batch.hpp>
#include <verlpp/core/token_id.hpp>
#include <verlpp/data/rl_batch.hpp>
#include <verlpp/model/chat_template.hpp>
#include <verlpp/model/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace verlpp::controller {

// One prompt row.
struct PromptRecord {
  std::string origin;                        // "file:line", for messages
  std::string data_source;                   // selects the reward function
  std::vector<model::ChatMessage> prompt;    // the conversation so far
  nlohmann::json ground_truth;               // reward_model.ground_truth (null when absent)
  nlohmann::json extra_info;                 // extra_info (null when absent)
  TokenIds prompt_ids;                       // chat template + tokenizer, truncated if configured
  std::optional<std::string> response_text;  // SFT target text (options.response_key), if read
  TokenIds response_ids;                     // response_text tokenized + suffix ids; else empty
  // An SFT conversation row (options.messages_key): its messages, and which response ids are
  // trained on (1: an assistant turn's tokens through its end-of-turn id; 0: the tool and user
  // turns and the role headers). Empty: every response id is trained on.
  nlohmann::ordered_json conversation;
  std::vector<uint8_t> response_loss_mask;
  std::string agent_name;  // the row's agent_name, else options.default_agent_name
  std::string agent_loop;  // the built-in loop it names (agent::kSingleTurnAgent, kToolAgent)
  nlohmann::json tools_kwargs = nlohmann::json::object();  // extra_info.tools_kwargs ({} when absent)
  nlohmann::json interaction_kwargs;                       // extra_info.interaction_kwargs (null when absent)
};

// A row's prompt as chat messages: a string is one user turn; otherwise a non-empty list of
// {"role", "content"} strings. Error naming `where` and `key` for anything else.
std::vector<model::ChatMessage> parse_prompt_messages(const nlohmann::json& value, const std::string& where,
                                                      const std::string& key);

// verl's data.* settings that shape loading.
struct DatasetOptions {
  std::string prompt_key = "prompt";          // data.prompt_key
  std::string reward_fn_key = "data_source";  // data.reward_fn_key
  int64_t max_prompt_length = 512;            // data.max_prompt_length (tokens)
  bool filter_overlong_prompts = false;       // data.filter_overlong_prompts: drop longer rows
  std::string truncation = "error";           // data.truncation: error | left | right | middle
  model::ChatOptions chat;                    // add_generation_prompt etc.
  std::string response_key;                   // SFT rows: the key of the target text ("" = not read)
  TokenIds response_suffix_ids;               // appended to each SFT target (the end-of-turn/EOS id)
  // SFT rows: the key of a whole conversation ("" = not read). A row holding it (and not
  // response_key) trains on its assistant turns: the messages before the first assistant one
  // are the prompt, the rest the response, each turn rendered by the chat template (with an
  // assistant message's tool_calls) and masked by role.
  std::string messages_key;
  // The agent loop of rows without an agent_name column (rollout.agent.default_agent_loop), and
  // the names known (null: every row is single_turn_agent, an agent_name column is ignored).
  std::string default_agent_name = agent::kSingleTurnAgent;
  const agent::AgentLoopNames* agent_loops = nullptr;
  // The tools' schemas a tool_agent row's prompt is rendered with (as verl's ToolAgentLoop does);
  // a tool_agent row with none is an Error naming it.
  std::vector<nlohmann::ordered_json> tool_schemas;
  // The interactions (interaction_config_path) a tool_agent row's extra_info.interaction_kwargs
  // must name when there are any (not checked for SFT rows, which run no loop).
  const agent::InteractionSet* interactions = nullptr;
};

class PromptDataset {
 public:
  // Reads every JSONL file in order. A malformed row is an Error naming file and line; an
  // overlong prompt is dropped, truncated, or an Error, as options.truncation/filter say.
  static PromptDataset load(const std::vector<std::string>& files, const model::Tokenizer& tokenizer,
                            const model::ChatTemplate& chat_template, const DatasetOptions& options);
  // Builds a dataset from records already in memory (prompt_ids are computed here).
  static PromptDataset from_records(std::vector<PromptRecord> records, const model::Tokenizer& tokenizer,
                                    const model::ChatTemplate& chat_template, const DatasetOptions& options);

  size_t size() const { return records_.size(); }
  const PromptRecord& operator[](size_t i) const { return records_.at(i); }
  // Rows dropped by filter_overlong_prompts.
  size_t filtered() const { return filtered_; }
  // The distinct data sources, sorted (for the reward check at start-up).
  std::vector<std::string> data_sources() const;

 private:
  std::vector<PromptRecord> records_;
  size_t filtered_ = 0;
};

// Batches of dataset indices, epoch after epoch: a fresh permutation per epoch (seeded by
// seed and epoch, so a resumed run draws the same order), drop_last as verl's RL loader.
class DataLoader {
 public:
  DataLoader(size_t dataset_size, int64_t batch_size, bool shuffle, uint64_t seed, bool drop_last = true);
  // The next batch's indices (rolls into the next epoch when this one is exhausted).
  std::vector<size_t> next();
  int64_t batches_per_epoch() const;
  int64_t epoch() const { return epoch_; }
  int64_t batch_in_epoch() const { return position_; }
  // Position for a checkpoint, and restoring it (Error if it does not fit this loader).
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);

 private:
  std::vector<size_t> order_for(int64_t epoch) const;
  size_t size_;
  int64_t batch_size_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
  int64_t epoch_ = 0, position_ = 0;
  std::vector<size_t> order_;
};

// A prompt Batch for `indices`: tensors input_ids / attention_mask / position_ids
// [B, max_len] int64, left-padded with `pad_token_id` (as verl pads prompts); columns
// data_source, ground_truth, extra_info, index (dataset row), uid (one id per row), agent_name,
// agent_loop (the built-in loop it names) and tools_kwargs.
Batch collate_prompts(const PromptDataset& dataset, const std::vector<size_t>& indices, int64_t pad_token_id,
                      const std::string& uid_prefix = "");

// The RL layout of prompts plus responses (data/rl_batch.hpp), under its earlier name here.
using data::append_responses;

// An SFT batch for `indices` of a dataset loaded with a response_key: append_responses of the
// prompts and each record's response_ids, R = the longest response (or `response_length` if > 0,
// truncating longer targets on the right).
Batch collate_sft(const PromptDataset& dataset, const std::vector<size_t>& indices, int64_t pad_token_id,
                  int64_t response_length = 0);

}  // namespace verlpp::controller
