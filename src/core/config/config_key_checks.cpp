// Applying the key-state table (config_key_states.cpp) to a config: which rule decides a key,
// which keys a config changes from the defaults, the start-up notice of no-effect keys and the
// problems for refused ones. Reads go to the JSON tree directly, never through Config::at, so
// they do not count as a reader having read the key.
#include <verlpp/config/config_key_states.hpp>

#include <verlpp/core/strings.hpp>

#include <fmt/format.h>

namespace verlpp::config {
namespace {

using json = nlohmann::json;

std::vector<std::string> split_dots(const std::string& dotted) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = dotted.find('.', start);
    parts.push_back(dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

// Whether pattern[pi..] matches key[ki..]; a pattern used up matches the keys below it too.
bool matches(const std::vector<std::string>& pattern, size_t pi, const std::vector<std::string>& key, size_t ki) {
  if (pi == pattern.size()) return true;
  if (pattern[pi] == "**") {
    for (size_t k = ki; k <= key.size(); ++k)
      if (matches(pattern, pi + 1, key, k)) return true;
    return false;
  }
  if (ki == key.size()) return false;
  if (pattern[pi] != "*" && pattern[pi] != key[ki]) return false;
  return matches(pattern, pi + 1, key, ki + 1);
}

const json* find_in(const json& root, const std::vector<std::string>& parts) {
  const json* node = &root;
  for (const auto& part : parts) {
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &(*node)[part];
  }
  return node;
}

void collect_leaves(const json& node, const std::string& prefix, std::vector<std::string>& out) {
  if (!node.is_object() || node.empty()) {
    out.push_back(prefix);
    return;
  }
  for (auto it = node.begin(); it != node.end(); ++it)
    collect_leaves(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
}

bool is_reference(const json& v) { return v.is_string() && v.get<std::string>().find("${") != std::string::npos; }

const char* state_word(KeyState s) {
  return s == KeyState::no_effect ? "no effect"
         : s == KeyState::refused ? "refused unless left at its default"
                                  : "effect";
}

}  // namespace

const KeyRule* config_key_rule(const std::string& dotted) {
  const std::vector<std::string> key = split_dots(dotted);
  for (const KeyRule& rule : config_key_rules()) {
    if (!matches(split_dots(rule.pattern), 0, key, 0)) continue;
    return rule.state == KeyState::effect ? nullptr : &rule;
  }
  return nullptr;
}

std::vector<std::string> default_leaf_keys() {
  std::vector<std::string> out;
  collect_leaves(Config::defaults().tree(), "", out);
  return out;
}

std::vector<ChangedKey> changed_config_keys(const Config& config) {
  const Config raw_defaults = Config::defaults();
  Config resolved_defaults = raw_defaults;
  resolved_defaults.resolve();
  std::vector<ChangedKey> out;
  for (const std::string& key : default_leaf_keys()) {
    const std::vector<std::string> parts = split_dots(key);
    const json* value = find_in(config.tree(), parts);
    if (value == nullptr) continue;  // removed from this config
    if (*value == *find_in(resolved_defaults.tree(), parts)) continue;
    const json& raw = *find_in(raw_defaults.tree(), parts);
    if (is_reference(raw)) {
      // What the default reference gives with this config's values: following it is no change.
      Config followed = config;
      followed.set(key, raw);
      followed.resolve();
      if (*value == *find_in(followed.tree(), parts)) continue;
    }
    const KeyRule* rule = config_key_rule(key);
    out.push_back({key, *value, rule == nullptr ? KeyState::effect : rule->state, rule == nullptr ? "" : rule->reason});
  }
  return out;
}

std::string no_effect_notice(const Config& config) {
  std::vector<std::string> lines;
  for (const ChangedKey& k : changed_config_keys(config))
    if (k.state == KeyState::no_effect) lines.push_back(fmt::format("  {} = {}: {}", k.key, k.value.dump(), k.reason));
  if (lines.empty()) return "";
  return fmt::format("config: {} key(s) set here have no effect in verlpp:\n{}\n", lines.size(), join(lines, "\n"));
}

std::vector<std::string> refused_key_problems(const Config& config) {
  std::vector<std::string> out;
  const Config defaults = Config::defaults();
  for (const ChangedKey& k : changed_config_keys(config)) {
    if (k.state != KeyState::refused) continue;
    const json* raw = find_in(defaults.tree(), split_dots(k.key));
    out.push_back(fmt::format("{} = {} is refused: {}; only its default {} is accepted", k.key, k.value.dump(),
                              k.reason, raw->dump()));
  }
  return out;
}

std::string describe_config_keys(const Config& config) {
  std::string out;
  for (const std::string& key : default_leaf_keys()) {
    const json* value = find_in(config.tree(), split_dots(key));
    if (value == nullptr) continue;
    const KeyRule* rule = config_key_rule(key);
    out += fmt::format("{} = {}", key, value->dump());
    if (rule != nullptr) out += fmt::format("  [{}: {}]", state_word(rule->state), rule->reason);
    out += "\n";
  }
  return out;
}

}  // namespace verlpp::config
