// Built-in chat formats and the recognition of published templates. The rendering follows the
// templates' Jinja logic for conversations of plain text messages and, for Qwen2.5 and Qwen3,
// the `tools` section of function schemas (assistant messages carrying structured tool_calls are
// not rendered: the agent loop appends the model's own tokens instead): Qwen3's
// <think> splitting of assistant turns after the last user query, tool-response grouping, and
// Jinja's `trim` (Python's str.strip) on Llama message contents.
#include "../util/input_file.hpp"
#include <verlpp/core/json_limits.hpp>
#include <verlpp/model/chat_template.hpp>

#include "jinja_internal.hpp"
#include "tokenizer_internal.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/core/python_json.hpp>
#include <verlpp/core/strings.hpp>

#include <fstream>
#include <sstream>

namespace verlpp::model {
namespace {

constexpr const char* kQwen25System = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
constexpr const char* kQwen2System = "You are a helpful assistant.";
const std::vector<std::string> kBuiltinNames = {"chatml", "qwen2", "qwen2.5", "qwen3", "llama3", "llama3.1"};

bool contains(const std::string& text, const char* needle) { return text.find(needle) != std::string::npos; }

// Python's str.strip() (what Jinja's `trim` filter does), as the interpreter does it.
std::string python_strip(const std::string& text) { return jinja::py_strip(text, nullptr, true, true); }

// str.lstrip('\n') / rstrip('\n') / strip('\n').
std::string strip_newlines(const std::string& text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  while (left && begin < end && text[begin] == '\n') ++begin;
  while (right && end > begin && text[end - 1] == '\n') --end;
  return text.substr(begin, end - begin);
}

// The literal default system prompt of a ChatML template ("<|im_start|>system\n...<|im_end|>"
// inside one Jinja string literal), unescaped; empty when there is none.
std::string literal_default_system(const std::string& jinja) {
  for (const std::string opener : {"<|im_start|>system\\n", "<|im_start|>system\n"}) {
    for (size_t at = jinja.find(opener); at != std::string::npos; at = jinja.find(opener, at + 1)) {
      size_t begin = at + opener.size(), end = jinja.find("<|im_end|>", begin);
      if (end == std::string::npos || end == begin) continue;
      std::string raw = jinja.substr(begin, end - begin);
      if (raw.find_first_of("'\"{}+") != std::string::npos) continue;  // an expression, not a literal
      std::string out;
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] == '\\' && i + 1 < raw.size()) {
          char e = raw[++i];
          out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        } else {
          out += raw[i];
        }
      }
      return out;
    }
  }
  return "";
}

// The `tools` section of the Qwen2.5 and Qwen3 templates (hermes <tool_call> format), from
// "# Tools" to the end of the system turn.
std::string hermes_tools_section(const std::vector<nlohmann::ordered_json>& tools) {
  std::string out =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const auto& tool : tools) out += "\n" + python_json_dumps(tool);
  out +=
      "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<args-json-object>}\n</tool_call><|im_end|>\n";
  return out;
}

}  // namespace

ChatTemplate ChatTemplate::builtin(const std::string& name) {
  ChatTemplate t;
  t.name_ = name;
  if (name == "chatml") {
    t.format_ = ChatFormat::kChatML;
  } else if (name == "qwen2") {
    t.format_ = ChatFormat::kChatML;
    t.default_system_ = kQwen2System;
  } else if (name == "qwen2.5") {
    t.format_ = ChatFormat::kChatML;
    t.default_system_ = kQwen25System;
    t.group_tool_responses_ = true;
    t.system_outside_loop_ = true;
  } else if (name == "qwen3") {
    t.format_ = ChatFormat::kQwen3;
  } else if (name == "llama3") {
    t.format_ = ChatFormat::kLlama3;
  } else if (name == "llama3.1") {
    t.format_ = ChatFormat::kLlama31;
  } else {
    VERLPP_FAIL_AT("chat template", "unknown built-in \"{}\" (known: {})", name, join(kBuiltinNames, ", "));
  }
  return t;
}

