// Which agent loop runs a dataset row: its agent_name column, or
// actor_rollout_ref.rollout.agent.default_agent_loop, looked up in AgentLoopNames. verl's two
// built-in names are always known (single_turn_agent, tool_agent); verl's agent_loop_config_path
// YAML adds names for them:
//   - name: my_tool_agent
//     _target_: verl.experimental.agent_loop.tool_agent_loop.ToolAgentLoop
// An entry whose _target_ is another (Python) class is an Error naming the entry: verlpp runs no
// Python, so a custom agent loop is refused at start rather than skipped.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace verlpp::agent {

class AgentLoopNames {
 public:
  // single_turn_agent and tool_agent.
  AgentLoopNames();
  // Adds the entries of verl's agent loop config text; `origin` names it in errors (a missing or
  // duplicate name, an unknown _target_).
  void add_config(const std::string& yaml_text, const std::string& origin);
  // add_config of the file at `path`.
  void add_config_file(const std::string& path);
  // The built-in loop (kSingleTurnAgent or kToolAgent) that `name` runs; an Error at `where`
  // listing the known names otherwise.
  const std::string& loop_of(const std::string& name, const std::string& where) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, std::string> loops_;  // name -> built-in loop
};

}  // namespace verlpp::agent
