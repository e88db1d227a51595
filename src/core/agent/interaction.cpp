// The interaction-class registry with the built-ins, InteractionSet, and verl's interaction
// config file (verl.interactions.utils.interaction_registry's reading of it).
#include <verlpp/agent/interaction.hpp>

#include "../util/input_file.hpp"
#include "builtin_interactions.hpp"

#include <verlpp/config/config_yaml.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include <cctype>

namespace verlpp::agent {
namespace {

void add_builtin_interactions(Registry<InteractionClass>& registry) {
  registry.add("verl.interactions.gsm8k_interaction.Gsm8kInteraction", make_gsm8k_interaction);
}

}  // namespace

Registry<InteractionClass>& interaction_classes() {
  static Registry<InteractionClass> registry("interaction class", add_builtin_interactions);
  return registry;
}

void InteractionSet::add(std::shared_ptr<const Interaction> interaction) {
  VERLPP_CHECK(interaction != nullptr, "interaction set: a null interaction");
  VERLPP_CHECK(find(interaction->name()) == nullptr, "interaction set: two interactions are named '{}'",
               interaction->name());
  interactions_.push_back(std::move(interaction));
}

const Interaction* InteractionSet::find(const std::string& name) const {
  for (const auto& interaction : interactions_)
    if (interaction->name() == name) return interaction.get();
  return nullptr;
}

std::vector<std::string> InteractionSet::names() const {
  std::vector<std::string> out;
  for (const auto& interaction : interactions_) out.push_back(interaction->name());
  return out;
}

std::string default_interaction_name(const std::string& class_name) {
  const size_t dot = class_name.rfind('.');
  std::string name = dot == std::string::npos ? class_name : class_name.substr(dot + 1);
  const std::string suffix = "Interaction";
  if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    name.resize(name.size() - suffix.size());
  for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

InteractionSet parse_interaction_config(const std::string& yaml_text, const std::string& origin) {
  const nlohmann::json document = config::yaml_to_json(yaml_text, origin);
  VERLPP_CHECK(document.is_object() && document.contains("interaction") && document["interaction"].is_array(),
               "{}: expected a top-level 'interaction' list (verl's interaction config: interaction: - name, "
               "class_name, config)",
               origin);
  InteractionSet set;
  const auto& entries = document["interaction"];
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string where = fmt::format("{}: interaction[{}]", origin, i);
    const auto& entry = entries[i];
    VERLPP_CHECK(entry.is_object(), "{}: expected a mapping with name, class_name and config", where);
    VERLPP_CHECK(entry.contains("class_name") && entry["class_name"].is_string(),
                 "{}: 'class_name' is missing or not a string", where);
    const std::string class_name = entry["class_name"].get<std::string>();
    std::string name = default_interaction_name(class_name);
    if (entry.contains("name") && !entry["name"].is_null()) {
      VERLPP_CHECK(entry["name"].is_string() && !entry["name"].get<std::string>().empty(),
                   "{}.name: expected a non-empty string, got {}", where, entry["name"].dump());
      name = entry["name"].get<std::string>();
    }
    const nlohmann::json config =
        entry.contains("config") && !entry["config"].is_null() ? entry["config"] : nlohmann::json::object();
    VERLPP_CHECK(config.is_object(), "{}.config: expected a mapping", where);
    VERLPP_CHECK(set.find(name) == nullptr,
                 "{}: a second interaction named '{}' (each interaction needs a name of its own)", where, name);
    const std::optional<InteractionClass> make = interaction_classes().find(class_name);
    if (!make) throw interaction_classes().unknown(class_name, where + ".class_name");
    std::unique_ptr<Interaction> interaction = (*make)(name, config, where);
    VERLPP_CHECK(interaction != nullptr, "{}: the interaction class '{}' built nothing", where, class_name);
    set.add(std::move(interaction));
  }
  VERLPP_CHECK(!set.empty(), "{}: the 'interaction' list is empty", origin);
  return set;
}

InteractionSet load_interaction_config(const std::string& path) {
  return parse_interaction_config(files::read_input(path, "interaction config"), path);
}

const Interaction& interaction_of(const InteractionSet& interactions, const nlohmann::json& kwargs,
                                  const std::string& where) {
  VERLPP_CHECK(kwargs.is_object() && kwargs.contains("name") && kwargs["name"].is_string(),
               "{}: extra_info.interaction_kwargs needs a string 'name' naming the interaction (configured: {}), "
               "got {}",
               where, join(interactions.names(), ", "), kwargs.is_null() ? std::string("none") : kwargs.dump());
  const std::string name = kwargs["name"].get<std::string>();
  const Interaction* interaction = interactions.find(name);
  VERLPP_CHECK(interaction != nullptr,
               "{}: interaction_kwargs.name '{}' names no configured interaction (configured: {})", where, name,
               join(interactions.names(), ", "));
  return *interaction;
}

}  // namespace verlpp::agent
