// PromptDataset, DataLoader and prompt collation (see dataset.hpp).
#include <verlpp/config/keys.hpp>
#include <verlpp/controller/dataset.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/log.hpp>
#include <verlpp/data/records.hpp>

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/ones.h>

#include <algorithm>
#include <random>
#include <set>

namespace verlpp::controller {
namespace {

using json = nlohmann::json;

}  // namespace

std::vector<model::ChatMessage> parse_prompt_messages(const json& value, const std::string& where,
                                                      const std::string& key) {
  std::vector<model::ChatMessage> messages;
  if (value.is_string()) {  // plain text: one user turn
    messages.push_back({"user", value.get<std::string>()});
    return messages;
  }
  if (!value.is_array() || value.empty())
    throw Error(where,
                fmt::format("'{}' must be a non-empty list of chat messages or a string, got {}", key, value.dump()));
  for (size_t i = 0; i < value.size(); ++i) {
    const json& m = value[i];
    if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string() ||
        !m["content"].is_string())
      throw Error(where,
                  fmt::format("'{}[{}]' must be {{\"role\": string, \"content\": string}}, got {}", key, i, m.dump()));
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return messages;
}

namespace {

// An SFT conversation: a list of message objects with string roles, an assistant message after
// the first one; the messages before the first assistant one become the prompt.
void parse_conversation(const json& value, const std::string& where, const std::string& key, PromptRecord& r) {
  if (!value.is_array() || value.empty())
    throw Error(
        where, fmt::format("'{}' must be a non-empty list of chat messages, got {}", key, value.dump().substr(0, 200)));
  r.conversation = nlohmann::ordered_json::parse(value.dump());
  size_t first_assistant = value.size();
  for (size_t i = 0; i < value.size(); ++i) {
    const json& m = value[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw Error(where, fmt::format("'{}[{}]' must be a message object with a string \"role\", got {}", key, i,
                                     m.dump().substr(0, 200)));
    const bool has_text = m.contains("content") && m["content"].is_string();
    if (m["role"] == "assistant") {
      if (first_assistant == value.size()) first_assistant = i;
      continue;
    }
    if (!has_text)
      throw Error(where, fmt::format("'{}[{}]' ({}) needs a string \"content\"", key, i, m["role"].get<std::string>()));
    if (first_assistant == value.size())
      r.prompt.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  if (first_assistant == 0 || first_assistant == value.size())
    throw Error(where, fmt::format("'{}' needs a message before the first assistant message and an assistant message "
                                   "to train on",
                                   key));
}

PromptRecord parse_row(const json& row, const std::string& where, const DatasetOptions& o) {
  PromptRecord r;
  r.origin = where;
  // An SFT row may be a whole conversation instead of a prompt and a response.
  const bool conversation_row = !o.messages_key.empty() && !o.response_key.empty() && row.contains(o.messages_key) &&
                                !row.contains(o.response_key);
  if (conversation_row) {
    parse_conversation(row[o.messages_key], where, o.messages_key, r);
  } else {
    if (!row.contains(o.prompt_key))
      throw Error(where, fmt::format("the row has no '{}' (data.prompt_key)", o.prompt_key));
    r.prompt = parse_prompt_messages(row[o.prompt_key], where, o.prompt_key);
  }
  const bool sft_row = !o.response_key.empty();
  if (row.contains(o.reward_fn_key) && row[o.reward_fn_key].is_string())
    r.data_source = row[o.reward_fn_key].get<std::string>();
  else if (!sft_row)  // an SFT row is never scored
    throw Error(where, fmt::format("the row has no string '{}' (data.reward_fn_key)", o.reward_fn_key));
  if (row.contains("reward_model") && !row["reward_model"].is_null()) {  // a null struct in parquet
    if (!row["reward_model"].is_object()) throw Error(where, "'reward_model' must be an object");
    if (row["reward_model"].contains("ground_truth")) r.ground_truth = row["reward_model"]["ground_truth"];
  }
  if (row.contains("extra_info")) r.extra_info = row["extra_info"];
  // verl's dataset: tools_kwargs = extra_info.get("tools_kwargs", {}), per tool name.
  if (r.extra_info.is_object() && r.extra_info.contains("tools_kwargs") && !r.extra_info["tools_kwargs"].is_null()) {
    r.tools_kwargs = r.extra_info["tools_kwargs"];
    if (!r.tools_kwargs.is_object())
      throw Error(where, fmt::format("'extra_info.tools_kwargs' must be an object (tool name -> its kwargs), got {}",
                                     r.tools_kwargs.dump()));
  }
  if (r.extra_info.is_object() && r.extra_info.contains("interaction_kwargs"))
    r.interaction_kwargs = r.extra_info["interaction_kwargs"];
  r.agent_name = o.default_agent_name;
  if (row.contains("agent_name") && !row["agent_name"].is_null()) {
    if (!row["agent_name"].is_string())
      throw Error(where, fmt::format("'agent_name' must be a string, got {}", row["agent_name"].dump()));
    r.agent_name = row["agent_name"].get<std::string>();
  }
  if (conversation_row) return r;
  if (!o.response_key.empty() && (!row.contains(o.response_key) || !row[o.response_key].is_string()))
    throw Error(where, fmt::format("the row has no string '{}' (the SFT response key{})", o.response_key,
                                   o.messages_key.empty() ? "" : fmt::format(", nor a '{}' list", o.messages_key)));
  if (!o.response_key.empty()) r.response_text = row[o.response_key].get<std::string>();
  return r;
}

// The response of an SFT conversation: each message after the prompt rendered as the template
// writes it once the conversation reaches it (the prompt's options, so a tool_agent row's
// tools too), tokenized turn by turn, an assistant turn trained on through its end-of-turn id.
void conversation_response(PromptRecord& r, const model::Tokenizer& tokenizer, const model::ChatTemplate& chat,
                           const model::ChatOptions& prompt_options, const DatasetOptions& o) {
  const nlohmann::ordered_json& messages = r.conversation;
  auto render = [&](size_t count, bool generation_prompt) {
    model::ChatOptions options = prompt_options;
    options.add_generation_prompt = generation_prompt;
    nlohmann::ordered_json head = nlohmann::ordered_json::array();
    for (size_t i = 0; i < count; ++i) head.push_back(messages[i]);
    return chat.render_json(head, options);
  };
  std::string before = render(r.prompt.size(), true);
  for (size_t k = r.prompt.size(); k < messages.size(); ++k) {
    const bool assistant = messages[k]["role"] == "assistant";
    const bool next_assistant = k + 1 < messages.size() && messages[k + 1]["role"] == "assistant";
    const std::string text = render(k + 1, !assistant && next_assistant);
    if (text.compare(0, before.size(), before) != 0)
      throw Error(r.origin,
                  fmt::format("the chat template ('{}') renders the conversation before message {} differently once "
                              "message {} ({}) is added (as Qwen3's drops earlier reasoning); a conversation row needs "
                              "renderings that extend each other",
                              chat.name(), k, k, messages[k]["role"].get<std::string>()));
    const TokenIds ids = tokenizer.encode(text.substr(before.size()));
    // An assistant turn is trained on through its end-of-turn id, not the text after it.
    size_t trained = assistant ? ids.size() : 0;
    if (assistant && !o.response_suffix_ids.empty()) {
      const auto end = std::search(ids.begin(), ids.end(), o.response_suffix_ids.begin(), o.response_suffix_ids.end());
      if (end != ids.end()) trained = size_t(end - ids.begin()) + o.response_suffix_ids.size();
    }
    r.response_ids.insert(r.response_ids.end(), ids.begin(), ids.end());
    for (size_t i = 0; i < ids.size(); ++i) r.response_loss_mask.push_back(i < trained ? 1 : 0);
    before = text;
  }
}

// Renders, tokenizes and applies the length rule; false when the row must be dropped.
bool prepare(PromptRecord& r, const model::Tokenizer& tokenizer, const model::ChatTemplate& chat,
             const DatasetOptions& o) {
  if (r.agent_name.empty()) r.agent_name = o.default_agent_name;  // a record built in memory
  r.agent_loop = o.agent_loops ? o.agent_loops->loop_of(r.agent_name, r.origin + ": agent_name")
                               : std::string(agent::kSingleTurnAgent);
  const bool interacting = o.interactions != nullptr && !o.interactions->empty();
  model::ChatOptions prompt_options = o.chat;
  if (r.agent_loop == agent::kToolAgent) {
    // As verl's ToolAgentLoop: the prompt carries the tools' schemas.
    if (o.tool_schemas.empty() && !interacting)
      throw Error(r.origin, fmt::format("agent loop '{}' runs tools or an interaction, but none are configured (set "
                                        "{} or {})",
                                        r.agent_name, config::keys::kRolloutMultiTurnToolConfigPath,
                                        config::keys::kRolloutMultiTurnInteractionConfigPath));
    if (interacting && o.response_key.empty()) agent::interaction_of(*o.interactions, r.interaction_kwargs, r.origin);
    prompt_options.tools = o.tool_schemas;
  }
  r.prompt_ids = tokenizer.encode(chat.render(r.prompt, prompt_options));
  if (r.response_text) {
    r.response_ids = tokenizer.encode(*r.response_text);
    r.response_ids.insert(r.response_ids.end(), o.response_suffix_ids.begin(), o.response_suffix_ids.end());
  }
  if (!r.conversation.is_null()) conversation_response(r, tokenizer, chat, prompt_options, o);
  const size_t max_len = size_t(o.max_prompt_length);
  if (r.prompt_ids.size() <= max_len) return true;
  if (o.filter_overlong_prompts) return false;
  auto& ids = r.prompt_ids;
  if (o.truncation == "left") {
    ids.erase(ids.begin(), ids.end() - std::ptrdiff_t(max_len));
  } else if (o.truncation == "right") {
    ids.resize(max_len);
  } else if (o.truncation == "middle") {
    size_t left = max_len / 2, right = max_len - left;
    TokenIds kept(ids.begin(), ids.begin() + std::ptrdiff_t(left));
    kept.insert(kept.end(), ids.end() - std::ptrdiff_t(right), ids.end());
    ids = std::move(kept);
  } else {
    throw Error(r.origin, fmt::format("the prompt is {} tokens, longer than data.max_prompt_length = {} "
                                      "(set data.truncation to left/right/middle or data.filter_overlong_prompts=true)",
                                      ids.size(), max_len));
  }
  return true;
}

}  // namespace

PromptDataset PromptDataset::from_records(std::vector<PromptRecord> records, const model::Tokenizer& tokenizer,
                                          const model::ChatTemplate& chat_template, const DatasetOptions& options) {
  if (options.max_prompt_length < 1)
    throw Error(config::keys::kDataMaxPromptLength, fmt::format("{} must be >= 1", options.max_prompt_length));
  if (options.truncation != "error" && options.truncation != "left" && options.truncation != "right" &&
      options.truncation != "middle")
    throw Error(config::keys::kDataTruncation,
                fmt::format("'{}' is not one of error, left, right, middle", options.truncation));
  PromptDataset d;
  for (auto& r : records) {
    if (prepare(r, tokenizer, chat_template, options))
      d.records_.push_back(std::move(r));
    else
      ++d.filtered_;
  }
  return d;
}

PromptDataset PromptDataset::load(const std::vector<std::string>& files, const model::Tokenizer& tokenizer,
                                  const model::ChatTemplate& chat_template, const DatasetOptions& options) {
  if (files.empty()) throw Error("dataset", "no data files given");
  std::vector<PromptRecord> records;
  for (const auto& file : files)
    for (const data::DataRecord& record : data::read_data_records(file))
      records.push_back(parse_row(record.row, record.origin, options));
  // verl's rule rewards read reward_model.ground_truth from every row; a row without one is
  // scored against nothing, which a user wants to hear about before training on it.
  if (options.response_key.empty()) {
    size_t missing = 0;
    std::string first;
    for (const PromptRecord& r : records)
      if (r.ground_truth.is_null() && missing++ == 0) first = r.origin;
    if (missing > 0)
      log(LogLevel::warning, fmt::format("{}: {} of {} rows have no reward_model.ground_truth (the first at {}); "
                                         "rule-based rewards score them against an empty answer",
                                         files.front(), missing, records.size(), first));
  }
  PromptDataset d = from_records(std::move(records), tokenizer, chat_template, options);
  if (d.size() == 0)
    throw Error(files.front(), d.filtered_
                                   ? fmt::format("every prompt ({}) is longer than data.max_prompt_length", d.filtered_)
                                   : std::string("the dataset has no rows"));
  return d;
}

std::vector<std::string> PromptDataset::data_sources() const {
  std::set<std::string> s;
  for (const auto& r : records_) s.insert(r.data_source);
  return {s.begin(), s.end()};
}

DataLoader::DataLoader(size_t dataset_size, int64_t batch_size, bool shuffle, uint64_t seed, bool drop_last)
    : size_(dataset_size), batch_size_(batch_size), shuffle_(shuffle), drop_last_(drop_last), seed_(seed) {
  if (batch_size < 1) throw Error("DataLoader", fmt::format("batch size {} must be >= 1", batch_size));
  if (batches_per_epoch() < 1)
    throw Error("DataLoader", fmt::format("the dataset has {} rows, fewer than one batch of {} (data.train_batch_size)",
                                          dataset_size, batch_size));
  order_ = order_for(0);
}

int64_t DataLoader::batches_per_epoch() const {
  int64_t n = int64_t(size_);
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

std::vector<size_t> DataLoader::order_for(int64_t epoch) const {
  std::vector<size_t> order(size_);
  for (size_t i = 0; i < size_; ++i) order[i] = i;
  if (shuffle_) {
    // Fisher-Yates with our own draw (std::shuffle's algorithm is not specified, so its order
    // could change between standard libraries and break resumption across builds).
    std::mt19937_64 rng(seed_ * 1000003ULL + uint64_t(epoch));
    for (size_t i = size_; i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  }
  return order;
}

std::vector<size_t> DataLoader::next() {
  if (position_ >= batches_per_epoch()) {
    ++epoch_;
    position_ = 0;
    order_ = order_for(epoch_);
  }
  size_t begin = size_t(position_ * batch_size_), end = std::min(size_, begin + size_t(batch_size_));
  ++position_;
  return std::vector<size_t>(order_.begin() + std::ptrdiff_t(begin), order_.begin() + std::ptrdiff_t(end));
}

nlohmann::json DataLoader::state() const {
  return {{"epoch", epoch_},           {"batch_in_epoch", position_}, {"dataset_size", size_},
          {"batch_size", batch_size_}, {"shuffle", shuffle_},         {"seed", seed_}};
}

void DataLoader::load_state(const nlohmann::json& s) {
  if (s.value("dataset_size", size_t(0)) != size_ || s.value("batch_size", int64_t(0)) != batch_size_ ||
      s.value("shuffle", !shuffle_) != shuffle_ || s.value("seed", seed_ + 1) != seed_)
    throw Error("dataloader state",
                fmt::format("saved for {} but this loader is dataset_size={} batch_size={} shuffle={} seed={}",
                            s.dump(), size_, batch_size_, shuffle_, seed_));
  epoch_ = s.at("epoch").get<int64_t>();
  position_ = s.at("batch_in_epoch").get<int64_t>();
  order_ = order_for(epoch_);
}

Batch collate_prompts(const PromptDataset& dataset, const std::vector<size_t>& indices, int64_t pad_token_id,
                      const std::string& uid_prefix) {
  if (indices.empty()) throw Error("collate_prompts", "no rows");
  std::vector<TokenIds> prompts;
  std::vector<json> source, truth, extra, index, uid, agent_name, agent_loop, tools_kwargs, interaction_kwargs,
      raw_prompt;
  for (size_t row = 0; row < indices.size(); ++row) {
    const PromptRecord& r = dataset[indices[row]];
    prompts.push_back(r.prompt_ids);
    source.push_back(r.data_source);
    truth.push_back(r.ground_truth);
    extra.push_back(r.extra_info);
    index.push_back(indices[row]);
    uid.push_back(uid_prefix + std::to_string(indices[row]) + "#" + std::to_string(row));
    agent_name.push_back(r.agent_name);
    agent_loop.push_back(r.agent_loop);
    tools_kwargs.push_back(r.tools_kwargs);
    interaction_kwargs.push_back(r.interaction_kwargs);
    json messages = json::array();
    for (const model::ChatMessage& m : r.prompt) messages.push_back({{"role", m.role}, {"content", m.content}});
    raw_prompt.push_back(std::move(messages));
  }
  Batch out = data::collate_prompt_ids(prompts, pad_token_id);
  out.set_column("data_source", source);
  out.set_column("ground_truth", truth);
  out.set_column("extra_info", extra);
  out.set_column("index", index);
  out.set_column(data::fields::kUid, uid);
  out.set_column("agent_name", agent_name);
  out.set_column("agent_loop", agent_loop);
  out.set_column("tools_kwargs", tools_kwargs);
  out.set_column("interaction_kwargs", interaction_kwargs);
  out.set_column("raw_prompt", raw_prompt);
  return out;
}

Batch collate_sft(const PromptDataset& dataset, const std::vector<size_t>& indices, int64_t pad_token_id,
                  int64_t response_length) {
  Batch prompts = collate_prompts(dataset, indices, pad_token_id);
  std::vector<std::vector<int64_t>> responses;
  size_t longest = 1;
  for (size_t i : indices) {
    const auto& ids = dataset[i].response_ids;
    if (ids.empty())
      throw Error(dataset[i].origin, "the row has no SFT response (load the dataset with a response_key)");
    responses.emplace_back(ids.begin(), ids.end());
    longest = std::max(longest, ids.size());
  }
  const int64_t r = response_length > 0 ? response_length : int64_t(longest);
  for (auto& resp : responses)
    if (int64_t(resp.size()) > r) resp.resize(size_t(r));
  Batch batch = append_responses(prompts, responses, r, pad_token_id);
  // Conversation rows: the tool and user turns inside a response are not trained on.
  bool holes = false;
  for (size_t i : indices) holes = holes || !dataset[i].response_loss_mask.empty();
  if (!holes) return batch;
  const at::Tensor mask = batch.tensor("response_mask");
  at::Tensor trained = at::ones(mask.sizes(), at::kLong);
  auto acc = trained.accessor<int64_t, 2>();
  for (size_t row = 0; row < indices.size(); ++row) {
    const auto& loss_mask = dataset[indices[row]].response_loss_mask;
    for (size_t j = 0; j < loss_mask.size() && int64_t(j) < r; ++j) acc[int64_t(row)][int64_t(j)] = loss_mask[j];
  }
  batch.set("response_mask", mask.mul(trained.to(mask.device(), mask.scalar_type())));
  return batch;
}

}  // namespace verlpp::controller
