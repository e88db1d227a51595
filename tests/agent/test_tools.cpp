// The hermes parser, the built-in tools and the tool config, against what verl's Python code
// yields for the same input (the expected strings are written out from its semantics).
#include <verlpp/agent/tool_agent_loop.hpp>
#include <verlpp/agent/tool_call_parser.hpp>
#include <verlpp/agent/tool_config.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/python_json.hpp>

#include "../error_of.hpp"

#include <catch2/catch.hpp>

using namespace verlpp;
using namespace verlpp::agent;
using Catch::Matchers::Contains;
using ojson = nlohmann::ordered_json;
using verlpp::test::error_of;

namespace {

const char* kToolsYaml = R"(tools:
  - class_name: verlpp.tools.Calculator
    config: {type: native}
    tool_schema:
      type: function
      function:
        name: calculator
        description: Evaluates an arithmetic expression exactly.
        parameters:
          type: object
          properties:
            expression: {type: string, description: "e.g. 1234 * 56"}
          required: [expression]
  - class_name: verl.tools.gsm8k_tool.Gsm8kTool
    config:
      type: native
    tool_schema:
      type: function
      function:
        name: calc_gsm8k_reward
        description: A tool for calculating the reward of gsm8k
        parameters:
          type: object
          properties:
            answer: {type: string, description: "The model's answer to the GSM8K math problem, must be a digits"}
          required: [answer]
)";

ToolResult call_tool(const ToolSet& tools, const std::string& name, const std::string& arguments,
                     const nlohmann::json& kwargs = nlohmann::json::object(), bool* failed = nullptr) {
  AgentLoopSettings settings;
  return run_tool_call(tools, ToolCall{name, arguments}, kwargs, settings, failed);
}

}  // namespace

