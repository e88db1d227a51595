// YAML to JSON with OmegaConf's typing (config_yaml.hpp). yaml-cpp parses (it keeps plain and
// quoted scalars apart: tag "?" and "!"); the implicit typing of plain scalars is written here
// from PyYAML's resolver patterns and OmegaConf's extra float pattern, as matchers rather than
// std::regex (which recurses per character and can exhaust the stack on long scalars).
#include "config_parts.hpp"

#include <verlpp/config/config_yaml.hpp>
#include <verlpp/core/error.hpp>

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <sstream>

namespace verlpp::config {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxNodes = 100000;
constexpr int kMaxDepth = 512;
const std::string kTag = "tag:yaml.org,2002:";

bool digit(char c) { return c >= '0' && c <= '9'; }

// A cursor over one scalar for the pattern matchers; each step returns false when it fails.
struct Cursor {
  const std::string& s;
  size_t p = 0;
  bool done() const { return p == s.size(); }
  bool at(char c) const { return p < s.size() && s[p] == c; }
  bool eat(char c) {
    if (!at(c)) return false;
    ++p;
    return true;
  }
  bool eat_any(const char* set) {
    if (p < s.size() && std::string(set).find(s[p]) != std::string::npos && s[p] != 0) {
      ++p;
      return true;
    }
    return false;
  }
  void sign() { eat_any("+-"); }
  // [0-9][0-9_]*
  bool digits_then_underscores() {
    if (p >= s.size() || !digit(s[p])) return false;
    while (p < s.size() && (digit(s[p]) || s[p] == '_')) ++p;
    return true;
  }
  // [0-9_]*
  void underscored_digits() {
    while (p < s.size() && (digit(s[p]) || s[p] == '_')) ++p;
  }
  // [0-9]+(_[0-9]+)*
  bool grouped_digits() {
    if (p >= s.size() || !digit(s[p])) return false;
    while (p < s.size() && digit(s[p])) ++p;
    while (p + 1 < s.size() && s[p] == '_' && digit(s[p + 1])) {
      ++p;
      while (p < s.size() && digit(s[p])) ++p;
    }
    return true;
  }
  // [0-9]+
  bool plain_digits() {
    if (p >= s.size() || !digit(s[p])) return false;
    while (p < s.size() && digit(s[p])) ++p;
    return true;
  }
  // [eE] sign digits, the sign required or optional; nothing consumed when absent.
  bool exponent(bool sign_required) {
    const size_t start = p;
    if (!eat_any("eE")) return false;
    if (!eat_any("+-") && sign_required) {
      p = start;
      return false;
    }
    if (!plain_digits()) {
      p = start;
      return false;
    }
    return true;
  }
  // (':' [0-5]?[0-9])+
  bool sexagesimal_groups() {
    size_t groups = 0;
    while (at(':')) {
      const size_t start = p++;
      if (p + 1 < s.size() && s[p] >= '0' && s[p] <= '5' && digit(s[p + 1]))
        p += 2;
      else if (p < s.size() && digit(s[p]))
        ++p;
      else {
        p = start;
        break;
      }
      ++groups;
    }
    return groups > 0;
  }
};

bool is_int(const std::string& s) {
  auto whole = [&](auto&& body) {
    Cursor c{s};
    return body(c) && c.done();
  };
  return whole([](Cursor& c) {  // [-+]?0b[0-1_]+
           c.sign();
           if (!c.eat('0') || !c.eat('b')) return false;
           size_t n = 0;
           while (c.eat_any("01_")) ++n;
           return n > 0;
         }) ||
         whole([](Cursor& c) {  // [-+]?0[0-7_]+
           c.sign();
           if (!c.eat('0')) return false;
           size_t n = 0;
           while (c.eat_any("01234567_")) ++n;
           return n > 0;
         }) ||
         whole([](Cursor& c) {  // [-+]?(?:0|[1-9][0-9_]*)
           c.sign();
           if (c.eat('0')) return true;
           if (!c.eat_any("123456789")) return false;
           c.underscored_digits();
           return true;
         }) ||
         whole([](Cursor& c) {  // [-+]?0x[0-9a-fA-F_]+
           c.sign();
           if (!c.eat('0') || !c.eat('x')) return false;
           size_t n = 0;
           while (c.eat_any("0123456789abcdefABCDEF_")) ++n;
           return n > 0;
         }) ||
         whole([](Cursor& c) {  // [-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+
           c.sign();
           if (!c.eat_any("123456789")) return false;
           c.underscored_digits();
           return c.sexagesimal_groups();
         });
}

bool is_float(const std::string& s) {
  auto whole = [&](auto&& body) {
    Cursor c{s};
    return body(c) && c.done();
  };
  return whole([](Cursor& c) {  // PyYAML: [-+]?[0-9][0-9_]*\.[0-9_]*([eE][-+][0-9]+)?
           c.sign();
           if (!c.digits_then_underscores() || !c.eat('.')) return false;
           c.underscored_digits();
           c.exponent(true);
           return true;
         }) ||
         whole([](Cursor& c) {  // PyYAML: \.[0-9][0-9_]*([eE][-+][0-9]+)?
           if (!c.eat('.') || !c.digits_then_underscores()) return false;
           c.exponent(true);
           return true;
         }) ||
         whole([](Cursor& c) {  // PyYAML: [-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\.[0-9_]*
           c.sign();
           if (!c.digits_then_underscores() || !c.sexagesimal_groups() || !c.eat('.')) return false;
           c.underscored_digits();
           return true;
         }) ||
         whole([](Cursor& c) {  // [-+]?\.(inf|Inf|INF)
           c.sign();
           return c.s.compare(c.p, std::string::npos, ".inf") == 0 ||
                          c.s.compare(c.p, std::string::npos, ".Inf") == 0 ||
                          c.s.compare(c.p, std::string::npos, ".INF") == 0
                      ? (c.p = c.s.size(), true)
                      : false;
         }) ||
         s == ".nan" || s == ".NaN" || s == ".NAN" ||
         whole([](Cursor& c) {  // OmegaConf: [-+]?[0-9]+(_[0-9]+)*\.[0-9_]*([eE][-+]?[0-9]+)?
           c.sign();
           if (!c.grouped_digits() || !c.eat('.')) return false;
           c.underscored_digits();
           c.exponent(false);
           return true;
         }) ||
         whole([](Cursor& c) {  // OmegaConf: [-+]?[0-9]+(_[0-9]+)*[eE][-+]?[0-9]+
           c.sign();
           return c.grouped_digits() && c.exponent(false);
         });
}

std::string without_underscores(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != '_') out += c;
  return out;
}

