// Tools: what a model's tool call runs. A tool is built from one entry of a verl tool config
// (`class_name`, `config`, `tool_schema`) by the tool class its class_name names in
// tool_classes(); verl's class names map to the built-in C++ tools where one exists, and a
// program (or a shared library) registers its own in one line:
//   static const bool registered = agent::tool_classes().add("my.pkg.MyTool", make_my_tool);
// A call is stateless from the loop's side, as verl's agent loop makes it: each call creates the
// tool's instance from the sample's create_kwargs, executes once and releases it.
#pragma once

#include <verlpp/core/registry.hpp>

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>

namespace verlpp::agent {

// What one call returns: the text the model reads and the tool's reward for the call.
struct ToolResult {
  std::string text;
  double reward = 0.0;
};

class Tool {
 public:
  virtual ~Tool() = default;
  // The function schema ({"type": "function", "function": {"name", "description", "parameters"}})
  // in the config's key order: the chat template renders it as written.
  const nlohmann::ordered_json& schema() const { return schema_; }
  // schema.function.name: what a call names.
  const std::string& name() const { return name_; }
  // Runs one call with the call's `arguments` and the sample's `create_kwargs`
  // (extra_info.tools_kwargs[name].create_kwargs, {} when absent). Called from several threads at
  // once. A verlpp::Error (or any std::exception) becomes the model's text
  // "Error when executing tool: <what>", as verl turns a tool's exception into text.
  virtual ToolResult call(const nlohmann::ordered_json& arguments, const nlohmann::json& create_kwargs) const = 0;

 protected:
  // Checks that `schema` names its function; Error naming `where` otherwise.
  Tool(nlohmann::ordered_json schema, const std::string& where);

 private:
  nlohmann::ordered_json schema_;
  std::string name_;
};

// Builds a tool from its config entry's `config` mapping and `tool_schema`; `where` names the
// entry in errors ("tools.yaml: tools[0]").
using ToolClass = std::function<std::unique_ptr<Tool>(const nlohmann::json& config,
                                                      const nlohmann::ordered_json& schema, const std::string& where)>;

// The tool classes by class_name: verl.tools.gsm8k_tool.Gsm8kTool, verlpp.tools.Calculator,
// verlpp.tools.Sandbox and what programs register.
Registry<ToolClass>& tool_classes();

// Whether verlpp.tools.Sandbox's children get their own network namespace on this host (it needs
// CAP_SYS_ADMIN or unprivileged user namespaces; probed once, and said once in the log when not).
bool sandbox_isolates_network();

// Python's str() of a JSON value as a tool receives it from json.loads (str 'a' -> a, 3 -> 3,
// 2.5 -> 2.5, true -> True, null -> None, lists and dicts in Python's repr).
std::string python_str(const nlohmann::ordered_json& value);
// Python's repr() of the same ('a' -> 'a' in quotes).
std::string python_repr(const nlohmann::ordered_json& value);

}  // namespace verlpp::agent
