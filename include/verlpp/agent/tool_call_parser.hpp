// Tool calls in a model's turn, read as verl's hermes parser reads them (multi_turn.format =
// "hermes", the <tool_call> format of the Qwen2.5 and Qwen3 templates): every
// <tool_call>...</tool_call> span of the decoded turn (the shortest one from each opening tag,
// across lines) holds a JSON object {"name": ..., "arguments": ...}; a span that is not valid
// JSON or lacks either field is skipped and counted, never an error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace verlpp::agent {

// One call the model asked for.
struct ToolCall {
  std::string name;
  std::string arguments;  // the "arguments" value as JSON text (json.dumps, ensure_ascii=False)
};

// What a turn holds.
struct ParsedTurn {
  std::string content;          // the text with every <tool_call> span removed
  std::vector<ToolCall> calls;  // in the order they were written
  int64_t num_malformed = 0;    // spans skipped: not JSON, not an object, no string name or no arguments
  std::string first_malformed;  // why the first skipped span was skipped ("" = none)
};

// The hermes reading of `text` (a decoded assistant turn).
ParsedTurn parse_hermes_tool_calls(const std::string& text);

// The tool-call formats multi_turn.format names, for errors ("hermes").
const std::vector<std::string>& tool_call_formats();

}  // namespace verlpp::agent