ChatTemplate ChatTemplate::recognise(const std::string& jinja, const std::string& bos_token,
                                     const std::string& origin) {
  ChatTemplate t;
  if (contains(jinja, "<|im_start|>") && contains(jinja, "<|im_end|>")) {
    if (contains(jinja, "reasoning_content") || contains(jinja, "</think>")) {
      t = builtin("qwen3");
    } else {
      std::string system = literal_default_system(jinja);
      t = builtin(system == kQwen25System ? "qwen2.5" : system == kQwen2System ? "qwen2" : "chatml");
      t.default_system_ = system;
      t.group_tool_responses_ = contains(jinja, "<tool_response>");
      t.system_outside_loop_ = t.name_ == "qwen2.5";
    }
  } else if (contains(jinja, "<|start_header_id|>") && contains(jinja, "<|end_header_id|>") &&
             contains(jinja, "<|eot_id|>")) {
    VERLPP_CHECK(!contains(jinja, "strftime_now"),
                 "{}: this Llama template writes today's date (strftime_now), which no built-in reproduces; "
                 "name a built-in format instead (known: {})",
                 origin, join(kBuiltinNames, ", "));
    t = builtin(contains(jinja, "Cutting Knowledge Date") ? "llama3.1" : "llama3");
    t.always_generation_prompt_ = !contains(jinja, "add_generation_prompt");
  } else {
    VERLPP_FAIL_AT(origin, "unrecognised chat template (it begins {}); name a built-in format instead (known: {})",
                   nlohmann::json(jinja.substr(0, 80)).dump(), join(kBuiltinNames, ", "));
  }
  if (!bos_token.empty()) t.bos_token_ = bos_token;
  return t;
}

namespace {

// A tokenizer_config.json (a file or the folder holding one) as JSON; null when absent.
nlohmann::json read_tokenizer_config(const std::string& path, std::string& file) {
  file = path;
  if (tok::is_directory(path)) file = tok::path_join(path, "tokenizer_config.json");
  if (!tok::path_exists(file)) return nullptr;
  const std::string text = files::read_input(file, "tokenizer config");
  check_json_depth(text, file);
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number that overflows
    VERLPP_FAIL_AT(file, "not valid JSON: {}", e.what());
  }
  VERLPP_CHECK(config.is_object(), "{}: expected a JSON object at the top level", file);
  return config;
}

// A special token's text: a string, or an AddedToken object's "content".
std::string token_text(const nlohmann::json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return "";
  const auto& b = config[key];
  if (b.is_string()) return b.get<std::string>();
  if (b.is_object() && b.contains("content") && b["content"].is_string()) return b["content"].get<std::string>();
  return "";
}

// The special tokens transformers passes to a chat template (its special_tokens_map).
nlohmann::ordered_json special_tokens(const nlohmann::json& config) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    const std::string text = token_text(config, key);
    if (!text.empty()) out[key] = text;
  }
  return out;
}

}  // namespace

ChatTemplate ChatTemplate::from_jinja(const std::string& jinja, const std::string& config_path,
                                      const std::string& origin) {
  std::string file;
  const nlohmann::json config = config_path.empty() ? nlohmann::json() : read_tokenizer_config(config_path, file);
  ChatTemplate t;
  t.jinja_ = std::make_shared<const JinjaTemplate>(JinjaTemplate::parse(jinja, origin));
  t.special_tokens_ = special_tokens(config);
  t.name_ = origin;
  const std::string bos = token_text(config, "bos_token");
  if (!bos.empty()) t.bos_token_ = bos;
  return t;
}

