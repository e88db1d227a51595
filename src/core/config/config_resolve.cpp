// Interpolation as OmegaConf resolves verl's config: `${key}` (absolute, or relative with leading
// dots: `.x` is a sibling, `..x` a sibling of the section), `${oc.select:key,default}` (the
// default when the key is absent), `${oc.env:VAR,default}`; a nested `${...}` inside a key or an
// argument is resolved first; `\${` is a literal `${`. A value that is one interpolation keeps
// the type of what it resolves to; inside a longer string it is joined as text.
#include "config_parts.hpp"

#include <verlpp/config/config.hpp>
#include <verlpp/config/config_override.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

namespace verlpp::config::detail {
namespace {

using json = nlohmann::json;
using Path = std::vector<std::string>;

std::string dotted(const Path& p) { return join(p, "."); }

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\n"), b = s.find_last_not_of(" \t\n");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

// The length of a quoted string starting at s[p] (backslash runs before a quote escape it).
size_t quoted_len(const std::string& s, size_t p) {
  size_t run = 0;
  for (size_t i = p + 1; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++run;
      continue;
    }
    if (s[i] == s[p] && run % 2 == 0) return i - p + 1;
    run = 0;
  }
  return 0;
}

// The offset just past the '}' that closes the '{' at s[p] (of a '${'); npos when not closed.
size_t interpolation_end(const std::string& s, size_t p) {
  int depth = 0;
  for (size_t i = p; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\'' || c == '"') {
      const size_t n = quoted_len(s, i);
      if (n == 0) return std::string::npos;
      i += n - 1;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return std::string::npos;
}

// Splits resolver arguments at the commas outside brackets, braces, quotes and `${...}`.
std::vector<std::string> split_arguments(const std::string& s) {
  std::vector<std::string> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\'' || c == '"') {
      const size_t n = quoted_len(s, i);
      if (n > 0) i += n - 1;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == ',' && depth == 0) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  out.push_back(s.substr(start));
  return out;
}

bool is_resolver_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

class Resolver {
 public:
  explicit Resolver(const json& root) : root_(root) {}

  json node(const json& v, const Path& path) {
    if (v.is_object()) {
      json out = json::object();
      for (auto it = v.begin(); it != v.end(); ++it) out[it.key()] = node(it.value(), with(path, it.key()));
      return out;
    }
    if (v.is_array()) {
      json out = json::array();
      for (size_t i = 0; i < v.size(); ++i) out.push_back(node(v[i], with(path, std::to_string(i))));
      return out;
    }
    if (v.is_string() && v.get<std::string>().find("${") != std::string::npos) return text(v.get<std::string>(), path);
    return v;
  }

 private:
  const json& root_;
  std::vector<std::string> stack_;  // the keys being resolved, for the cycle check

  static Path with(Path p, const std::string& part) {
    p.push_back(part);
    return p;
  }

  const json* find(const Path& p) const {
    const json* n = &root_;
    for (const auto& part : p) {
      if (n->is_object()) {
        auto it = n->find(part);
        if (it == n->end()) return nullptr;
        n = &*it;
      } else if (n->is_array() && !part.empty() && part.size() < 10 &&
                 std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        const size_t i = size_t(std::stoul(part));
        if (i >= n->size()) return nullptr;
        n = &(*n)[i];
      } else {
        return nullptr;
      }
    }
    return n;
  }

  // The absolute path of `key` as written in the value at `at`.
  Path absolute(const std::string& key, const Path& at, const std::string& expr) const {
    size_t dots = 0;
    while (dots < key.size() && key[dots] == '.') ++dots;
    Path out;
    if (dots > 0) {
      if (dots > at.size())
        throw Error("config", fmt::format("'{}' in '{}' goes up {} levels, above the top of the config", expr,
                                          dotted(at), dots - 1));
      out.assign(at.begin(), at.end() - long(dots));
    }
    const std::string rest = key.substr(dots);
    if (!rest.empty())
      for (const auto& part : split(rest, '.')) {
        if (part.empty()) throw Error("config", fmt::format("'{}' in '{}': an empty key component", expr, dotted(at)));
        out.push_back(part);
      }
    return out;
  }

