// `verlpp tokenize --tokenizer PATH [--file F]`: one JSON string per input line in, one JSON
// array of ids per line out (no special tokens added). --decode reverses it (id arrays in, JSON
// strings out); --chat reads one conversation per line (a JSON array of messages, or an object
// {"messages": [...], "tools": [...]}) and tokenizes the prompt of the chat template (--text
// prints the prompt itself). Errors name the line.
#include "../core/util/input_file.hpp"
#include "commands.hpp"

#include <verlpp/core/json_limits.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/model/chat_template.hpp>
#include <verlpp/model/tokenizer.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <fstream>
#include <iostream>
#include <memory>

namespace verlpp::apps {
namespace {

struct TokenizeOptions {
  std::string tokenizer_path;
  std::string file;
  bool decode = false;
  bool skip_special_tokens = false;
  bool add_special_tokens = false;
  bool chat = false;
  bool print_text = false;
  bool no_generation_prompt = false;
  bool no_thinking = false;
  std::string chat_format;
  std::string chat_template_file;
  std::string chat_kwargs;
};

// One input line of --chat: its messages, and its tools into `options`.
nlohmann::ordered_json parse_conversation(const nlohmann::ordered_json& line, const std::string& where,
                                          model::ChatOptions& options) {
  options.tools.clear();
  nlohmann::ordered_json messages = line;
  if (line.is_object()) {
    VERLPP_CHECK(line.contains("messages"), "{}: a conversation object needs a \"messages\" list", where);
    messages = line["messages"];
    if (line.contains("tools") && !line["tools"].is_null()) {
      VERLPP_CHECK(line["tools"].is_array(), "{}: \"tools\" must be a list of function schemas", where);
      for (const auto& t : line["tools"]) options.tools.push_back(t);
    }
  }
  VERLPP_CHECK(messages.is_array(), "{}: expected a JSON array of messages (or an object with \"messages\")", where);
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    VERLPP_CHECK(m.is_object() && m.contains("role") && m["role"].is_string(),
                 "{}: message {} needs a string field \"role\"", where, i);
  }
  return messages;
}

void append_ids(const TokenIds& ids, std::string& out) {
  out += '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  out += "]\n";
}

void run_tokenize(const TokenizeOptions& o) {
  model::Tokenizer tokenizer = model::Tokenizer::from_file(o.tokenizer_path);
  std::unique_ptr<model::ChatTemplate> chat_template;
  if (o.chat) {
    // tokenizer_config.json beside tokenizer.json (POSIX, not std::filesystem: see docs/building.md).
    std::string folder = o.tokenizer_path;
    struct stat info {};
    if (::stat(folder.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
      size_t slash = folder.find_last_of('/');
      folder = slash == std::string::npos ? "." : folder.substr(0, slash + 1);
    }
    if (!o.chat_template_file.empty())
      chat_template = std::make_unique<model::ChatTemplate>(model::ChatTemplate::from_jinja(
          files::read_input(o.chat_template_file, "chat template (--chat-template-file)"),
          folder + "/tokenizer_config.json", o.chat_template_file));
    else
      chat_template = std::make_unique<model::ChatTemplate>(
          model::ChatTemplate::from_config_file(folder + "/tokenizer_config.json", o.chat_format));
  }
  model::ChatOptions chat_options;
  chat_options.add_generation_prompt = !o.no_generation_prompt;
  chat_options.enable_thinking = !o.no_thinking;
  if (!o.chat_kwargs.empty()) {
    try {
      chat_options.template_kwargs = nlohmann::ordered_json::parse(o.chat_kwargs);
    } catch (const nlohmann::json::exception& e) {
      VERLPP_FAIL_AT("--chat-kwargs", "not valid JSON: {}", e.what());
    }
    VERLPP_CHECK(chat_options.template_kwargs.is_object(), "--chat-kwargs: expected a JSON object, got {}",
                 o.chat_kwargs);
  }

  std::ifstream file_stream;
  if (!o.file.empty()) file_stream = files::open_input(o.file, "input file (--file)");
  std::istream& in = o.file.empty() ? std::cin : file_stream;
  const std::string source = o.file.empty() ? "<stdin>" : o.file;
  std::string line, out;
  for (size_t number = 1; std::getline(in, line); ++number) {
    const std::string where = fmt::format("{}:{}", source, number);
    nlohmann::ordered_json value;
    check_json_depth(line, where);
    try {
      value = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number that overflows
      VERLPP_FAIL_AT(where, "not valid JSON: {}", e.what());
    }
    if (o.decode) {
      VERLPP_CHECK(value.is_array(), "{}: expected a JSON array of ids", where);
      TokenIds ids;
      for (size_t i = 0; i < value.size(); ++i) {
        const nlohmann::json& id = value[i];
        if (!id.is_number_integer()) VERLPP_FAIL_AT(where, "id [{}] = {} is not an integer", i, id.dump());
        // The library skips unknown ids as HF does; a command asked to decode them says so.
        const int64_t wide = id.get<int64_t>();
        if (wide < 0 || wide > INT32_MAX || !tokenizer.id_to_token(int32_t(wide)))
          VERLPP_FAIL_AT(where, "id [{}] = {} is not in the vocabulary of {} (ids 0..{})", i, id.dump(),
                         o.tokenizer_path, tokenizer.vocab_size() - 1);
        ids.push_back(TokenId(wide));
      }
      out += nlohmann::json(tokenizer.decode(ids, o.skip_special_tokens)).dump() + "\n";
    } else if (o.chat) {
      const nlohmann::ordered_json messages = parse_conversation(value, where, chat_options);
      std::string prompt = chat_template->render_json(messages, chat_options);
      if (o.print_text)
        out += nlohmann::json(prompt).dump() + "\n";
      else
        append_ids(tokenizer.encode(prompt, o.add_special_tokens), out);
    } else {
      VERLPP_CHECK(value.is_string(), "{}: expected a JSON string", where);
      append_ids(tokenizer.encode(value.get_ref<const std::string&>(), o.add_special_tokens), out);
    }
    if (out.size() > (1u << 16)) {
      std::cout.write(out.data(), std::streamsize(out.size()));  // checked (main.cpp's CheckedStdout)
      out.clear();
    }
  }
  std::cout.write(out.data(), std::streamsize(out.size()));
}

}  // namespace

void register_tokenize_command(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Token ids of JSON strings, one per line (HF tokenizer.json)");
  cmd->add_option("--tokenizer", options->tokenizer_path, "tokenizer.json, or a folder holding it")->required();
  cmd->add_option("--file", options->file, "input file, one JSON value per line (default: stdin)");
  cmd->add_flag("--decode", options->decode, "input lines are JSON arrays of ids; print JSON strings");
  cmd->add_flag("--skip-special-tokens", options->skip_special_tokens, "with --decode: leave out special tokens");
  cmd->add_flag("--add-special-tokens", options->add_special_tokens, "add what the post-processor adds (e.g. BOS)");
  cmd->add_flag("--chat", options->chat, "input lines are JSON arrays of {role, content}; tokenize the chat prompt");
  cmd->add_option("--chat-template", options->chat_format,
                  "with --chat: a built-in format (chatml, qwen2, qwen2.5, qwen3, llama3, llama3.1) instead of "
                  "interpreting tokenizer_config.json's");
  cmd->add_option("--chat-template-file", options->chat_template_file,
                  "with --chat: a Jinja chat template file to interpret instead of tokenizer_config.json's (as "
                  "verl's custom_chat_template)");
  cmd->add_option("--chat-kwargs", options->chat_kwargs,
                  "with --chat: a JSON object of extra template variables (as verl's apply_chat_template_kwargs), "
                  "e.g. '{\"enable_thinking\": false}'");
  cmd->add_flag("--text", options->print_text, "with --chat: print the prompt as a JSON string instead of ids");
  cmd->add_flag("--no-generation-prompt", options->no_generation_prompt, "with --chat: no opening assistant turn");
  cmd->add_flag("--no-thinking", options->no_thinking, "with --chat: Qwen3's enable_thinking=false");
  cmd->callback([options] { run_tokenize(*options); });
}

}  // namespace verlpp::apps