// PyYAML's integer construction; nullopt-like failure is reported by throwing.
json construct_int(const std::string& text) {
  std::string v = without_underscores(text);
  bool negative = false;
  if (!v.empty() && (v[0] == '-' || v[0] == '+')) {
    negative = v[0] == '-';
    v = v.substr(1);
  }
  auto bad = [&] { return Error("yaml", fmt::format("'{}' is not a valid integer", text)); };
  auto out_of_range = [&] { return Error("yaml", fmt::format("the integer {} is out of range (64 bits)", text)); };
  if (v.empty()) throw bad();
  uint64_t magnitude = 0;
  auto parse = [&](const std::string& digits, int base) {
    if (digits.empty()) throw bad();
    auto r = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
    if (r.ec == std::errc::result_out_of_range) throw out_of_range();
    if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) throw bad();
  };
  if (v == "0") {
    magnitude = 0;
  } else if (v.rfind("0b", 0) == 0) {
    parse(v.substr(2), 2);
  } else if (v.rfind("0x", 0) == 0) {
    parse(v.substr(2), 16);
  } else if (v[0] == '0') {
    parse(v, 8);
  } else if (v.find(':') != std::string::npos) {
    size_t start = 0;
    while (true) {
      const size_t colon = v.find(':', start);
      uint64_t part = 0;
      const std::string digits = v.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      auto r = std::from_chars(digits.data(), digits.data() + digits.size(), part);
      if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) throw bad();
      if (magnitude > (std::numeric_limits<uint64_t>::max() - part) / 60) throw out_of_range();
      magnitude = magnitude * 60 + part;
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  } else {
    parse(v, 10);
  }
  if (negative) {
    if (magnitude > uint64_t(std::numeric_limits<int64_t>::max()) + 1) throw out_of_range();
    return magnitude == 0 ? int64_t(0) : int64_t(-int64_t(magnitude - 1) - 1);
  }
  if (magnitude <= uint64_t(std::numeric_limits<int64_t>::max())) return int64_t(magnitude);
  return magnitude;
}

