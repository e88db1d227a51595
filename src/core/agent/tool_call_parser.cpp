// The hermes format's spans are found by hand rather than with std::regex: the pattern is two
// fixed tags with the shortest text between them, and std::regex recurses per character (a long
// turn would overflow the stack).
#include <verlpp/agent/tool_call_parser.hpp>

#include <verlpp/core/python_json.hpp>

#include <nlohmann/json.hpp>

namespace verlpp::agent {
namespace {

constexpr const char* kOpen = "<tool_call>";
constexpr const char* kClose = "</tool_call>";

}  // namespace

const std::vector<std::string>& tool_call_formats() {
  static const std::vector<std::string> formats = {"hermes"};
  return formats;
}

ParsedTurn parse_hermes_tool_calls(const std::string& text) {
  ParsedTurn out;
  const std::string open = kOpen, close = kClose;
  size_t from = 0;
  auto malformed = [&](const std::string& why) {
    if (out.num_malformed++ == 0) out.first_malformed = why;
  };
  while (true) {
    const size_t begin = text.find(open, from);
    const size_t end = begin == std::string::npos ? std::string::npos : text.find(close, begin + open.size());
    if (end == std::string::npos) {
      out.content += text.substr(from);
      break;
    }
    out.content += text.substr(from, begin - from);
    const std::string body = text.substr(begin + open.size(), end - begin - open.size());
    from = end + close.size();
    nlohmann::ordered_json call;
    try {
      call = nlohmann::ordered_json::parse(body);
    } catch (const nlohmann::json::exception& e) {
      malformed(std::string("not JSON: ") + e.what());
      continue;
    }
    if (!call.is_object() || !call.contains("name") || !call.contains("arguments")) {
      malformed("not an object with \"name\" and \"arguments\"");
      continue;
    }
    if (!call["name"].is_string()) {  // verl's FunctionCall takes a string name only
      malformed("\"name\" is not a string");
      continue;
    }
    out.calls.push_back({call["name"].get<std::string>(), python_json_dumps(call["arguments"])});
  }
  return out;
}

}  // namespace verlpp::agent
