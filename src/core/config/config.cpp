// Config: defaults, merging a user's file, dotted overrides, `${...}` resolution and lookups.
// Merging is strict: every key must exist in the defaults (except inside free-form objects,
// whose default is `{}`, e.g. model.override_config) and keep the default's type.
#include "../util/input_file.hpp"
#include "config_parts.hpp"
#include <verlpp/core/json_limits.hpp>
#include <verlpp/config/config.hpp>
#include <verlpp/config/config_yaml.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

namespace verlpp::config {
namespace detail {
const char* default_config_text();
}  // namespace detail

namespace {

using json = nlohmann::json;

const json& default_tree() {
  static const json tree = json::parse(detail::default_config_text());
  return tree;
}

void collect_paths(const json& node, const std::string& prefix, std::vector<std::string>& out) {
  if (!node.is_object()) return;
  for (auto it = node.begin(); it != node.end(); ++it) {
    std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    out.push_back(path);
    collect_paths(it.value(), path, out);
  }
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

bool is_reference(const json& v) { return v.is_string() && v.get<std::string>().find("${") != std::string::npos; }

bool is_free_form(const json& default_value) { return default_value.is_object() && default_value.empty(); }

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "a list";
    case json::value_t::object:
      return "an object";
    default:
      return "a value";
  }
}

// verl keys that take one string where the default is a list (verl wraps it: trainer.logger)
// or take a path or a list of paths (the data files).
bool string_or_list_key(const std::string& path) {
  static const std::set<std::string> keys = {"trainer.logger", "data.train_files", "data.val_files", "sft.train_files"};
  return keys.count(path) != 0;
}

// Checks that `given` may replace `current` (the value at `path`) and returns it as stored: an
// integral number for an integer default, [s] for one string where verl takes a list of them.
// Throws naming `where`.
json fit_type(const json& current, json given, const std::string& path, const std::string& where) {
  if (current.is_null() || given.is_null() || is_reference(current) || is_reference(given)) return given;
  if (string_or_list_key(path)) {
    if (current.is_array() && given.is_string()) return json::array({given});
    if ((current.is_string() || current.is_array()) && (given.is_string() || given.is_array())) return given;
  }
  bool ok = false;
  if (current.is_boolean()) {
    ok = given.is_boolean();
  } else if (current.is_number_integer() || current.is_number_unsigned()) {
    ok = given.is_number_integer() || given.is_number_unsigned();
    if (!ok && given.is_number_float()) {
      const double d = given.get<double>();
      if (std::isfinite(d) && std::abs(d) < 9.2e18 && d == double(int64_t(d))) {
        ok = true;
        given = int64_t(d);
      }
    }
  } else if (current.is_number_float()) {
    ok = given.is_number();
  } else if (current.is_string()) {
    ok = given.is_string();
  } else if (current.is_array()) {
    ok = given.is_array();
  } else if (current.is_object()) {
    ok = given.is_object();
  }
  if (!ok)
    throw Error(where, fmt::format("'{}' must be {} (like its default {}), got {} {}", path, type_name(current),
                                   current.is_object() ? std::string("{...}") : current.dump(), type_name(given),
                                   given.dump()));
  return given;
}

// verl's `_target_` keys name the Python dataclass a section becomes; verlpp has its own types,
// so verl's own classes are accepted (and dropped), any other class is refused.
bool is_dropped_target(const std::string& key, const json& value, const std::string& path, const std::string& where) {
  if (key != "_target_") return false;
  if (value.is_string() && value.get<std::string>().rfind("verl.", 0) == 0) return true;
  throw Error(where, fmt::format("'{}' = {}: verlpp cannot instantiate Python classes; only verl's own "
                                 "(verl.*) are accepted, and they change nothing",
                                 path, value.dump()));
}

std::string unknown_key_message(const std::string& path) {
  return fmt::format("unknown key '{}'; did you mean '{}'?", path, nearest_config_key(path));
}

// OmegaConf's merge without a schema: objects key by key, anything else replaces.
void merge_free(json& target, const json& given) {
  for (auto it = given.begin(); it != given.end(); ++it) {
    json& slot = target[it.key()];
    if (slot.is_object() && it.value().is_object())
      merge_free(slot, it.value());
    else
      slot = it.value();
  }
}

// Merges `given` into `target` (whose shape comes from the defaults): objects merge key by key,
// anything else replaces (OmegaConf's merge).
void merge(json& target, const json& given, const std::string& prefix, const std::string& where) {
  for (auto it = given.begin(); it != given.end(); ++it) {
    std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    // A _target_ names a Python class: verl's own are accepted (and kept where the tree has the
    // key), any other is refused, known key or not.
    if (is_dropped_target(it.key(), it.value(), path, where) && !target.contains(it.key())) continue;
    if (!target.contains(it.key())) throw Error(where, unknown_key_message(path));
    json& current = target[it.key()];
    json value = fit_type(current, it.value(), path, where);
    if (current.is_object() && value.is_object() && !is_free_form(current)) {
      merge(current, value, path, where);
    } else if (current.is_object() && value.is_object()) {  // free-form: merged without checks
      merge_free(current, value);
    } else {
      current = std::move(value);
    }
  }
}

std::vector<std::string> split_path(const std::string& dotted) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t dot = dotted.find('.', start);
    parts.push_back(dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

const json* find(const json& root, const std::string& dotted) {
  const json* node = &root;
  for (const auto& part : split_path(dotted)) {
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &(*node)[part];
  }
  return node;
}

// The child `part` of an object, or the entry of a list at index `part`; null when absent.
json* child(json& node, const std::string& part) {
  if (node.is_object()) {
    auto it = node.find(part);
    return it == node.end() ? nullptr : &*it;
  }
  if (node.is_array() && !part.empty() && part.size() < 10 &&
      std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    const size_t i = size_t(std::stoull(part));
    return i < node.size() ? &node[i] : nullptr;
  }
  return nullptr;
}

}  // namespace

bool is_yaml_file_name(const std::string& path) {
  auto ends = [&](const std::string& suffix) {
    return path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(".yaml") || ends(".yml") || ends(".YAML") || ends(".YML");
}

bool is_config_file_argument(const std::string& arg) {
  return !arg.empty() && arg.find('=') == std::string::npos && arg[0] != '~' && arg[0] != '+';
}

std::string nearest_config_key(const std::string& key) {
  static const std::vector<std::string> paths = [] {
    std::vector<std::string> p;
    collect_paths(default_tree(), "", p);
    return p;
  }();
  std::string best;
  size_t best_score = SIZE_MAX;
  std::string leaf = key.substr(key.rfind('.') == std::string::npos ? 0 : key.rfind('.') + 1);
  for (const auto& p : paths) {
    // Whole-path distance, with a bonus when the last component matches exactly elsewhere.
    size_t score = edit_distance(key, p);
    std::string p_leaf = p.substr(p.rfind('.') == std::string::npos ? 0 : p.rfind('.') + 1);
    if (p_leaf == leaf) score = std::min(score, edit_distance(key, p) / 2);
    if (score < best_score) {
      best_score = score;
      best = p;
    }
  }
  return best;
}

Config Config::defaults() { return Config(default_tree()); }

Config Config::from_file(const std::string& path) {
  const std::string text = files::read_input(path, "config file");
  json given;
  if (is_yaml_file_name(path)) {
    given = yaml_to_json(text, path);
  } else {
    check_json_depth(text, path);
    try {
      given = json::parse(text);
    } catch (const json::exception& e) {  // parse_error, or out_of_range for a number that overflows
      throw Error(path,
                  fmt::format("not valid JSON ({} is read as YAML only when named .yaml or .yml): {}", path, e.what()));
    }
  }
  return from_json(given, path);
}

Config Config::from_json(const json& given, const std::string& origin) {
  if (!given.is_object()) throw Error(origin, "the config must be a JSON object (a YAML mapping)");
  const detail::ConfigFileParts parts = detail::split_config_file(given, origin);
  Config c = defaults();
  merge(c.tree_, parts.body, "", origin);
  // `_self_` before verl's base config: the base's values win over the file's (Hydra's order).
  if (parts.base_after_self) merge_free(c.tree_, default_tree());
  return c;
}

void Config::apply_override(const std::string& assignment) { apply(parse_override(assignment), assignment); }

void Config::apply(const Override& o, const std::string& text) {
  const std::string where = "override '" + text + "'";
  const bool adding = o.action == OverrideAction::add || o.action == OverrideAction::add_or_change;
  const auto parts = split_path(o.key);
  json* node = &tree_;
  const json* shape = &default_tree();  // the defaults beside `node`; null inside a free-form section
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string& part = parts[i];
    walked = walked.empty() ? part : walked + "." + part;
    const json* next_shape = nullptr;
    if (shape != nullptr) {
      if (!shape->is_object() || !shape->contains(part)) throw Error(where, unknown_key_message(o.key));
      next_shape = &(*shape)[part];
      if (!next_shape->is_object() && !next_shape->is_null() && !next_shape->is_array())
        throw Error(where, fmt::format("'{}' is a value ({}), not a section with keys", walked, next_shape->dump()));
      if (!next_shape->is_object() || is_free_form(*next_shape)) next_shape = nullptr;
    }
    json* next = child(*node, part);
    if (next == nullptr || !(next->is_object() || next->is_array())) {
      if (node->is_array()) throw Error(where, fmt::format("'{}': the list has {} entries", walked, node->size()));
      if (o.action == OverrideAction::remove)
        throw Error(where, fmt::format("cannot delete '{}': '{}' is not in the config", o.key, walked));
      if (next != nullptr && !next->is_null() && !adding)
        throw Error(where, fmt::format("'{}' is a value ({}), not a section with keys", walked, next->dump()));
      // Only an add makes a section of a null (Hydra's rule); inside a free-form section a change
      // may create one too (verlpp's, as before the grammar).
      if (!adding && !(shape == nullptr && next == nullptr))
        throw Error(where, fmt::format("cannot change '{}': '{}' is {}; to add it use +{}", o.key, walked,
                                       next == nullptr ? "not set" : "null", text));
      (*node)[part] = json::object();
      next = &(*node)[part];
    }
    node = next;
    shape = next_shape;
  }
  const std::string& leaf = parts.back();
  const json* leaf_shape = nullptr;                                 // the default of a key verlpp knows
  if (o.has_value) is_dropped_target(leaf, o.value, o.key, where);  // refuses a non-verl _target_
  if (shape != nullptr) {
    if (!shape->is_object() || !shape->contains(leaf)) {
      if (o.has_value && is_dropped_target(leaf, o.value, o.key, where)) return;
      throw Error(where, unknown_key_message(o.key));
    }
    leaf_shape = &(*shape)[leaf];
  }
  json* current = child(*node, leaf);
  if (node->is_array() && current == nullptr)
    throw Error(where, fmt::format("'{}': the list has {} entries", o.key, node->size()));
  if (o.action == OverrideAction::remove) {
    if (current == nullptr) throw Error(where, fmt::format("cannot delete '{}': it is not in the config", o.key));
    if (leaf_shape != nullptr)
      throw Error(where,
                  fmt::format("cannot delete '{}': verlpp reads it; set it instead (e.g. {}=null)", o.key, o.key));
    if (o.has_value && *current != o.value)
      throw Error(where,
                  fmt::format("cannot delete '{}': its value is {}, not {}", o.key, current->dump(), o.value.dump()));
    if (node->is_array())
      node->erase(size_t(std::stoull(leaf)));
    else
      node->erase(leaf);
    return;
  }
  if (o.action == OverrideAction::add && current != nullptr && !current->is_null() && !o.value.is_object() &&
      !o.value.is_array())
    throw Error(where, fmt::format("cannot add '{}': it is already set (to {}); drop the + to change it, or use "
                                   "++{} to add or change",
                                   o.key, current->dump(), text.substr(1)));
  if (current == nullptr) {
    (*node)[leaf] = o.value;
    return;
  }
  json value = o.value;
  // An unquoted number or boolean for a string key is its text (OmegaConf's str typing): 1e-6
  // stays "1e-6", True stays "True".
  if (current->is_string() && !is_reference(*current) && !o.value_quoted && (value.is_boolean() || value.is_number()))
    value = o.value_text;
  if (leaf_shape != nullptr) value = fit_type(*current, std::move(value), o.key, where);
  if (current->is_object() && value.is_object()) {
    if (leaf_shape != nullptr && !is_free_form(*leaf_shape))
      merge(*current, value, o.key, where);
    else
      merge_free(*current, value);
    return;
  }
  *current = std::move(value);
}

void Config::apply_overrides(const std::vector<std::string>& assignments) {
  for (const auto& a : assignments) apply_override(a);
}

void Config::resolve() { tree_ = detail::resolve_config_tree(tree_); }

const nlohmann::json& Config::at(const std::string& dotted) const {
  {
    std::lock_guard<std::mutex> lock(reads_->mutex);
    reads_->keys.insert(dotted);
  }
  const json* node = find(tree_, dotted);
  if (node == nullptr) throw Error("config", unknown_key_message(dotted));
  return *node;
}

std::set<std::string> Config::read_keys() const {
  std::lock_guard<std::mutex> lock(reads_->mutex);
  return reads_->keys;
}

void Config::throw_wrong_type(const std::string& dotted, const nlohmann::json& value, const char* wanted) {
  if (value.is_null()) throw Error("config", fmt::format("'{}' is null (unset); it must be {}", dotted, wanted));
  throw Error("config", fmt::format("'{}' = {} is {}; it must be {}", dotted, value.dump(), type_name(value), wanted));
}

void Config::set(const std::string& dotted, nlohmann::json value) {
  auto parts = split_path(dotted);
  json* node = &tree_;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!node->contains(parts[i])) throw Error("config", unknown_key_message(dotted));
    node = &(*node)[parts[i]];
  }
  if (!node->contains(parts.back())) throw Error("config", unknown_key_message(dotted));
  (*node)[parts.back()] = std::move(value);
}

}  // namespace verlpp::config