  json lookup(const Path& target, const std::string& expr, const Path& at) {
    const std::string name = dotted(target);
    if (std::find(stack_.begin(), stack_.end(), name) != stack_.end())
      throw Error("config", fmt::format("reference cycle: {} -> {}", join(stack_, " -> "), name));
    const json* value = find(target);
    if (value == nullptr)
      throw Error("config", fmt::format("'{}' (in '{}') refers to an unknown key; did you mean '{}'?", expr, dotted(at),
                                        nearest_config_key(name)));
    stack_.push_back(name);
    json resolved = node(*value, target);
    stack_.pop_back();
    return resolved;
  }

  static std::string as_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

  // One `${...}` (its body without the braces) in the value at `at`.
  json interpolation(const std::string& body_text, const Path& at) {
    const std::string expr = "${" + body_text + "}";
    const std::string body = trim(body_text);
    size_t n = 0;
    while (n < body.size() && is_resolver_name_char(body[n])) ++n;
    if (n > 0 && n < body.size() && body[n] == ':') return call(body.substr(0, n), body.substr(n + 1), expr, at);
    std::string key = body;
    if (key.find("${") != std::string::npos) key = as_text(text(key, at));
    if (key.empty()) throw Error("config", fmt::format("'{}' in '{}': an empty interpolation", expr, dotted(at)));
    return lookup(absolute(key, at, expr), expr, at);
  }

  json call(const std::string& name, const std::string& arg_text, const std::string& expr, const Path& at) {
    std::vector<json> args;
    if (!trim(arg_text).empty())
      for (const auto& a : split_arguments(arg_text)) {
        json v = parse_override_value(a, fmt::format("'{}' in '{}'", expr, dotted(at)));
        if (v.is_string() && v.get<std::string>().find("${") != std::string::npos) v = text(v.get<std::string>(), at);
        args.push_back(std::move(v));
      }
    auto need = [&](size_t lo, size_t hi, const char* usage) {
      if (args.size() < lo || args.size() > hi || !args[0].is_string())
        throw Error("config", fmt::format("'{}' in '{}': expected {}", expr, dotted(at), usage));
    };
    if (name == "oc.select") {
      need(1, 2, "${oc.select:key} or ${oc.select:key,default}");
      const Path target = absolute(args[0].get<std::string>(), at, expr);
      const json* value = find(target);
      if (value == nullptr || (value->is_string() && value->get<std::string>() == "???"))
        return args.size() > 1 ? args[1] : json(nullptr);
      return lookup(target, expr, at);
    }
    if (name == "oc.env") {
      need(1, 2, "${oc.env:VARIABLE} or ${oc.env:VARIABLE,default}");
      const std::string var = args[0].get<std::string>();
      if (const char* v = std::getenv(var.c_str())) return std::string(v);
      if (args.size() > 1) return args[1].is_null() ? json(nullptr) : json(as_text(args[1]));
      throw Error("config", fmt::format("'{}' in '{}': the environment variable {} is not set (give a default: "
                                        "${{oc.env:{},default}})",
                                        expr, dotted(at), var, var));
    }
    throw Error("config", fmt::format("'{}' in '{}': the resolver '{}' is not supported; verlpp implements "
                                      "oc.select and oc.env (and plain ${{key}} references)",
                                      expr, dotted(at), name));
  }

  // A string value with interpolations in it.
  json text(const std::string& s, const Path& at) {
    // One interpolation and nothing else: the resolved value, with its type.
    if (s.rfind("${", 0) == 0 && interpolation_end(s, 1) == s.size())
      return interpolation(s.substr(2, s.size() - 3), at);
    std::string out;
    size_t pos = 0;
    while (pos < s.size()) {
      if (s.compare(pos, 3, "\\${") == 0) {  // an escaped, literal ${
        out += "${";
        pos += 3;
        continue;
      }
      if (s.compare(pos, 2, "${") == 0) {
        const size_t close = interpolation_end(s, pos + 1);
        if (close == std::string::npos) throw Error("config", fmt::format("unterminated '${{' in \"{}\"", s));
        out += as_text(interpolation(s.substr(pos + 2, close - pos - 3), at));
        pos = close;
        continue;
      }
      out += s[pos++];
    }
    return out;
  }
};

}  // namespace

nlohmann::json resolve_config_tree(const nlohmann::json& tree) { return Resolver(tree).node(tree, {}); }

}  // namespace verlpp::config::detail
