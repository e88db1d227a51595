// verl's tool config file (actor_rollout_ref.rollout.multi_turn.tool_config_path), read as it is:
//   tools:
//     - class_name: verl.tools.gsm8k_tool.Gsm8kTool
//       config: {type: native}
//       tool_schema: {type: function, function: {name: calc_gsm8k_reward, description: ..., parameters: ...}}
// Each class_name is looked up in tool_classes(); an unknown one, a config type other than
// "native" (verl's MCP tools) or two tools of one name are Errors naming the entry.
#pragma once

#include <verlpp/agent/tool.hpp>

#include <memory>
#include <string>
#include <vector>

namespace verlpp::agent {

// The tools of one config, in its order.
class ToolSet {
 public:
  ToolSet() = default;
  // Adds a tool; a second tool of the same name is an Error.
  void add(std::shared_ptr<const Tool> tool);
  // The tool called `name`, or null.
  const Tool* find(const std::string& name) const;
  // Every tool's schema, in order (what the chat template renders as `tools`).
  std::vector<nlohmann::ordered_json> schemas() const;
  std::vector<std::string> names() const;
  bool empty() const { return tools_.empty(); }
  size_t size() const { return tools_.size(); }

 private:
  std::vector<std::shared_ptr<const Tool>> tools_;
};

// The tools of a config file's text; `origin` names it in errors.
ToolSet parse_tool_config(const std::string& yaml_text, const std::string& origin);
// The tools of the config file at `path`.
ToolSet load_tool_config(const std::string& path);

}  // namespace verlpp::agent
