// The Tool base, the tool-class registry with the built-ins, and Python's str()/repr() of the
// values a tool receives (verl's tools format them into their replies).
#include <verlpp/agent/tool.hpp>

#include "builtin_tools.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/core/python_json.hpp>

namespace verlpp::agent {
namespace {

void add_builtin_tools(Registry<ToolClass>& registry) {
  registry.add("verl.tools.gsm8k_tool.Gsm8kTool", make_gsm8k_tool);
  registry.add("verlpp.tools.Calculator", make_calculator_tool);
  registry.add("verlpp.tools.Sandbox", make_sandbox_tool);
  registry.add("verlpp.tools.SharedLibrary", make_library_tool);
}

// Python's repr of a str: single quotes unless the text holds ' and no ", the usual escapes,
// \xNN for the control characters Python does not print.
std::string repr_string(const std::string& text) {
  const bool has_single = text.find('\'') != std::string::npos, has_double = text.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\\' || c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == 0xC2 && i + 1 < text.size() &&
               (static_cast<unsigned char>(text[i + 1]) <= 0xA0 || static_cast<unsigned char>(text[i + 1]) == 0xAD)) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[++i]));  // U+0080..U+00A0, U+00AD
    } else {
      out += char(c);
    }
  }
  return out + quote;
}

std::string python_text(const nlohmann::ordered_json& value, bool repr) {
  switch (value.type()) {
    case nlohmann::ordered_json::value_t::string:
      return repr ? repr_string(value.get<std::string>()) : value.get<std::string>();
    case nlohmann::ordered_json::value_t::boolean:
      return value.get<bool>() ? "True" : "False";
    case nlohmann::ordered_json::value_t::null:
      return "None";
    case nlohmann::ordered_json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + python_text(value[i], true);
      return out + "]";
    }
    case nlohmann::ordered_json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (auto it = value.begin(); it != value.end(); ++it) {
        out += (first ? "" : ", ") + repr_string(it.key()) + ": " + python_text(it.value(), true);
        first = false;
      }
      return out + "}";
    }
    default:  // numbers: json.dumps writes them as Python's repr does
      return python_json_dumps(value);
  }
}

}  // namespace

Tool::Tool(nlohmann::ordered_json schema, const std::string& where) : schema_(std::move(schema)) {
  const bool named = schema_.is_object() && schema_.contains("function") && schema_["function"].is_object() &&
                     schema_["function"].contains("name") && schema_["function"]["name"].is_string() &&
                     !schema_["function"]["name"].get<std::string>().empty();
  VERLPP_CHECK(named, "{}: tool_schema must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got {}",
               where, python_json_dumps(schema_).substr(0, 160));
  name_ = schema_["function"]["name"].get<std::string>();
}

Registry<ToolClass>& tool_classes() {
  static Registry<ToolClass> registry("tool class", add_builtin_tools);
  return registry;
}

std::string python_str(const nlohmann::ordered_json& value) { return python_text(value, false); }
std::string python_repr(const nlohmann::ordered_json& value) { return python_text(value, true); }

}  // namespace verlpp::agent
