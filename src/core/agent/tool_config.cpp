// Reading verl's tool config: the YAML keeps its key order (a schema is rendered as written).
#include <verlpp/agent/tool_config.hpp>

#include "../util/input_file.hpp"

#include <verlpp/config/config_yaml.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

namespace verlpp::agent {

void ToolSet::add(std::shared_ptr<const Tool> tool) {
  VERLPP_CHECK(tool != nullptr, "tool set: a null tool");
  VERLPP_CHECK(find(tool->name()) == nullptr, "tool set: two tools are named '{}' (a call could not tell them apart)",
               tool->name());
  tools_.push_back(std::move(tool));
}

const Tool* ToolSet::find(const std::string& name) const {
  for (const auto& tool : tools_)
    if (tool->name() == name) return tool.get();
  return nullptr;
}

std::vector<nlohmann::ordered_json> ToolSet::schemas() const {
  std::vector<nlohmann::ordered_json> out;
  for (const auto& tool : tools_) out.push_back(tool->schema());
  return out;
}

std::vector<std::string> ToolSet::names() const {
  std::vector<std::string> out;
  for (const auto& tool : tools_) out.push_back(tool->name());
  return out;
}

ToolSet parse_tool_config(const std::string& yaml_text, const std::string& origin) {
  const nlohmann::ordered_json document = config::yaml_to_ordered_json(yaml_text, origin);
  VERLPP_CHECK(document.is_object() && document.contains("tools") && document["tools"].is_array(),
               "{}: expected a top-level 'tools' list (verl's tool config: tools: - class_name, config, tool_schema)",
               origin);
  ToolSet set;
  const auto& tools = document["tools"];
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = fmt::format("{}: tools[{}]", origin, i);
    const auto& entry = tools[i];
    VERLPP_CHECK(entry.is_object(), "{}: expected a mapping with class_name, config and tool_schema", where);
    VERLPP_CHECK(entry.contains("class_name") && entry["class_name"].is_string(),
                 "{}: 'class_name' is missing or not a string", where);
    const std::string class_name = entry["class_name"].get<std::string>();
    const nlohmann::json config = entry.contains("config") && !entry["config"].is_null()
                                      ? nlohmann::json(entry["config"])
                                      : nlohmann::json::object();
    VERLPP_CHECK(config.is_object(), "{}.config: expected a mapping", where);
    const std::string type = config.value("type", std::string("native"));
    VERLPP_CHECK(type == "native", "{}.config.type: '{}' tools are not supported (only 'native' tools run here)", where,
                 type);
    VERLPP_CHECK(entry.contains("tool_schema"), "{}: 'tool_schema' is missing (verl's OpenAI function schema)", where);
    const std::optional<ToolClass> make = tool_classes().find(class_name);
    if (!make) throw tool_classes().unknown(class_name, where + ".class_name");
    std::unique_ptr<Tool> tool = (*make)(config, entry["tool_schema"], where);
    VERLPP_CHECK(tool != nullptr, "{}: the tool class '{}' built no tool", where, class_name);
    VERLPP_CHECK(set.find(tool->name()) == nullptr, "{}: a second tool named '{}'", where, tool->name());
    set.add(std::move(tool));
  }
  return set;
}

ToolSet load_tool_config(const std::string& path) {
  return parse_tool_config(files::read_input(path, "tool config"), path);
}

}  // namespace verlpp::agent