TEST_CASE("python_json_dumps writes json.dumps(ensure_ascii=False) text, keys in their own order", "[tools]") {
  const ojson value = ojson::parse(R"({"z": 1, "a": [1, 2.5, "x\"y\n", null, true], "m": {}, "u": "é", "e": []})");
  CHECK(python_json_dumps(value) ==
        "{\"z\": 1, \"a\": [1, 2.5, \"x\\\"y\\n\", null, true], \"m\": {}, \"u\": \"é\", \"e\": []}");
  CHECK(python_json_dumps(ojson(1e16)) == "1e+16");
  CHECK(python_json_dumps(ojson(1.0)) == "1.0");
  CHECK(python_json_dumps(ojson(0.0001)) == "0.0001");
  CHECK(python_json_dumps(ojson(1e-05)) == "1e-05");
  CHECK(python_str(ojson::parse(R"({"b": [1, "x'y"], "a": false})")) == "{'b': [1, \"x'y\"], 'a': False}");
  CHECK(python_repr(ojson("it's \"q\"")) == "'it\\'s \"q\"'");
  CHECK(python_repr(ojson("tab\there")) == "'tab\\there'");
}

TEST_CASE("hermes parser: every <tool_call> span, malformed ones skipped and counted", "[tools]") {
  const std::string text =
      "Let me compute.<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"2 * 3\", \"z\": 1}}\n"
      "</tool_call> and <tool_call>{not json}</tool_call><tool_call>{\"name\": \"a\"}</tool_call>"
      "<tool_call>{\"name\": 7, \"arguments\": {}}</tool_call><tool_call>\n{\"name\": \"b\", \"arguments\": \"s\"}"
      "</tool_call> done <tool_call>{\"name\": \"c\"";
  const ParsedTurn parsed = parse_hermes_tool_calls(text);
  REQUIRE(parsed.calls.size() == 2);
  CHECK(parsed.calls[0].name == "calculator");
  CHECK(parsed.calls[0].arguments == "{\"expression\": \"2 * 3\", \"z\": 1}");  // key order kept
  CHECK(parsed.calls[1].name == "b");
  CHECK(parsed.calls[1].arguments == "\"s\"");
  CHECK(parsed.num_malformed == 3);
  CHECK_THAT(parsed.first_malformed, Contains("not JSON"));
  CHECK(parsed.content == "Let me compute. and  done <tool_call>{\"name\": \"c\"");
  CHECK(parse_hermes_tool_calls("no calls here").calls.empty());
  CHECK(parse_hermes_tool_calls("no calls here").content == "no calls here");
}

TEST_CASE("the calculator: exact rational arithmetic, Python's precedence, errors as text", "[tools]") {
  const ToolSet tools = parse_tool_config(kToolsYaml, "tools.yaml");
  auto calc = [&](const std::string& expression) {
    return call_tool(tools, "calculator", ojson{{"expression", expression}}.dump()).text;
  };
  CHECK(calc("1234 * 56") == "69104");
  CHECK(calc("987654321987654321 * 123456789123456789") == "121932631356500531347203169112635269");
  CHECK(calc("1/3*3") == "1");
  CHECK(calc("7 / 3") == "7/3");
  CHECK(calc("-2**2") == "-4");
  CHECK(calc("2**-2") == "1/4");
  CHECK(calc("2**3**2") == "512");
  CHECK(calc("(1.5 + 0.25) * 4") == "7");
  CHECK(calc("010 + 0.08") == "252/25");  // decimal digits, whatever their leading zeros
  CHECK(calc("000") == "0");
  CHECK(calc("-7 % 3") == "2");
  CHECK(calc("7 % -3") == "-2");
  bool failed = false;
  CHECK(call_tool(tools, "calculator", R"j({"expression": "1/(2-2)"})j", {}, &failed).text ==
        "Error when executing tool: division by zero at column 3");
  CHECK(failed);
  CHECK_THAT(calc("2 +* 3"), Contains("expected a number, got '*' at column 4"));
  CHECK_THAT(calc("10**100000"), Contains("too large"));
  CHECK_THAT(calc("(1"), Contains("a ')' is missing"));
  CHECK_THAT(call_tool(tools, "calculator", R"({"expr": "1"})").text,
             Contains("Error when executing tool: expected the argument \"expression\""));
}

TEST_CASE("verl's Gsm8kTool as its agent loop calls it: a fresh instance per call", "[tools]") {
  const ToolSet tools = parse_tool_config(kToolsYaml, "tools.yaml");
  const nlohmann::json kwargs = {{"calc_gsm8k_reward", {{"create_kwargs", {{"ground_truth", "72"}}}}}};
  ToolResult right = call_tool(tools, "calc_gsm8k_reward", R"({"answer": "72"})", kwargs);
  CHECK(right.text == "Current parsed answer='72' reward=1.0");
  CHECK(right.reward == 0.0);
  ToolResult hashed = call_tool(tools, "calc_gsm8k_reward", R"({"answer": "#### 72"})", kwargs);
  CHECK(hashed.text == "Current parsed answer='#### 72' reward=1.0");
  ToolResult number = call_tool(tools, "calc_gsm8k_reward", R"({"answer": 72})", kwargs);
  CHECK(number.text == "Current parsed answer='72' reward=1.0");
  ToolResult wrong = call_tool(tools, "calc_gsm8k_reward", R"({"answer": "7.5"})", kwargs);
  CHECK(wrong.text == "Current parsed answer='7.5' reward=0.0");
  CHECK(wrong.reward == Approx(-0.05));
  ToolResult none = call_tool(tools, "calc_gsm8k_reward", R"({})", kwargs);
  CHECK(none.text == "Current parsed answer='' reward=0.0");
  CHECK(call_tool(tools, "calc_gsm8k_reward", R"("72")", kwargs).text ==
        "Error when executing tool: 'str' object has no attribute 'get'");
  CHECK(call_tool(tools, "nope", "{}").text == "Error when executing tool: 'nope'");
}

TEST_CASE("tool replies are cut by characters as verl cuts them", "[tools]") {
  const std::string text = "abcdéfghij";  // 10 code points, 11 bytes
  CHECK(truncate_tool_reply(text, 10, "middle") == text);
  CHECK(truncate_tool_reply(text, 4, "left") == "abcd...(truncated)");
  CHECK(truncate_tool_reply(text, 4, "right") == "(truncated)...ghij");
  CHECK(truncate_tool_reply(text, 5, "middle") == "ab...(truncated)...ij");
  CHECK(truncate_tool_reply(text, 6, "left") == "abcdéf...(truncated)");
  // Python's text[-0:] is the whole text: verl's middle cut at length 1 keeps it all.
  CHECK(truncate_tool_reply(text, 1, "middle") == "...(truncated)..." + text);
  CHECK(truncate_tool_reply("", 0, "left").empty());
}

TEST_CASE("verl's tool config: schemas in the file's order, clear errors", "[tools]") {
  const ToolSet tools = parse_tool_config(kToolsYaml, "tools.yaml");
  CHECK(tools.names() == std::vector<std::string>{"calculator", "calc_gsm8k_reward"});
  CHECK(python_json_dumps(tools.schemas()[0]) ==
        "{\"type\": \"function\", \"function\": {\"name\": \"calculator\", \"description\": \"Evaluates an arithmetic "
        "expression exactly.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"expression\": {\"type\": "
        "\"string\", \"description\": \"e.g. 1234 * 56\"}}, \"required\": [\"expression\"]}}}");
  CHECK_THAT(error_of([] { parse_tool_config("tools:\n  - class_name: my.Missing\n    tool_schema: {}\n", "t.yaml"); }),
             Contains("t.yaml: tools[0].class_name: unknown tool class 'my.Missing'; known: verl.tools.gsm8k_tool"));
  CHECK_THAT(error_of([] {
               parse_tool_config(
                   "tools:\n  - class_name: verlpp.tools.Calculator\n    config: {type: mcp}\n"
                   "    tool_schema: {}\n",
                   "t.yaml");
             }),
             Contains("t.yaml: tools[0].config.type: 'mcp' tools are not supported"));
  CHECK_THAT(error_of([] {
               parse_tool_config("tools:\n  - class_name: verlpp.tools.Calculator\n    tool_schema: {type: function}\n",
                                 "t.yaml");
             }),
             Contains("t.yaml: tools[0]: tool_schema must be"));
  const std::string twice =
      std::string(kToolsYaml) +
      "  - class_name: verlpp.tools.Calculator\n    tool_schema: {function: {name: calculator}}\n";
  CHECK_THAT(error_of([&] { parse_tool_config(twice, "t.yaml"); }),
             Contains("tools[2]: a second tool named 'calculator'"));
  CHECK_THAT(error_of([] { parse_tool_config("tool: []", "t.yaml"); }), Contains("expected a top-level 'tools' list"));
  CHECK_THAT(error_of([] { load_tool_config("/nonexistent/tools.yaml"); }), Contains("/nonexistent/tools.yaml"));
}

TEST_CASE("a tool in a user's shared library, through the C ABI", "[tools]") {
  const std::string entry = std::string("tools:\n  - class_name: verlpp.tools.SharedLibrary\n    config: {path: ") +
                            VERLPP_TEST_CUSTOM_TOOL + ", symbol: echo_tool, max_reply_bytes: 64}\n" +
                            "    tool_schema: {type: function, function: {name: echo}}\n";
  const ToolSet tools = parse_tool_config(entry, "lib.yaml");
  const nlohmann::json kwargs = {{"echo", {{"create_kwargs", {{"k", 1}}}}}};
  ToolResult ok = call_tool(tools, "echo", R"({"b": 2, "a": 1})", kwargs);
  CHECK(ok.text == "echo got {\"b\": 2, \"a\": 1} with {\"k\":1}");
  CHECK(ok.reward == 1.25);
  CHECK(call_tool(tools, "echo", R"({"x": "fail"})").text == "Error when executing tool: cannot run echo");
  ToolResult cut = call_tool(tools, "echo", R"({"x": "long"})");
  CHECK(cut.text == std::string(63, 'x'));
  CHECK_THAT(error_of([] {
               parse_tool_config(
                   "tools:\n  - class_name: verlpp.tools.SharedLibrary\n    config: {path: /nonexistent.so, "
                   "symbol: f}\n    tool_schema: {function: {name: f}}\n",
                   "lib.yaml");
             }),
             Contains("lib.yaml: tools[0].config.path: '/nonexistent.so' cannot be loaded"));
  CHECK_THAT(error_of([] {
               parse_tool_config(
                   std::string("tools:\n  - class_name: verlpp.tools.SharedLibrary\n    config: {path: ") +
                       VERLPP_TEST_CUSTOM_TOOL + ", symbol: nope}\n    tool_schema: {function: {name: f}}\n",
                   "lib.yaml");
             }),
             Contains("has no symbol 'nope'"));
}
