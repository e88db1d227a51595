// The agent loop's token layout against vectors derived by hand from verl's ToolAgentLoop and
// the Qwen2.5 template: a scripted policy emits fixed turns; the expected ids are the tokenizer's
// encoding of the literal text verl would append (written out here, not rendered by our code).
#include <verlpp/agent/tool_agent_loop.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/model/chat_template.hpp>
#include <verlpp/model/tokenizer.hpp>

#include "../error_of.hpp"
#include "scripted_source.hpp"

#include <catch2/catch.hpp>

#include <map>

using namespace verlpp;
using namespace verlpp::agent;
using Catch::Matchers::Contains;
using verlpp::test::error_of;
using namespace verlpp::agent_test;

namespace {

const char* kTools = R"(tools:
  - class_name: verlpp.tools.Calculator
    tool_schema: {type: function, function: {name: calculator, description: exact arithmetic,
                  parameters: {type: object, properties: {expression: {type: string}}, required: [expression]}}}
)";

const std::string kQwenSystem =
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n";

}  // namespace

TEST_CASE("Qwen2.5 and Qwen3 render tool schemas as their templates do", "[agent_loop]") {
  const ToolSet tools = parse_tool_config(kTools, "tools.yaml");
  model::ChatOptions options;
  options.tools = tools.schemas();
  const std::string schema =
      "{\"type\": \"function\", \"function\": {\"name\": \"calculator\", \"description\": \"exact arithmetic\", "
      "\"parameters\": {\"type\": \"object\", \"properties\": {\"expression\": {\"type\": \"string\"}}, "
      "\"required\": [\"expression\"]}}}";
  const std::string section =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function "
      "signatures within <tools></tools> XML tags:\n<tools>\n" +
      schema +
      "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<args-json-object>}\n</tool_call><|im_end|>\n";
  const auto qwen25 = model::ChatTemplate::builtin("qwen2.5");
  CHECK(qwen25.render({{"user", "12*34?"}}, options) ==
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n" + section +
            "<|im_start|>user\n12*34?<|im_end|>\n<|im_start|>assistant\n");
  CHECK(qwen25.render({{"system", "Be brief."}, {"user", "hi"}}, options) ==
        "<|im_start|>system\nBe brief.\n\n" + section + "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  const auto qwen3 = model::ChatTemplate::builtin("qwen3");
  CHECK(qwen3.render({{"user", "hi"}}, options) ==
        "<|im_start|>system\n" + section + "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(qwen3.render({{"system", "S"}, {"user", "hi"}}, options) ==
        "<|im_start|>system\nS\n\n" + section + "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  CHECK_THAT(error_of([&] {
               model::ChatTemplate::builtin("llama3").render({{"user", "hi"}}, options);
             }),
             Contains("\"llama3\": this format renders no tool schemas"));
}

TEST_CASE("the tool segment: verl's system-prompt cut, with the end-of-turn newline kept", "[agent_loop]") {
  const auto qwen25 = model::ChatTemplate::builtin("qwen2.5");
  const ToolSegmentFormat format(tiny_tokenizer(), qwen25);
  CHECK(format.system_prefix() == ids_of(kQwenSystem));
  CHECK(format.turn_end() == "<|im_end|>\n");
  CHECK(format.segment("x<|im_end|>", {"408"}) ==
        ids_of("\n<|im_start|>user\n<tool_response>\n408\n</tool_response><|im_end|>\n<|im_start|>assistant\n"));
  // A turn that did not end with the end-of-turn token gets no part of it (verl appends nothing).
  CHECK(
      format.segment("x", {"1", "2"}) ==
      ids_of("<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n"
             "<|im_start|>assistant\n"));
  const auto chatml = model::ChatTemplate::builtin("chatml");
  const ToolSegmentFormat plain(tiny_tokenizer(), chatml);
  CHECK(plain.system_prefix().empty());
  CHECK(plain.segment("x<|im_end|>", {"7"}) == ids_of("\n<|im_start|>tool\n7<|im_end|>\n<|im_start|>assistant\n"));
}

