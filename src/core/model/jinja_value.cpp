// Jinja values with Python's semantics: truth, str() and repr(), ==, and the str methods the
// chat templates call (strip with Python's whitespace, Unicode case mapping through ICU).
#include "jinja_internal.hpp"

#include "tokenizer_internal.hpp"

#include <verlpp/core/python_json.hpp>

#include <unicode/locid.h>
#include <unicode/unistr.h>

#include <cstdio>

namespace verlpp::model::jinja {

Value::Value(Json data) : kind_(Kind::kData) {
  auto owned = std::make_shared<const Json>(std::move(data));
  node_ = owned.get();
  owner_ = std::move(owned);
}

Value Value::ref(std::shared_ptr<const Json> owner, const Json* node) {
  Value v;
  v.kind_ = Kind::kData;
  v.owner_ = std::move(owner);
  v.node_ = node;
  return v;
}

Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.kind_ = Kind::kObject;
  v.object_ = std::move(o);
  return v;
}

Value Value::callable(std::shared_ptr<Callable> c) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.callable_ = std::move(c);
  return v;
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kObject:
    case Value::Kind::kCallable:
      return true;
    case Value::Kind::kData:
      break;
  }
  const Json& j = v.data();
  switch (j.type()) {
    case Json::value_t::null:
      return false;
    case Json::value_t::boolean:
      return j.get<bool>();
    case Json::value_t::number_integer:
      return j.get<int64_t>() != 0;
    case Json::value_t::number_unsigned:
      return j.get<uint64_t>() != 0;
    case Json::value_t::number_float:
      return j.get<double>() != 0.0;
    case Json::value_t::string:
      return !j.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object:
      return !j.empty();
    default:
      return true;
  }
}

namespace {

// Python's repr() of a float: the shortest round-trip digits, ".0" on integral values.
std::string float_repr(double x) {
  if (x != x) return "nan";
  if (x == std::numeric_limits<double>::infinity()) return "inf";
  if (x == -std::numeric_limits<double>::infinity()) return "-inf";
  return Json(x).dump();
}

// Python's repr() of a str: single quotes unless the text holds one and no double quote.
std::string string_repr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == static_cast<unsigned char>(q))
      out += std::string("\\") + q;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

}  // namespace

std::string repr(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return "None";
    case Json::value_t::boolean:
      return j.get<bool>() ? "True" : "False";
    case Json::value_t::number_float:
      return float_repr(j.get<double>());
    case Json::value_t::string:
      return string_repr(j.get_ref<const std::string&>());
    case Json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + repr(j[i]);
      return out + "]";
    }
    case Json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        out += (first ? "" : ", ") + string_repr(it.key()) + ": " + repr(it.value());
        first = false;
      }
      return out + "}";
    }
    default:
      return j.dump();
  }
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kObject:
      return "<" + v.object().type + " object>";
    case Value::Kind::kCallable:
      return "<function " + v.callable().name + ">";
    case Value::Kind::kData:
      break;
  }
  const Json& j = v.data();
  if (j.is_string()) return j.get_ref<const std::string&>();
  return repr(j);
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "undefined";
    case Value::Kind::kObject:
      return v.object().type;
    case Value::Kind::kCallable:
      return "function";
    case Value::Kind::kData:
      break;
  }
  switch (v.data().type()) {
    case Json::value_t::null:
      return "none";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    case Json::value_t::number_float:
      return "float";
    case Json::value_t::string:
      return "string";
    case Json::value_t::array:
      return "list";
    case Json::value_t::object:
      return "dict";
    default:
      return "value";
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (!a.is_data() || !b.is_data()) {
    if (a.kind() != b.kind()) return false;
    return a.kind() == Value::Kind::kObject ? &a.object() == &b.object() : &a.callable() == &b.callable();
  }
  const Json &x = a.data(), &y = b.data();
  // Python: True == 1 and 1 == 1.0; nlohmann keeps booleans apart from numbers.
  auto number = [](const Json& j, double& out) {
    if (j.is_boolean()) {
      out = j.get<bool>() ? 1.0 : 0.0;
      return true;
    }
    if (j.is_number()) {
      out = j.get<double>();
      return true;
    }
    return false;
  };
  double dx, dy;
  if (number(x, dx) && number(y, dy)) {
    if (x.is_number_integer() && y.is_number_integer()) return x.get<int64_t>() == y.get<int64_t>();
    return dx == dy;
  }
  return x == y;
}

Json to_data(const Value& v, const std::string& what) {
  if (v.is_data()) return v.data();
  throw UseError{fmt::format("{}: a {} has no data form", what, type_name(v))};
}

std::vector<char32_t> code_points(const std::string& s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) out.push_back(tok::next_code_point(s, pos));
  return out;
}

std::string from_code_points(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) tok::append_utf8(cps[i], out);
  return out;
}

bool py_isspace(char32_t c) { return (c >= 0x1C && c <= 0x1F) || (tok::char_class(c) & tok::kSpace); }

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  const std::vector<char32_t> cps = code_points(s);
  std::vector<char32_t> set;
  if (chars) set = code_points(*chars);
  auto strip = [&](char32_t c) { return chars ? std::find(set.begin(), set.end(), c) != set.end() : py_isspace(c); };
  size_t begin = 0, end = cps.size();
  while (left && begin < end && strip(cps[begin])) ++begin;
  while (right && end > begin && strip(cps[end - 1])) --end;
  return from_code_points(cps, begin, end);
}

namespace {

std::string icu_map(const std::string& s, int mode) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
  if (mode == 0)
    u.toUpper(icu::Locale::getRoot());
  else if (mode == 1)
    u.toLower(icu::Locale::getRoot());
  std::string out;
  u.toUTF8String(out);
  return out;
}

bool cased_letter(char32_t c) { return tok::char_class(c) & tok::kLetter; }

}  // namespace

std::string py_upper(const std::string& s) { return icu_map(s, 0); }
std::string py_lower(const std::string& s) { return icu_map(s, 1); }

// Python's str.title(): a letter after a non-letter is upper-cased, other letters lower-cased.
std::string py_title(const std::string& s) {
  std::string out;
  bool previous_letter = false;
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    const char32_t c = tok::next_code_point(s, pos);
    const std::string one = s.substr(start, pos - start);
    out += previous_letter ? py_lower(one) : py_upper(one);
    previous_letter = cased_letter(c);
  }
  return out;
}

// Jinja's capitalize filter: the first character upper-cased, the rest lower-cased.
std::string py_capitalize(const std::string& s) {
  if (s.empty()) return s;
  size_t pos = 0;
  tok::next_code_point(s, pos);
  return py_upper(s.substr(0, pos)) + py_lower(s.substr(pos));
}

}  // namespace verlpp::model::jinja
