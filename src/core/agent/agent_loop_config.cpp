#include <verlpp/agent/agent_loop_config.hpp>

#include "../util/input_file.hpp"

#include <verlpp/agent/tool_agent_loop.hpp>
#include <verlpp/config/config_yaml.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

namespace verlpp::agent {
namespace {

// verl's classes of the two loops verlpp implements, by their _target_ paths.
const std::map<std::string, std::string>& verl_classes() {
  static const std::map<std::string, std::string> classes = {
      {"verl.experimental.agent_loop.single_turn_agent_loop.SingleTurnAgentLoop", kSingleTurnAgent},
      {"verl.experimental.agent_loop.SingleTurnAgentLoop", kSingleTurnAgent},
      {"verl.experimental.agent_loop.tool_agent_loop.ToolAgentLoop", kToolAgent},
      {"verl.experimental.agent_loop.ToolAgentLoop", kToolAgent},
  };
  return classes;
}

}  // namespace

AgentLoopNames::AgentLoopNames() : loops_{{kSingleTurnAgent, kSingleTurnAgent}, {kToolAgent, kToolAgent}} {}

void AgentLoopNames::add_config(const std::string& yaml_text, const std::string& origin) {
  const nlohmann::ordered_json document = config::yaml_to_ordered_json(yaml_text, origin);
  VERLPP_CHECK(document.is_array(), "{}: expected a list of agent loops (- name: ..., _target_: ...)", origin);
  std::map<std::string, std::string> added;
  for (size_t i = 0; i < document.size(); ++i) {
    const std::string where = fmt::format("{}: [{}]", origin, i);
    const auto& entry = document[i];
    VERLPP_CHECK(entry.is_object() && entry.contains("name") && entry["name"].is_string(),
                 "{}: expected a mapping with a string 'name' and a '_target_'", where);
    const std::string name = entry["name"].get<std::string>();
    VERLPP_CHECK(entry.contains("_target_") && entry["_target_"].is_string(), "{} ({}): '_target_' is missing", where,
                 name);
    const std::string target = entry["_target_"].get<std::string>();
    const auto known = verl_classes().find(target);
    if (known == verl_classes().end()) {
      std::vector<std::string> classes;
      for (const auto& [path, loop] : verl_classes()) classes.push_back(path);
      throw Error(where, fmt::format("agent loop '{}': _target_ '{}' is a Python class verlpp cannot run (it runs {})",
                                     name, target, join(classes, ", ")));
    }
    VERLPP_CHECK(added.count(name) == 0, "{}: a second agent loop named '{}'", where, name);
    added[name] = known->second;
  }
  for (auto& [name, loop] : added) loops_[name] = loop;
}

void AgentLoopNames::add_config_file(const std::string& path) {
  add_config(files::read_input(path, "agent loop config"), path);
}

const std::string& AgentLoopNames::loop_of(const std::string& name, const std::string& where) const {
  const auto found = loops_.find(name);
  if (found == loops_.end())
    throw Error(where, fmt::format("'{}' is not a known agent loop (known: {})", name, join(names(), ", ")));
  return found->second;
}

std::vector<std::string> AgentLoopNames::names() const {
  std::vector<std::string> out;
  for (const auto& [name, loop] : loops_) out.push_back(name);
  return out;
}

}  // namespace verlpp::agent
