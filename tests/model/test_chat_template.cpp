// Chat template tests: each built-in rendered on small conversations against hand-written
// expected prompts, recognition of published templates, tokenizer folders' templates
// interpreted, and the errors for unknown templates and names. Rendering equality with the real
// Jinja templates (Qwen2.5, Qwen3, Llama 3, Llama 3.2, Gemma 3) is checked by the peer test
// (tokenizer_peer/compare.mjs); the interpreter's own semantics by test_jinja.cpp.
#include <catch2/catch.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/model/chat_template.hpp>
#include <verlpp/model/tokenizer.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>

#include "../error_of.hpp"

using verlpp::model::ChatFormat;
using verlpp::model::ChatMessage;
using verlpp::model::ChatOptions;
using verlpp::model::ChatTemplate;

namespace {

using verlpp::test::error_of;

const std::string kTinyDir = std::string(VERLPP_SOURCE_DIR) + "/examples/tiny";

// Qwen2.5-Instruct's template opening (enough for recognition).
const char* kQwen25Jinja =
    "{%- if tools %}...{%- else %}{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + "
    "messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by "
    "Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}{%- endif %}<tool_response>";

}  // namespace

TEST_CASE("ChatML: the tiny tokenizer's template is interpreted and renders", "[chat_template]") {
  ChatTemplate t = ChatTemplate::from_config_file(kTinyDir);
  CHECK(t.interpreted());
  CHECK_THAT(t.name(), Catch::Contains("tokenizer_config.json"));
  CHECK(ChatTemplate::from_config_file(kTinyDir, "chatml").name() == "chatml");
  std::vector<ChatMessage> chat = {{"user", "What is 2+2?"}};
  CHECK(t.render(chat) == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  ChatOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  CHECK(t.render(chat, no_prompt) == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n");
  // The special tokens of the prompt become single ids.
  auto tokenizer = verlpp::model::Tokenizer::from_file(kTinyDir);
  auto ids = tokenizer.encode(t.render(chat));
  CHECK(ids.front() == *tokenizer.token_to_id("<|im_start|>"));
  CHECK(std::count(ids.begin(), ids.end(), *tokenizer.token_to_id("<|im_end|>")) == 1);
}

TEST_CASE("Qwen2.5: default system prompt when the conversation has none", "[chat_template]") {
  ChatTemplate t = ChatTemplate::recognise(kQwen25Jinja, "");
  CHECK(t.name() == "qwen2.5");
  CHECK(t.default_system_prompt() == "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  CHECK(t.render({{"user", "hi"}}) ==
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(t.render({{"system", "S"}, {"user", "hi"}}, {false, true, {}}) ==
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
  // Consecutive tool messages become one user turn of <tool_response> blocks.
  CHECK(t.render({{"system", "S"}, {"tool", "a"}, {"tool", "b"}}, {false, true, {}}) ==
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n<tool_response>\na\n</tool_response>\n"
        "<tool_response>\nb\n</tool_response><|im_end|>\n");
  CHECK(ChatTemplate::builtin("qwen2").default_system_prompt() == "You are a helpful assistant.");
}

TEST_CASE("Qwen3: <think> handling of assistant turns", "[chat_template]") {
  ChatTemplate t = ChatTemplate::builtin("qwen3");
  // Before the last user query the reasoning is dropped; after it, it is kept.
  std::vector<ChatMessage> chat = {{"user", "Q1"},
                                   {"assistant", "<think>\nr1\n</think>\n\nA1"},
                                   {"user", "Q2"},
                                   {"assistant", "<think>r2</think>A2"}};
  ChatOptions no_prompt{false, true, {}};
  CHECK(t.render(chat, no_prompt) ==
        "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
        "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2<|im_end|>\n");
  ChatOptions no_thinking{true, false, {}};
  CHECK(t.render({{"user", "Q"}}, no_thinking) ==
        "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST_CASE("Llama 3: bos first, trimmed contents, 3.1's preamble", "[chat_template]") {
  ChatTemplate t = ChatTemplate::builtin("llama3");
  CHECK(t.render({{"system", " S "}, {"user", "\thi\n"}}) ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  ChatTemplate t31 = ChatTemplate::builtin("llama3.1");
  CHECK(t31.render({{"user", "hi"}}, {false, true, {}}) ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
  ChatTemplate recognised = ChatTemplate::recognise(
      "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
      "message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}{% endif %}",
      "<s>");
  CHECK(recognised.format() == ChatFormat::kLlama3);
  CHECK(recognised.bos_token() == "<s>");
}

TEST_CASE("chat template errors", "[chat_template]") {
  CHECK_THAT(error_of([] { ChatTemplate::builtin("vicuna"); }),
             Catch::Contains("vicuna") && Catch::Contains("qwen2.5"));
  CHECK_THAT(
      error_of([] { ChatTemplate::recognise("{{ messages[0].content }}[INST]", "", "my_config"); }),
      Catch::Contains("my_config") && Catch::Contains("unrecognised chat template") && Catch::Contains("[INST]"));
  CHECK_THAT(error_of([] {
               ChatTemplate::recognise("<|start_header_id|><|end_header_id|><|eot_id|>{{ strftime_now('%d') }}", "");
             }),
             Catch::Contains("strftime_now"));
  // A config without "chat_template" is an error unless a built-in is named.
  // (POSIX temp folder: std::filesystem is avoided in the model layer, see docs/building.md.)
  char dir_template[] = "/tmp/verlpp_chat_template_XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template, file = dir + "/tokenizer_config.json";
  std::ofstream(file) << R"({"bos_token": {"content": "<B>"}})";
  CHECK_THAT(error_of([&] { ChatTemplate::from_config_file(dir); }),
             Catch::Contains("tokenizer_config.json") && Catch::Contains("chat_template"));
  ChatTemplate named = ChatTemplate::from_config_file(dir, "llama3");
  CHECK(named.bos_token() == "<B>");
  // Without "chat_template", a chat_template.jinja beside the config is interpreted, with the
  // config's special tokens as variables.
  std::ofstream(dir + "/chat_template.jinja")
      << "{{ bos_token }}{% for m in messages %}{{ '<|im_start|>' + m.role }}{% endfor %}<|im_end|>\n";
  const ChatTemplate beside = ChatTemplate::from_config_file(dir);
  CHECK_THAT(beside.name(), Catch::Contains("chat_template.jinja"));
  CHECK(beside.render({{"user", "x"}, {"assistant", "y"}}) == "<B><|im_start|>user<|im_start|>assistant<|im_end|>");
  // A syntax error names the file, the line and the column.
  std::ofstream(dir + "/chat_template.jinja") << "ok\n{% for m in %}";
  CHECK_THAT(error_of([&] { ChatTemplate::from_config_file(dir); }), Catch::Contains("chat_template.jinja") &&
                                                                         Catch::Contains("line 2, column 1") &&
                                                                         Catch::Contains("expected a value"));
  ::unlink((dir + "/chat_template.jinja").c_str());
  std::ofstream(file) << "{not json";
  CHECK_THAT(error_of([&] { ChatTemplate::from_config_file(dir); }), Catch::Contains("not valid JSON"));
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
  CHECK_THAT(error_of([] { ChatTemplate::from_config_file("/nonexistent/tokenizer_config.json"); }),
             Catch::Contains("does not exist"));
}