// PyYAML's float construction.
json construct_float(const std::string& text) {
  std::string v = without_underscores(text);
  for (char& c : v)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  double sign = 1.0;
  if (!v.empty() && (v[0] == '-' || v[0] == '+')) {
    if (v[0] == '-') sign = -1.0;
    v = v.substr(1);
  }
  auto bad = [&] { return Error("yaml", fmt::format("'{}' is not a valid number", text)); };
  if (v == ".inf") return sign * std::numeric_limits<double>::infinity();
  if (v == ".nan") return std::numeric_limits<double>::quiet_NaN();
  auto parse = [&](const std::string& digits) {
    double d = 0;
    auto r = std::from_chars(digits.data(), digits.data() + digits.size(), d);
    if (r.ptr != digits.data() + digits.size() || digits.empty()) throw bad();
    // Past double's range Python's float() gives inf (or 0, or a subnormal), as strtod does
    // (verlpp never changes the C locale, so strtod reads '.' as the decimal point).
    if (r.ec == std::errc::result_out_of_range) return std::strtod(digits.c_str(), nullptr);
    if (r.ec != std::errc()) throw bad();
    return d;
  };
  if (v.find(':') != std::string::npos) {
    double total = 0;
    size_t start = 0;
    while (true) {
      const size_t colon = v.find(':', start);
      total = total * 60 + parse(v.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
    return sign * total;
  }
  return sign * parse(v);
}

json construct_bool(const std::string& text) {
  std::string v = text;
  for (char& c : v)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  if (v == "true" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "no" || v == "off") return false;
  throw Error("yaml", fmt::format("'{}' is not a boolean (true/false, yes/no, on/off)", text));
}

// Where each document of a stream starts (the events themselves are not kept).
struct DocumentCounter : YAML::EventHandler {
  std::vector<YAML::Mark> starts;
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Json: nlohmann::json (keys sorted) or nlohmann::ordered_json (keys in the file's order).
template <class Json>
class Converter {
 public:
  explicit Converter(std::string origin) : origin_(std::move(origin)) {}

  Json convert(const YAML::Node& node, const std::string& path, int depth) {
    if (++nodes_ > kMaxNodes)
      fail(node, path, fmt::format("the document expands (with its aliases) to more than {} nodes", kMaxNodes));
    if (depth > kMaxDepth) fail(node, path, fmt::format("nested deeper than {} levels", kMaxDepth));
    for (const auto& ancestor : ancestors_)
      if (ancestor.is(node)) fail(node, path, "a recursive alias (a node that contains itself)");
    const std::string& tag = node.Tag();
    switch (node.Type()) {
      case YAML::NodeType::Null:
        return tag == kTag + "str" ? Json(std::string()) : Json(nullptr);
      case YAML::NodeType::Scalar:
        return scalar(node, path);
      case YAML::NodeType::Sequence: {
        if (tag != "?" && tag != "!" && tag != kTag + "seq") unsupported_tag(node, path);
        ancestors_.push_back(node);
        Json out = Json::array();
        size_t i = 0;
        for (const auto& item : node) out.push_back(convert(item, fmt::format("{}[{}]", path, i++), depth + 1));
        ancestors_.pop_back();
        return out;
      }
      case YAML::NodeType::Map: {
        if (tag != "?" && tag != "!" && tag != kTag + "map") unsupported_tag(node, path);
        ancestors_.push_back(node);
        Json out = mapping(node, path, depth);
        ancestors_.pop_back();
        return out;
      }
      default:
        fail(node, path, "an undefined node");
    }
  }

 private:
  std::string origin_;
  size_t nodes_ = 0;
  std::vector<YAML::Node> ancestors_;

  [[noreturn]] void fail(const YAML::Node& node, const std::string& path, const std::string& what) const {
    const YAML::Mark mark = node.Mark();
    const std::string at =
        mark.is_null() ? std::string() : fmt::format(" at line {}, column {}", mark.line + 1, mark.column + 1);
    // A path through deep nesting is shortened: its start and its end say where it is.
    const std::string shown = path.size() <= 120 ? path : path.substr(0, 60) + "..." + path.substr(path.size() - 50);
    throw Error(origin_,
                fmt::format("{}{}: {}", path.empty() ? std::string("the document") : "'" + shown + "'", at, what));
  }
  [[noreturn]] void unsupported_tag(const YAML::Node& node, const std::string& path) const {
    fail(node, path,
         fmt::format("the tag {} is not supported (only !!str !!int !!float !!bool !!null !!map !!seq)", node.Tag()));
  }

  Json scalar(const YAML::Node& node, const std::string& path) const {
    const std::string& tag = node.Tag();
    const std::string& text = node.Scalar();
    try {
      if (tag == "?") return Json(yaml_plain_scalar(text));
      if (tag == "!" || tag == kTag + "str") return text;
      if (tag == kTag + "int") return Json(construct_int(text));
      if (tag == kTag + "float") return Json(construct_float(text));
      if (tag == kTag + "bool") return Json(construct_bool(text));
      if (tag == kTag + "null") return nullptr;
    } catch (const Error& e) {
      fail(node, path, e.message());
    }
    unsupported_tag(node, path);
  }

  std::string key_text(const YAML::Node& key, const std::string& path) const {
    if (key.IsNull()) return "null";
    if (!key.IsScalar()) fail(key, path, "a mapping key must be a scalar (not a list or a mapping)");
    const Json k = scalar(key, path);
    if (k.is_string()) return k.template get<std::string>();
    if (k.is_null()) return "null";
    if (k.is_number_float()) return fmt::format("{}", k.template get<double>());
    return k.dump();
  }

  // Adds the merged entries of a `<<` value to `merged`, earlier sources winning.
  void merge_source(const YAML::Node& source, const std::string& path, int depth, Json& merged) {
    auto add = [&](const Json& m) {
      for (auto it = m.begin(); it != m.end(); ++it)
        if (!merged.contains(it.key())) merged[it.key()] = it.value();
    };
    if (source.IsMap()) {
      add(convert(source, path, depth + 1));
    } else if (source.IsSequence()) {
      for (const auto& item : source) {
        if (!item.IsMap()) fail(item, path, "a merge key (<<) takes a mapping or a list of mappings");
        add(convert(item, path, depth + 1));
      }
    } else {
      fail(source, path, "a merge key (<<) takes a mapping or a list of mappings");
    }
  }

  Json mapping(const YAML::Node& node, const std::string& path, int depth) {
    Json out = Json::object();
    Json merged = Json::object();
    std::set<std::string> seen;
    for (const auto& entry : node) {
      const YAML::Node& key = entry.first;
      if (key.IsScalar() && key.Tag() == "?" && key.Scalar() == "<<") {
        merge_source(entry.second, path, depth, merged);
        continue;
      }
      const std::string name = key_text(key, path);
      const std::string child = path.empty() ? name : path + "." + name;
      if (!seen.insert(name).second) fail(key, child, "a duplicate key (OmegaConf refuses them)");
      out[name] = convert(entry.second, child, depth + 1);
    }
    // PyYAML places the merged entries first, the mapping's own values replacing theirs.
    if (merged.empty()) return out;
    Json result = Json::object();
    for (auto it = merged.begin(); it != merged.end(); ++it)
      result[it.key()] = out.contains(it.key()) ? out[it.key()] : it.value();
    for (auto it = out.begin(); it != out.end(); ++it)
      if (!result.contains(it.key())) result[it.key()] = it.value();
    return result;
  }
};

}  // namespace

nlohmann::json yaml_plain_scalar(const std::string& text) {
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") return nullptr;
  static const std::set<std::string> truths = {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"};
  static const std::set<std::string> falsehoods = {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"};
  if (truths.count(text)) return true;
  if (falsehoods.count(text)) return false;
  if (is_int(text)) return construct_int(text);
  if (is_float(text)) return construct_float(text);
  if (text == "=")
    throw Error("yaml", "the plain scalar '=' is YAML 1.1's value indicator, which PyYAML cannot load; quote it");
  if (text == "<<") throw Error("yaml", "the merge key '<<' is not a value; quote it");
  return text;
}

namespace {

template <class Json>
Json load_yaml(const std::string& text, const std::string& origin) {
  const size_t bad = detail::first_invalid_utf8(text);
  if (bad != std::string::npos) {
    const size_t line_start = text.rfind('\n', bad == 0 ? 0 : bad - 1);
    const size_t line = size_t(std::count(text.begin(), text.begin() + long(bad), '\n')) + 1;
    const size_t column = bad - (line_start == std::string::npos || bad == 0 ? 0 : line_start + 1) + 1;
    throw Error(origin, fmt::format("line {}, column {}: the byte 0x{:02x} is not UTF-8 text (YAML configs are "
                                    "UTF-8)",
                                    line, column, int(static_cast<unsigned char>(text[bad]))));
  }
  YAML::Node document;
  try {
    // Count at most two documents: yaml-cpp 0.7 reads a ',' outside brackets as the end of an
    // empty document without consuming it, so YAML::LoadAll never ends on such input.
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentCounter counter;
    while (counter.starts.size() < 2 && parser.HandleNextDocument(counter)) {
    }
    if (counter.starts.empty()) return Json::object();
    if (counter.starts.size() > 1)
      throw Error(origin, fmt::format("a second YAML document starts at line {}, column {} (after '---', or at a ',' "
                                      "outside [] and {{}}); a config is one document",
                                      counter.starts[1].line + 1, counter.starts[1].column + 1));
    document = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw Error(origin,
                fmt::format("not valid YAML at line {}, column {}: {}", e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (document.IsNull()) return Json::object();
  try {
    return Converter<Json>(origin).convert(document, "", 0);
  } catch (const YAML::Exception& e) {
    throw Error(origin,
                fmt::format("not valid YAML at line {}, column {}: {}", e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

}  // namespace

nlohmann::json yaml_to_json(const std::string& text, const std::string& origin) {
  return load_yaml<nlohmann::json>(text, origin);
}

nlohmann::ordered_json yaml_to_ordered_json(const std::string& text, const std::string& origin) {
  return load_yaml<nlohmann::ordered_json>(text, origin);
}

}  // namespace verlpp::config
