// The agentic demo task (tasks/multiply_tool_task): splits, rows, the template's renderings and
// the reward, each against literal text or a plain recomputation.
#include <verlpp/model/chat_template.hpp>
#include <verlpp/tasks/multiply_tool_task.hpp>

#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "../error_of.hpp"

using nlohmann::json;
using namespace verlpp;

TEST_CASE("multiply_tool task: disjoint splits of 3-4-digit by 2-digit products, with and without the tool",
          "[tasks]") {
  tasks::MultiplyToolTaskOptions o;
  o.sft_count = 300;
  o.train_count = 200;
  o.val_count = 50;
  const tasks::MultiplyToolSplits s = tasks::make_multiply_tool_splits(o);
  REQUIRE(s.sft.size() == 300);
  REQUIRE(s.sft_without_tool.size() == 300);
  REQUIRE(s.train.size() == 200);
  REQUIRE(s.train_without_tool.size() == 200);
  REQUIRE(s.val.size() == 50);
  REQUIRE(s.val_without_tool.size() == 50);
  std::set<std::string> seen;
  auto problem_of = [](const json& row) {
    return row.contains("messages") ? row["messages"][0]["content"].get<std::string>()
                                    : row["prompt"][0]["content"].get<std::string>();
  };
  for (const auto* split : {&s.sft, &s.train, &s.val})
    for (const json& row : *split) {
      const std::string problem = problem_of(row);
      CHECK(seen.insert(problem).second);  // no problem in two splits, nor twice in one
      long long a = 0, b = 0;
      REQUIRE(std::sscanf(problem.c_str(), "%lld*%lld=", &a, &b) == 2);
      CHECK(a >= 100);
      CHECK(a <= 9999);
      CHECK(b >= 10);
      CHECK(b <= 99);
      CHECK(row["reward_model"]["ground_truth"] == std::to_string(a * b));
      CHECK(row["agent_name"] == "tool_agent");
    }
  for (size_t i = 0; i < s.train.size(); ++i) {
    CHECK(s.train_without_tool[i]["prompt"] == s.train[i]["prompt"]);
    CHECK(s.train_without_tool[i]["agent_name"] == "single_turn_agent");
  }
  for (size_t i = 0; i < s.sft.size(); ++i) {
    CHECK(s.sft_without_tool[i]["prompt"][0]["content"] == s.sft[i]["messages"][0]["content"]);
    CHECK(s.sft_without_tool[i]["response"] == s.sft[i]["reward_model"]["ground_truth"]);
  }
  // The trace: the call's expression is the problem, the tool replies the product, the answer repeats it.
  const json& m = s.sft[0]["messages"];
  const std::string problem = m[0]["content"].get<std::string>();
  CHECK(m[1]["tool_calls"][0]["function"]["name"] == "calc");
  CHECK(m[1]["tool_calls"][0]["function"]["arguments"]["expression"].get<std::string>() + "=" == problem);
  CHECK(m[2]["role"] == "tool");
  CHECK(m[2]["content"] == s.sft[0]["reward_model"]["ground_truth"]);
  CHECK(m[3]["content"] == m[2]["content"]);
  // Deterministic in the seed; another seed deals other problems.
  CHECK(tasks::make_multiply_tool_splits(o).val == s.val);
  tasks::MultiplyToolTaskOptions other = o;
  other.seed = 2;
  CHECK(tasks::make_multiply_tool_splits(other).val != s.val);
}

TEST_CASE("multiply_tool task: refusals name the ranges and counts", "[tasks]") {
  tasks::MultiplyToolTaskOptions o;
  o.min_a = 10;
  o.max_a = 11;
  o.min_b = 1;
  o.max_b = 2;
  o.sft_count = 3;
  o.train_count = 1;
  o.val_count = 1;
  CHECK(test::error_of([&] { tasks::make_multiply_tool_splits(o); }) ==
        "multiply_tool task: 5 problems asked for (sft 3 + train 1 + val 1) but 10..11 x 1..2 give only 4");
  o.max_a = 9;
  CHECK(test::error_of([&] { tasks::make_multiply_tool_splits(o); }).find("10..9") != std::string::npos);
}

TEST_CASE("multiply_tool task: the chat template renders tools, calls and replies as written here", "[tasks]") {
  const model::ChatTemplate chat = model::ChatTemplate::from_jinja(tasks::multiply_tool_chat_template(), "", "demo");
  REQUIRE(chat.renders_tools());
  model::ChatOptions options;
  options.tools.push_back(nlohmann::ordered_json::parse(
      R"({"type": "function", "function": {"name": "calc", "parameters": {"type": "object",
          "properties": {"expression": {"type": "string"}}}}})"));
  const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "user", "content": "1234*56="},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "calc", "arguments": {"expression": "1234*56"}}}]},
    {"role": "tool", "content": "69104"},
    {"role": "assistant", "content": "69104"}])");
  options.add_generation_prompt = false;
  CHECK(chat.render_json(messages, options) ==
        "<|im_start|>system\ntools: calc(expression)<|im_end|>\n"
        "<|im_start|>user\n1234*56=<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"1234*56\"}}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n69104\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n69104<|im_end|>\n");
  // No tools: no system line (the comparison run's prompts).
  options.tools.clear();
  options.add_generation_prompt = true;
  CHECK(chat.render_json(nlohmann::ordered_json::array({messages[0]}), options) ==
        "<|im_start|>user\n1234*56=<|im_end|>\n<|im_start|>assistant\n");
  // The tool config names the calculator the traces call.
  CHECK(tasks::multiply_tool_config_yaml().find("name: calc\n") != std::string::npos);
  CHECK(tasks::multiply_tool_config_yaml().find("class_name: verlpp.tools.Calculator") != std::string::npos);
}

TEST_CASE("multiply_tool reward: the answer after the last tool reply, never the reply itself", "[tasks][reward]") {
  using tasks::multiply_tool_reward;
  const std::string call =
      "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"1234*56\"}}\n</tool_call>";
  const std::string reply = "user\n<tool_response>\n69104\n</tool_response>\nassistant\n";
  CHECK(multiply_tool_reward(call + reply + "69104", "69104") == 1.0);
  CHECK(multiply_tool_reward(call + reply, "69104") == 0.0);  // stopped after the tool: no answer of its own
  CHECK(multiply_tool_reward(call + reply + "69105", "69104") == 0.0);
  CHECK(multiply_tool_reward("69104", "69104") == 1.0);  // answered without the tool
  CHECK(multiply_tool_reward("it is 69104", " 69104\n") == 1.0);
  CHECK(multiply_tool_reward("069104", "69104") == 0.0);
  CHECK(multiply_tool_reward("", "69104") == 0.0);
}
