// What each key of the config tree does in verlpp, decided in one table (config_key_states.cpp).
// A key has its effect (a reader in RunSettings, validate or the demo reads it), or is accepted
// with no effect (a verl setting for FSDP, vLLM, Ray, ... that verlpp has no use for: a run lists
// the ones changed from the default at start), or is refused when set to anything but its
// default (a verl feature verlpp does not have, where ignoring it would mislead).
#pragma once

#include <verlpp/config/config.hpp>

#include <string>
#include <vector>

namespace verlpp::config {

enum class KeyState { effect, no_effect, refused };

// One row of the table. `pattern` is a dotted path whose components match literally, `*` matches
// one component and `**` any number (e.g. "**._target_"); a pattern also matches every key
// below it. The first row that matches a key decides; a key no row matches has its effect.
struct KeyRule {
  const char* pattern;
  KeyState state;
  const char* reason;  // why it has no effect / why it is refused (empty for effect)
};

// The table, in order.
const std::vector<KeyRule>& config_key_rules();

// The rule deciding `dotted` (a key of the default tree), or nullptr: the key has its effect.
const KeyRule* config_key_rule(const std::string& dotted);
inline KeyState config_key_state(const std::string& dotted) {
  const KeyRule* rule = config_key_rule(dotted);
  return rule == nullptr ? KeyState::effect : rule->state;
}

// A key whose value differs from its default, with the rule that decides it.
struct ChangedKey {
  std::string key;
  nlohmann::json value;
  KeyState state;
  std::string reason;
};

// The leaves of `config` (resolved) whose value is not the default's. A key whose default is a
// `${...}` reference counts as changed only when its value differs from what that reference
// gives in `config` (so following a changed key is not changing it). Leaves that are free-form
// sections (default `{}`) compare as a whole.
std::vector<ChangedKey> changed_config_keys(const Config& config);

// The no-effect keys `config` changes, as the block `verlpp train` prints at start ("" if none).
std::string no_effect_notice(const Config& config);

// One problem line per refused key that `config` changes ("key = value: reason ..."); validate()
// adds these to its list.
std::vector<std::string> refused_key_problems(const Config& config);

// Every leaf of `config` as "key = value", marked "[no effect: why]" or "[refused unless left at
// its default: why]" (`verlpp config --keys`).
std::string describe_config_keys(const Config& config);

// Every leaf path of the default tree, in the tree's order.
std::vector<std::string> default_leaf_keys();

}  // namespace verlpp::config
