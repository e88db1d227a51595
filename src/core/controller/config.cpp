// Config: defaults, merging a user's file, dotted overrides, `${...}` resolution and lookups.
// Merging is strict: every key must exist in the defaults (except inside free-form objects,
// whose default is `{}`, e.g. model.override_config) and keep the default's type.
#include "../util/input_file.hpp"
#include <verlpp/core/json_limits.hpp>
#include <verlpp/controller/config.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include <algorithm>
#include <fstream>
#include <set>

namespace verlpp::controller {
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

// Checks that `given` may replace `current` (the default at `path`); throws naming `where`.
void check_type(const json& current, const json& given, const std::string& path, const std::string& where) {
  if (current.is_null() || given.is_null() || is_reference(current) || is_reference(given)) return;
  bool ok = false;
  if (current.is_boolean())
    ok = given.is_boolean();
  else if (current.is_number_integer() || current.is_number_unsigned())
    ok = given.is_number_integer() || given.is_number_unsigned() ||
         (given.is_number_float() && given.get<double>() == double(int64_t(given.get<double>())));
  else if (current.is_number_float())
    ok = given.is_number();
  else if (current.is_string())
    ok = given.is_string();
  else if (current.is_array())
    ok = given.is_array();
  else if (current.is_object())
    ok = given.is_object();
  if (!ok)
    throw Error(where, fmt::format("'{}' must be {} (like its default {}), got {} {}", path, type_name(current),
                                   current.dump(), type_name(given), given.dump()));
}

std::string unknown_key_message(const std::string& path) {
  return fmt::format("unknown key '{}'; did you mean '{}'?", path, nearest_config_key(path));
}

// Merges `given` into `target` (whose shape comes from the defaults).
void merge(json& target, const json& given, const std::string& prefix, const std::string& where) {
  for (auto it = given.begin(); it != given.end(); ++it) {
    std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (!target.contains(it.key())) throw Error(where, unknown_key_message(path));
    json& current = target[it.key()];
    check_type(current, it.value(), path, where);
    if (current.is_object() && it.value().is_object() && !is_free_form(current)) {
      merge(current, it.value(), path, where);
    } else {
      current = it.value();
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

// Resolves references inside `value`; `stack` holds the paths being resolved (cycle check).
json resolve_value(const json& root, const json& value, std::vector<std::string>& stack) {
  if (value.is_object()) {
    json out = json::object();
    for (auto it = value.begin(); it != value.end(); ++it) out[it.key()] = resolve_value(root, it.value(), stack);
    return out;
  }
  if (!is_reference(value)) return value;
  std::string text = value.get<std::string>();
  auto lookup = [&](const std::string& ref) -> json {
    if (std::find(stack.begin(), stack.end(), ref) != stack.end())
      throw Error("config", fmt::format("reference cycle: {} -> {}", join(stack, " -> "), ref));
    const json* target = find(root, ref);
    if (target == nullptr)
      throw Error("config",
                  fmt::format("'${{{}}}' refers to an unknown key; did you mean '{}'?", ref, nearest_config_key(ref)));
    stack.push_back(ref);
    json resolved = resolve_value(root, *target, stack);
    stack.pop_back();
    return resolved;
  };
  // A whole-string reference keeps the referenced value's type.
  if (text.size() > 3 && text.rfind("${", 0) == 0 && text.back() == '}' && text.find("${", 2) == std::string::npos)
    return lookup(text.substr(2, text.size() - 3));
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t open = text.find("${", pos);
    if (open == std::string::npos) break;
    size_t close = text.find('}', open);
    if (close == std::string::npos) throw Error("config", fmt::format("unterminated '${{' in \"{}\"", text));
    out += text.substr(pos, open - pos);
    json v = lookup(text.substr(open + 2, close - open - 2));
    out += v.is_string() ? v.get<std::string>() : v.dump();
    pos = close + 1;
  }
  return out + text.substr(pos);
}

}  // namespace

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
  json given;
  const std::string text = files::read_input(path, "config file");
  check_json_depth(text, path);
  try {
    given = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number that overflows
    throw Error(path, fmt::format("not valid JSON: {}", e.what()));
  }
  return from_json(given, path);
}

Config Config::from_json(const json& given, const std::string& origin) {
  if (!given.is_object()) throw Error(origin, "the config must be a JSON object");
  Config c = defaults();
  merge(c.tree_, given, "", origin);
  return c;
}

void Config::apply_override(const std::string& assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error("override '" + assignment + "'", "expected key=value, e.g. algorithm.adv_estimator=grpo");
  std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  if (!key.empty() && key[0] == '+') key = key.substr(1);  // hydra's "add" prefix: keys must exist anyway
  check_json_depth(text, "override '" + assignment + "'");
  json value = json::parse(text, nullptr, false);
  if (value.is_discarded()) value = text;  // a bare word is a string
  // Walk to the parent, allowing new keys only inside free-form objects (default `{}`).
  const std::string where = "override '" + assignment + "'";
  auto parts = split_path(key);
  json* node = &tree_;
  const json* shape = &default_tree();  // the defaults' node beside `node`, null inside free-form
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    bool free_form = shape == nullptr;
    if (!free_form && (!shape->is_object() || !shape->contains(parts[i]))) throw Error(where, unknown_key_message(key));
    if (free_form && !node->contains(parts[i])) (*node)[parts[i]] = json::object();
    node = &(*node)[parts[i]];
    if (!node->is_object()) throw Error(where, fmt::format("'{}' is not a section", key));
    if (shape != nullptr) {
      shape = &(*shape)[parts[i]];
      if (is_free_form(*shape)) shape = nullptr;
    }
  }
  const std::string& leaf = parts.back();
  if (shape != nullptr) {
    if (!shape->contains(leaf)) throw Error(where, unknown_key_message(key));
    check_type((*node)[leaf], value, key, where);
    const json& default_leaf = (*shape)[leaf];
    if (default_leaf.is_object() && !is_free_form(default_leaf))
      throw Error(where, fmt::format("'{}' is a section; set one of its keys", key));
  }
  (*node)[leaf] = value;
}

void Config::apply_overrides(const std::vector<std::string>& assignments) {
  for (const auto& a : assignments) apply_override(a);
}

void Config::resolve() {
  std::vector<std::string> stack;
  tree_ = resolve_value(tree_, tree_, stack);
}

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

}  // namespace verlpp::controller
