// The sandboxed command tool against hostile code: each case ends as the tool's text within its
// limits (time measured around the call), and the test process goes on.
#include <verlpp/agent/tool_agent_loop.hpp>
#include <verlpp/agent/tool_config.hpp>

#include "../error_of.hpp"

#include <catch2/catch.hpp>

#include <chrono>

using namespace verlpp;
using namespace verlpp::agent;
using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;

namespace {

ToolSet sandbox(const std::string& config) {
  return parse_tool_config("tools:\n  - class_name: verlpp.tools.Sandbox\n    config: {type: native" + config +
                               "}\n    tool_schema: {type: function, function: {name: run, parameters: {}}}\n",
                           "sandbox.yaml");
}

struct Timed {
  std::string text;
  double seconds = 0;
};

Timed run(const ToolSet& tools, const std::string& code) {
  const auto start = std::chrono::steady_clock::now();
  AgentLoopSettings settings;
  settings.max_tool_response_length = 1 << 20;
  ToolResult r = run_tool_call(tools, ToolCall{"run", nlohmann::json{{"code", code}}.dump()}, {}, settings);
  return {r.text, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

}  // namespace

TEST_CASE("sandbox: output, exit status and errors are the reply", "[sandbox]") {
  const ToolSet tools = sandbox("");
  CHECK(run(tools, "echo hello; echo err >&2").text == "hello\nerr\n");
  CHECK(run(tools, "printf 'no newline'; exit 3").text == "no newline\n[exit code 3]");
  CHECK(run(tools, "pwd | grep -c verlpp-sandbox; ls | wc -l").text == "1\n0\n");  // its own empty directory
  CHECK(run(tools, "kill -SEGV $$").text == "[killed by SIGSEGV]");
  CHECK_THAT(run_tool_call(tools, ToolCall{"run", R"({"script": "ls"})"}, {}, AgentLoopSettings()).text,
             Contains("Error when executing tool: expected the argument \"code\""));
}

TEST_CASE("sandbox: an endless loop, a fork bomb, 10 GiB, a network connect, 100 MB of output", "[sandbox]") {
  const ToolSet tools = sandbox(", timeout_s: 2, memory_mb: 256, max_processes: 32, max_output_bytes: 1000");
  const Timed loop = run(tools, "while :; do :; done");
  CHECK(loop.text == "[timed out after 2 s: killed]");
  CHECK(loop.seconds < 4.0);

  const Timed bomb = run(tools, "f() { f | f & }; f; sleep 100");
  CHECK_THAT(bomb.text, EndsWith("killed]"));  // the timeout, or its fork errors past the output cap
  CHECK(bomb.seconds < 4.0);

  const Timed big = run(tools, "x=$(head -c 10737418240 /dev/zero | tr '\\0' a); echo allocated ${#x}");
  CHECK_THAT(big.text, !Contains("allocated"));
  CHECK_THAT(big.text, Contains("["));  // an exit code, a kill or the timeout, said
  CHECK(big.seconds < 4.0);

  const ToolSet bash = sandbox(", command: [/bin/bash, -c], timeout_s: 2");
  const Timed net = run(bash, "exec 3<>/dev/tcp/10.1.2.3/80 && echo connected");
  CHECK_THAT(net.text, !Contains("connected"));
  if (sandbox_isolates_network()) CHECK_THAT(net.text, Contains("Network is unreachable"));
  CHECK(net.seconds < 4.0);

  const Timed flood = run(tools, "head -c 100000000 /dev/zero | tr '\\0' a");
  CHECK(flood.text == std::string(1000, 'a') + "\n[output cut at 1000 bytes: killed]");
  CHECK(flood.seconds < 4.0);

  CHECK(run(tools, "echo still here").text == "still here\n");  // and the process goes on
}

TEST_CASE("sandbox: its config is checked, naming the key", "[sandbox]") {
  using verlpp::test::error_of;
  CHECK_THAT(error_of([] { sandbox(", timeout_s: -1"); }),
             Contains("sandbox.yaml: tools[0].config.timeout_s: expected a positive number"));
  CHECK_THAT(error_of([] { sandbox(", memory_mb: 0"); }),
             Contains("config.memory_mb: expected a positive integer, got 0"));
  CHECK_THAT(error_of([] { sandbox(", command: [sh, -c]"); }),
             Contains("the program must be an absolute path, got 'sh'"));
  CHECK_THAT(error_of([] { sandbox(", network: wide"); }), Contains("config.network: expected none or host"));
  const ToolSet missing = sandbox(", command: [/nonexistent/python3, -c]");
  CHECK(run(missing, "print(1)").text == "sandbox: /nonexistent/python3: No such file or directory\n[exit code 127]");
}