ChatTemplate ChatTemplate::from_config_file(const std::string& path, const std::string& override_name) {
  std::string file;
  const nlohmann::json config = read_tokenizer_config(path, file);
  VERLPP_CHECK(!config.is_null() || !override_name.empty(),
               "tokenizer config \"{}\" does not exist (name a built-in chat format to go "
               "without one)",
               file);
  if (!override_name.empty()) {
    ChatTemplate t = builtin(override_name);
    const std::string bos = token_text(config, "bos_token");
    if (!bos.empty()) t.bos_token_ = bos;
    return t;
  }
  // Newer transformers save the template as chat_template.jinja beside the config.
  const size_t slash = file.find_last_of('/');
  const std::string jinja_file =
      (slash == std::string::npos ? std::string() : file.substr(0, slash + 1)) + "chat_template.jinja";
  if (!config.contains("chat_template") && tok::path_exists(jinja_file))
    return from_jinja(files::read_input(jinja_file, "chat template"), file, jinja_file);
  VERLPP_CHECK(config.contains("chat_template"),
               "{}: field \"chat_template\" is missing and there is no "
               "chat_template.jinja beside it (name a built-in chat format instead: {})",
               file, join(kBuiltinNames, ", "));
  const auto& node = config["chat_template"];
  std::string jinja;
  if (node.is_string()) {
    jinja = node.get<std::string>();
  } else if (node.is_array()) {  // [{"name": "default", "template": "..."}, ...]
    for (const auto& entry : node)
      if (entry.is_object() && entry.value("name", std::string()) == "default" && entry.contains("template") &&
          entry["template"].is_string())
        jinja = entry["template"].get<std::string>();
  }
  VERLPP_CHECK(!jinja.empty(),
               "{}: field \"chat_template\": expected a string or a list holding a \"default\" "
               "template, got {}",
               file, node.dump().substr(0, 120));
  return from_jinja(jinja, file, file + ": field \"chat_template\"");
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatOptions& options) const {
  if (!jinja_) return render_builtin(messages, options);
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  return render_json(list, options);
}

std::string ChatTemplate::render_json(const nlohmann::ordered_json& messages, const ChatOptions& options) const {
  VERLPP_CHECK(messages.is_array(), "chat template \"{}\": the messages must be a list, got {}", name_,
               messages.type_name());
  if (!jinja_) {
    std::vector<ChatMessage> plain;
    for (const auto& m : messages) {
      VERLPP_CHECK(m.is_object() && m.contains("role") && m["role"].is_string() &&
                       (!m.contains("content") || m["content"].is_string() || m["content"].is_null()),
                   "chat template \"{}\": a built-in renders messages of a string role and content, got {}", name_,
                   m.dump().substr(0, 120));
      plain.push_back({m["role"].get<std::string>(),
                       m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>() : ""});
    }
    return render_builtin(plain, options);
  }
  // The variables transformers' apply_chat_template passes: the special tokens, the messages,
  // tools (None without), documents (None), add_generation_prompt, then the caller's kwargs.
  nlohmann::ordered_json context = special_tokens_;
  context["messages"] = messages;
  context["tools"] = options.tools.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(options.tools);
  context["documents"] = nullptr;
  context["add_generation_prompt"] = options.add_generation_prompt;
  if (!options.enable_thinking) context["enable_thinking"] = false;
  if (options.template_kwargs.is_object())
    for (auto it = options.template_kwargs.begin(); it != options.template_kwargs.end(); ++it)
      context[it.key()] = it.value();
  return jinja_->render(context);
}

