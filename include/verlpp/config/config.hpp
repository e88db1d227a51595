// The run configuration: verl's key names and defaults (its generated ppo_trainer config) as
// one JSON tree, merged with a user's JSON or YAML file and command-line overrides in Hydra's
// grammar (config_override.hpp). Unknown keys are errors that suggest the nearest valid key;
// interpolations (`${a.b}`, `${.sibling}`, `${oc.select:a.b,default}`, `${oc.env:VAR}`) are
// resolved after all overrides, as OmegaConf does for verl; inconsistent values, and keys verlpp
// refuses (config_key_states.hpp), are refused by validate() before any work.
#pragma once

#include <verlpp/config/config_override.hpp>

#include <nlohmann/json.hpp>

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

namespace verlpp::config {

namespace detail {
// How a config value of type T is described in errors ("an integer", "a boolean", ...).
template <class T>
constexpr const char* json_kind() {
  if constexpr (std::is_same_v<T, bool>)
    return "a boolean";
  else if constexpr (std::is_integral_v<T>)
    return "an integer";
  else if constexpr (std::is_floating_point_v<T>)
    return "a number";
  else if constexpr (std::is_convertible_v<T, std::string>)
    return "a string";
  else
    return "a value of another type";
}
}  // namespace detail

class Config {
 public:
  // The full default tree (every key verlpp accepts, with verl's default values).
  static Config defaults();
  // Defaults merged with the config file at `path`: YAML when it is named .yaml or .yml (typed
  // as OmegaConf types YAML, config_yaml.hpp), JSON otherwise. Errors name the file and the key.
  static Config from_file(const std::string& path);
  // Defaults merged with an already-parsed object; `origin` names it in errors. Its Hydra
  // `defaults:` list may name verl's base config (ppo_trainer) and `_self_` only (either order:
  // the later wins); `hydra.searchpath` is accepted (the base is built in), other hydra.* keys
  // and other defaults entries are refused by name. `_target_` keys naming verl's classes
  // (verl.*) are dropped; others are refused.
  static Config from_json(const nlohmann::json& given, const std::string& origin);

  // Applies one override in Hydra's grammar (config_override.hpp): key=value, +key=value,
  // ++key=value, ~key[=value]. A value must fit the type of the value it replaces (an integral
  // float fits an integer; an unquoted number or boolean for a string key is its text; one string
  // for trainer.logger is a one-entry list). Dict values merge into sections; lists replace.
  // Errors name the override and suggest the nearest key.
  void apply_override(const std::string& assignment);
  void apply_overrides(const std::vector<std::string>& assignments);
  // The same for an already-parsed override; `text` names it in errors.
  void apply(const Override& o, const std::string& text);

  // Resolves interpolations (call once, after all overrides): `${a.b}` (absolute), `${.b}` /
  // `${..b}` (relative to the key's section), `${oc.select:key,default}`, `${oc.env:VAR,default}`;
  // a whole-value interpolation keeps the value's type. Other resolvers are refused by name;
  // cycles and unknown keys are errors.
  void resolve();
  // Cross-field checks for a run of `world_size` ranks, `ranks_per_node` per machine (0 = all
  // on one); throws one Error listing every problem found. trainer.nnodes and
  // trainer.n_gpus_per_node, when set, must equal the launched layout.
  void validate(int world_size = 1, int ranks_per_node = 0) const;

  // The value at a dotted path; Error if absent. Records the path as read (read_keys()).
  const nlohmann::json& at(const std::string& dotted) const;
  // The value at a dotted path as T; Error naming the key and the value when it is not one.
  template <class T>
  T get(const std::string& dotted) const {
    const nlohmann::json& value = at(dotted);
    try {
      return value.get<T>();
    } catch (const nlohmann::json::exception&) {
      throw_wrong_type(dotted, value, detail::json_kind<T>());
    }
  }
  // The value at `dotted`, or `fallback` when it is null (verl's "unset").
  template <class T>
  T get_or(const std::string& dotted, T fallback) const {
    return is_null(dotted) ? fallback : get<T>(dotted);
  }
  // True when the value at `dotted` is null (verl's "unset").
  bool is_null(const std::string& dotted) const { return at(dotted).is_null(); }
  void set(const std::string& dotted, nlohmann::json value);

  const nlohmann::json& tree() const { return tree_; }
  // Every dotted path at() (so get, get_or, is_null) has looked up, by this Config and the copies
  // made from it: what the tests use to check that every key with an effect has a reader.
  std::set<std::string> read_keys() const;
  // Pretty JSON of the whole tree.
  std::string dump() const { return tree_.dump(2); }

 private:
  struct ReadLog {
    std::mutex mutex;
    std::set<std::string> keys;
  };
  explicit Config(nlohmann::json tree) : tree_(std::move(tree)), reads_(std::make_shared<ReadLog>()) {}
  [[noreturn]] static void throw_wrong_type(const std::string& dotted, const nlohmann::json& value, const char* wanted);
  nlohmann::json tree_;
  std::shared_ptr<ReadLog> reads_;
};

// True for a path named .yaml or .yml (read as YAML by Config::from_file).
bool is_yaml_file_name(const std::string& path);
// True when a command's first argument is a config file rather than an override (no '=', and
// not ~key or +key).
bool is_config_file_argument(const std::string& arg);

// The valid key closest to `key` (edit distance over dotted paths), for "did you mean" hints.
std::string nearest_config_key(const std::string& key);

}  // namespace verlpp::config
