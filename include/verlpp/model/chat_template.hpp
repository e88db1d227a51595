// Chat templates. A tokenizer folder's own Jinja template (tokenizer_config.json's
// "chat_template", or chat_template.jinja beside it) and verl's custom_chat_template are run by
// the Jinja interpreter (jinja_template.hpp), as transformers' apply_chat_template runs them,
// so any model's format renders as the model was trained on it. Built-in C++ renderings of the
// Qwen (ChatML) and Llama 3 formats serve by name, for a folder without a template.
#pragma once

#include <verlpp/model/jinja_template.hpp>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace verlpp::model {

// One message of a conversation ("system", "user", "assistant" or "tool").
struct ChatMessage {
  std::string role;
  std::string content;
};

// A built-in prompt format.
enum class ChatFormat {
  kChatML,  // <|im_start|>role\ncontent<|im_end|>\n, with an optional default system prompt
  kQwen3,   // ChatML with Qwen3's <think> handling of assistant turns and tool-response grouping
  kLlama3,  // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>, bos first
  kLlama31  // Llama 3 plus 3.1's system preamble (knowledge cut-off and date)
};

// Options a template reads besides the messages.
struct ChatOptions {
  bool add_generation_prompt = true;  // end with the opening of an assistant turn
  bool enable_thinking = true;        // Qwen3: false adds an empty <think></think> block
  // Function schemas ({"type": "function", "function": {...}}) the model may call, written into
  // the system turn as the template's `tools` section (Qwen2.5 and Qwen3: hermes <tool_call>);
  // rendered with `tojson` in their own key order. Empty: none (the template's `if tools`).
  std::vector<nlohmann::ordered_json> tools;
  // Further template variables (verl's data.apply_chat_template_kwargs, e.g. Qwen3's
  // {"enable_thinking": false}): a Jinja template reads them by name, over the ones above; the
  // built-ins read enable_thinking.
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // A built-in by name: "chatml", "qwen2", "qwen2.5", "qwen3", "llama3", "llama3.1"
  // (qwen2/qwen2.5 are ChatML with their default system prompts). Unknown names are an Error
  // listing the known ones.
  static ChatTemplate builtin(const std::string& name);
  // The template of a tokenizer_config.json file (or a folder holding one). Empty `override_name`
  // interprets the file's "chat_template" (or, without one, a chat_template.jinja beside it);
  // otherwise that built-in is used (the file may then be absent; its bos_token is still read).
  static ChatTemplate from_config_file(const std::string& path, const std::string& override_name = "");
  // `jinja` (a template's text, e.g. verl's custom_chat_template) interpreted, with the special
  // tokens (bos_token, eos_token, pad_token, unk_token) of the tokenizer_config.json at
  // `config_path` (a file or a folder; absent: none) as variables. Error naming `origin` on a
  // syntax error.
  static ChatTemplate from_jinja(const std::string& jinja, const std::string& config_path, const std::string& origin);
  // Recognises a Jinja chat template's text as one of the built-ins; `bos_token` is used by the
  // Llama formats. Error (naming `origin`) when the template is not one of the known formats.
  static ChatTemplate recognise(const std::string& jinja, const std::string& bos_token,
                                const std::string& origin = "chat_template");

  // The prompt text for `messages` (special tokens written as text, e.g. "<|im_start|>"). Tool
  // schemas for a format whose template has no tools section are an Error naming the format.
  std::string render(const std::vector<ChatMessage>& messages, const ChatOptions& options = {}) const;
  // The prompt text for messages given as JSON objects (an interpreted template reads every
  // field, e.g. an assistant message's tool_calls; a built-in reads role and content).
  std::string render_json(const nlohmann::ordered_json& messages, const ChatOptions& options = {}) const;

  // Whether the template is interpreted Jinja (else a built-in).
  bool interpreted() const { return jinja_ != nullptr; }
  // The built-in format (meaningful when !interpreted()).
  ChatFormat format() const { return format_; }
  // Whether options.tools is rendered: an interpreted template that reads `tools`; the built-ins
  // Qwen3 and ChatML with Qwen2.5's tool turns.
  bool renders_tools() const {
    if (jinja_) return jinja_->reads("tools");
    return format_ == ChatFormat::kQwen3 || (format_ == ChatFormat::kChatML && group_tool_responses_);
  }
  // Name of the built-in in use ("qwen2.5", "llama3", ...), or where an interpreted template
  // came from.
  const std::string& name() const { return name_; }
  // ChatML: the system prompt used when the conversation has none (empty: none is added).
  const std::string& default_system_prompt() const { return default_system_; }
  // Llama: the text placed first (tokenizer_config's bos_token, "<|begin_of_text|>" by default).
  const std::string& bos_token() const { return bos_token_; }

 private:
  std::string render_builtin(const std::vector<ChatMessage>& messages, const ChatOptions& options) const;

  ChatFormat format_ = ChatFormat::kChatML;
  std::shared_ptr<const JinjaTemplate> jinja_;
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();  // Jinja variables
  std::string name_;
  std::string default_system_;
  std::string bos_token_ = "<|begin_of_text|>";
  bool group_tool_responses_ = false;      // ChatML: Qwen2.5's <tool_response> user turns
  bool system_outside_loop_ = false;       // ChatML: default system prompt even with no messages
  bool always_generation_prompt_ = false;  // Llama: a template that ends every prompt so
};

}  // namespace verlpp::model