TEST_CASE("a two-turn trajectory: ids, mask, log-probs and counts as verl's ToolAgentLoop builds them",
          "[agent_loop]") {
  const ToolSet tools = parse_tool_config(kTools, "tools.yaml");
  const auto qwen25 = model::ChatTemplate::builtin("qwen2.5");
  const ToolSegmentFormat format(tiny_tokenizer(), qwen25);
  const TokenIds im_end = ids_of("<|im_end|>");
  REQUIRE(im_end.size() == 1);
  const TokenIds call =
      cat({ids_of("<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12*34\"}}\n"
                  "</tool_call>"),
           im_end});
  const TokenIds answer = cat({ids_of("The answer is 408."), im_end});
  const TokenIds plain = cat({ids_of("no tools needed"), im_end});
  ScriptedSource source({{call, answer}, {plain}});
  std::vector<AgentSample> samples(2);
  samples[0].prompt_ids = ids_of("<|im_start|>user\n12*34?<|im_end|>\n<|im_start|>assistant\n");
  samples[0].agent_name = kToolAgent;
  samples[1].prompt_ids = ids_of("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n");
  samples[1].agent_name = kToolAgent;
  AgentLoopSettings settings;
  settings.response_length = 200;
  AgentLoopStats stats;
  const std::vector<Trajectory> out =
      run_agent_loop(source, samples, tools, format, tiny_tokenizer(), settings, &stats);
  REQUIRE(out.size() == 2);

  const TokenIds segment =
      ids_of("\n<|im_start|>user\n<tool_response>\n408\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  const Trajectory& t = out[0];
  CHECK(t.prompt_ids == samples[0].prompt_ids);
  CHECK(t.response_ids == cat({call, segment, answer}));
  std::vector<int8_t> mask(call.size(), 1);
  mask.insert(mask.end(), segment.size(), 0);
  mask.insert(mask.end(), answer.size(), 1);
  CHECK(t.response_mask == mask);
  // Step 1 emits sample 0's call, then sample 1's turn; step 2 sample 0's answer.
  std::vector<float> logprobs = scripted_logprobs(0, call.size());
  logprobs.insert(logprobs.end(), segment.size(), 0.0f);
  const std::vector<float> second = scripted_logprobs(call.size() + plain.size(), answer.size());
  logprobs.insert(logprobs.end(), second.begin(), second.end());
  CHECK(t.response_logprobs == logprobs);
  CHECK(t.assistant_turns == 2);
  CHECK(t.user_turns == 1);
  CHECK(t.num_turns == 4);
  CHECK(t.tool_calls == 1);
  CHECK(t.tool_rewards == std::vector<double>{0.0});
  CHECK(t.termination == Termination::kNoToolCall);
  // The engine was handed exactly the segment, and its context is prompt + response.
  REQUIRE(source.resumes.size() == 1);
  CHECK(source.resumes[0].second == segment);
  CHECK(source.context(100) == cat({t.prompt_ids, t.response_ids}));

  const Trajectory& u = out[1];
  CHECK(u.response_ids == plain);
  CHECK(u.response_mask == std::vector<int8_t>(plain.size(), 1));
  CHECK(u.num_turns == 2);
  CHECK(u.termination == Termination::kNoToolCall);
  CHECK(stats.tool_calls == 1);
  CHECK(stats.trajectories == 2);
  CHECK(source.finished.size() == 2);
}

TEST_CASE("termination: budget, turn limits, overflowing segment, parallel calls, malformed calls", "[agent_loop]") {
  const ToolSet tools = parse_tool_config(kTools, "tools.yaml");
  const auto qwen25 = model::ChatTemplate::builtin("qwen2.5");
  const ToolSegmentFormat format(tiny_tokenizer(), qwen25);
  const TokenIds im_end = ids_of("<|im_end|>");
  auto call_of = [&](const std::string& expression) {
    return ids_of("<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"" + expression +
                  "\"}}</tool_call>");
  };
  const TokenIds one_call = cat({call_of("1+1"), im_end});
  const TokenIds prompt = ids_of("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n");
  const TokenIds seg2 =
      ids_of("\n<|im_start|>user\n<tool_response>\n2\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  auto run = [&](std::vector<TokenIds> script, AgentLoopSettings settings, ScriptedSource** source_out = nullptr) {
    static std::unique_ptr<ScriptedSource> source;
    source = std::make_unique<ScriptedSource>(std::vector<std::vector<TokenIds>>{std::move(script)});
    if (source_out) *source_out = source.get();
    std::vector<AgentSample> samples(1);
    samples[0].prompt_ids = prompt;
    samples[0].agent_name = kToolAgent;
    return run_agent_loop(*source, samples, tools, format, tiny_tokenizer(), settings).at(0);
  };

  SECTION("a turn cut at the response budget ends the trajectory, cut to the budget") {
    AgentLoopSettings s;
    s.response_length = 5;
    const Trajectory t = run({one_call}, s);
    CHECK(t.termination == Termination::kResponseLength);
    CHECK(t.response_ids == TokenIds(one_call.begin(), one_call.begin() + 5));
    CHECK(t.tool_calls == 0);
  }
  SECTION("a tool segment that would reach the budget is not appended") {
    AgentLoopSettings s;
    s.response_length = static_cast<int64_t>(one_call.size() + seg2.size());  // >= : reaching it is overflow
    const Trajectory t = run({one_call, one_call}, s);
    CHECK(t.termination == Termination::kToolSegmentOverflow);
    CHECK(t.response_ids == one_call);
    CHECK(t.tool_calls == 1);
    CHECK(t.user_turns == 0);
    s.response_length += 1;  // now it fits; the second turn is cut to the one id left
    const Trajectory u = run({one_call, one_call}, s);
    CHECK(u.termination == Termination::kResponseLength);
    CHECK(u.response_ids == cat({one_call, seg2, TokenIds{one_call[0]}}));
  }
  SECTION("max_assistant_turns and max_user_turns, checked after the assistant turn") {
    AgentLoopSettings s;
    s.response_length = 400;
    s.max_assistant_turns = 1;
    CHECK(run({one_call}, s).termination == Termination::kMaxAssistantTurns);
    s.max_assistant_turns = 0;
    s.max_user_turns = 1;
    const Trajectory t = run({one_call, one_call}, s);
    CHECK(t.termination == Termination::kMaxUserTurns);
    CHECK(t.response_ids == cat({one_call, seg2, one_call}));
    CHECK(t.num_turns == 4);
  }
  SECTION("several calls in one turn: the first max_parallel_calls run, their replies in one user turn") {
    AgentLoopSettings s;
    s.response_length = 400;
    s.max_parallel_calls = 2;
    const TokenIds three = cat({call_of("6*7"), ids_of("\n"), call_of("1/0"), call_of("2**10"), im_end});
    const TokenIds done = cat({ids_of("ok"), im_end});
    const Trajectory t = run({three, done}, s);
    const TokenIds segment = ids_of(
        "\n<|im_start|>user\n<tool_response>\n42\n</tool_response>\n<tool_response>\nError when executing tool: "
        "division by zero at column 3\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
    CHECK(t.response_ids == cat({three, segment, done}));
    CHECK(t.tool_calls == 2);
  }
  SECTION("malformed calls are skipped: a turn with only those ends the trajectory") {
    AgentLoopSettings s;
    s.response_length = 400;
    const TokenIds bad = cat({ids_of("<tool_call>{\"name\": calculator}</tool_call>"), im_end});
    const Trajectory t = run({bad}, s);
    CHECK(t.termination == Termination::kNoToolCall);
    CHECK(t.malformed_calls == 1);
    CHECK(t.tool_calls == 0);
  }
  SECTION("a long reply is truncated before it is rendered") {
    AgentLoopSettings s;
    s.response_length = 400;
    s.max_tool_response_length = 4;
    s.tool_response_truncate_side = "left";
    const TokenIds big = cat({call_of("2**40"), im_end});
    const TokenIds done = cat({ids_of("ok"), im_end});
    const Trajectory t = run({big, done}, s);
    CHECK(t.response_ids ==
          cat({big,
               ids_of("\n<|im_start|>user\n<tool_response>\n1099...(truncated)\n</tool_response><|im_end|>\n"
                      "<|im_start|>assistant\n"),
               done}));
  }
  SECTION("a single-turn agent ends after its first turn, whatever it holds") {
    std::vector<AgentSample> samples(1);
    samples[0].prompt_ids = prompt;
    ScriptedSource source({{one_call}});
    const Trajectory t =
        run_agent_loop(source, samples, ToolSet(), format, tiny_tokenizer(), AgentLoopSettings()).at(0);
    CHECK(t.response_ids == one_call);
    CHECK(t.num_turns == 2);
    CHECK(t.tool_calls == 0);
  }
}

TEST_CASE("the agent loop refuses what it cannot run, naming it", "[agent_loop]") {
  const auto qwen25 = model::ChatTemplate::builtin("qwen2.5");
  const ToolSegmentFormat format(tiny_tokenizer(), qwen25);
  ScriptedSource source(std::vector<std::vector<TokenIds>>(1));
  std::vector<AgentSample> samples(1);
  samples[0].prompt_ids = ids_of("hi");
  samples[0].agent_name = "react_agent";
  CHECK_THAT(
      error_of([&] { run_agent_loop(source, samples, ToolSet(), format, tiny_tokenizer(), AgentLoopSettings()); }),
      Contains("sample 0: agent_name 'react_agent' is not a known agent loop"));
  samples[0].agent_name = kToolAgent;
  CHECK_THAT(
      error_of([&] { run_agent_loop(source, samples, ToolSet(), format, tiny_tokenizer(), AgentLoopSettings()); }),
      Contains("needs tools"));
  AgentLoopSettings bad;
  bad.tool_response_truncate_side = "top";
  CHECK_THAT(error_of([&] { validate(bad); }), Contains("must be left, right or middle, got 'top'"));
}