std::string ChatTemplate::render_builtin(const std::vector<ChatMessage>& messages, const ChatOptions& options) const {
  std::string out;
  const size_t n = messages.size();
  const bool tools = !options.tools.empty();
  VERLPP_CHECK(!tools || renders_tools(),
               "chat template \"{}\": this format renders no tool schemas (the built-ins that do: qwen2.5, qwen3)",
               name_);
  const bool has_system = n > 0 && messages[0].role == "system";
  auto chatml_turn = [&](const std::string& role, const std::string& content) {
    out += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
  };
  // Qwen's grouping of consecutive tool messages into one user turn of <tool_response> blocks.
  auto tool_turn = [&](size_t i) {
    if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
    out += "\n<tool_response>\n" + messages[i].content + "\n</tool_response>";
    if (i + 1 == n || messages[i + 1].role != "tool") out += "<|im_end|>\n";
  };
  auto llama_turn = [&](const std::string& role, const std::string& content) {
    out += "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + python_strip(content) + "<|eot_id|>";
  };

  switch (format_) {
    case ChatFormat::kChatML: {
      if (tools)  // the system turn carries the tools section; the loop skips a first system message
        out += "<|im_start|>system\n" + (has_system ? messages[0].content : default_system_) + "\n\n" +
               hermes_tools_section(options.tools);
      else if (!default_system_.empty() && !has_system && (n > 0 || system_outside_loop_))
        chatml_turn("system", default_system_);
      for (size_t i = tools && has_system ? 1 : 0; i < n; ++i) {
        if (group_tool_responses_ && messages[i].role == "tool")
          tool_turn(i);
        else
          chatml_turn(messages[i].role, messages[i].content);
      }
      if (options.add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    }
    case ChatFormat::kQwen3: {
      if (tools)
        out += "<|im_start|>system\n" + (has_system ? messages[0].content + "\n\n" : std::string()) +
               hermes_tools_section(options.tools);
      else if (has_system)
        chatml_turn("system", messages[0].content);
      // The last user message that is not a wrapped tool response.
      size_t last_query = n == 0 ? 0 : n - 1;
      for (size_t k = n; k-- > 0;) {
        const auto& m = messages[k];
        if (m.role == "user" &&
            !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
          last_query = k;
          break;
        }
      }
      for (size_t i = 0; i < n; ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user" || (m.role == "system" && i != 0)) {
          chatml_turn(m.role, m.content);
        } else if (m.role == "assistant") {
          std::string content = m.content, reasoning;
          size_t close = content.find("</think>");
          if (close != std::string::npos) {
            size_t last_close = content.rfind("</think>");
            std::string before = strip_newlines(content.substr(0, close), false, true);
            size_t open = before.rfind("<think>");
            reasoning = strip_newlines(open == std::string::npos ? before : before.substr(open + 7), true, false);
            content = strip_newlines(content.substr(last_close + 8), true, false);
          }
          out += "<|im_start|>" + m.role + "\n";
          if (i > last_query && (i + 1 == n || !reasoning.empty()))
            out += "<think>\n" + strip_newlines(reasoning, true, true) + "\n</think>\n\n" +
                   strip_newlines(content, true, false);
          else
            out += content;
          out += "<|im_end|>\n";
        } else if (m.role == "tool") {
          tool_turn(i);
        }
      }
      if (options.add_generation_prompt) {
        out += "<|im_start|>assistant\n";
        const auto& kw = options.template_kwargs;
        const bool thinking = options.enable_thinking &&
                              !(kw.is_object() && kw.contains("enable_thinking") && kw["enable_thinking"] == false);
        if (!thinking) out += "<think>\n\n</think>\n\n";
      }
      break;
    }
    case ChatFormat::kLlama3: {
      for (size_t i = 0; i < n; ++i) {
        if (i == 0) out += bos_token_;
        llama_turn(messages[i].role, messages[i].content);
      }
      if (options.add_generation_prompt || always_generation_prompt_)
        out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    }
    case ChatFormat::kLlama31: {
      out += bos_token_;
      size_t first = 0;
      std::string system;
      if (n > 0 && messages[0].role == "system") {
        system = python_strip(messages[0].content);
        first = 1;
      }
      out += "<|start_header_id|>system<|end_header_id|>\n\n";
      out += "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
      out += system + "<|eot_id|>";
      for (size_t i = first; i < n; ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "tool" || m.role == "ipython")
          out += "<|start_header_id|>ipython<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
        else
          llama_turn(m.role, m.content);
      }
      if (options.add_generation_prompt || always_generation_prompt_)
        out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    }
  }
  return out;
}

}  // namespace verlpp::model
