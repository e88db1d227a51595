// Jinja's filters, tests and globals, the Python str and dict methods templates call, and
// transformers' additions (tojson with json.dumps's arguments, raise_exception, strftime_now),
// each with the semantics of Jinja2 3.1 and Python.
#include "jinja_internal.hpp"

#include "tokenizer_internal.hpp"

#include <verlpp/core/python_json.hpp>

#include <algorithm>
#include <cmath>
#include <ctime>

namespace verlpp::model::jinja {
namespace {

// The most elements range() makes: a template asking for more is refused, not run.
constexpr int64_t kMaxRange = 1 << 20;

[[noreturn]] void fail(const std::string& message) { throw UseError{message}; }

const Json& data_of(const Value& v, const std::string& what) {
  if (!v.is_data()) fail(fmt::format("{} expects data, got {}", what, v.is_undefined() ? v.what() : type_name(v)));
  return v.data();
}

std::string str_of(const Value& v) { return to_str(v); }

const std::string& string_arg(const Value& v, const std::string& what) {
  if (!v.is_data() || !v.data().is_string()) fail(fmt::format("{} expects a string, got {}", what, type_name(v)));
  return v.data().get_ref<const std::string&>();
}

int64_t int_arg(const Value& v, const std::string& what) {
  if (v.is_data() && v.data().is_number_integer()) return v.data().get<int64_t>();
  if (v.is_data() && v.data().is_boolean()) return v.data().get<bool>() ? 1 : 0;
  fail(fmt::format("{} expects an integer, got {}", what, type_name(v)));
}

const Value* kwarg(Kwargs& kwargs, const std::string& name) {
  for (auto& kv : kwargs)
    if (kv.first == name) return &kv.second;
  return nullptr;
}

// Argument `i` (0 is the value filtered) or keyword `name`, else null.
const Value* arg(Args& args, Kwargs& kwargs, size_t i, const std::string& name) {
  if (i < args.size()) return &args[i];
  return kwarg(kwargs, name);
}

Json list_of(const std::vector<Value>& items, const std::string& what) {
  Json out = Json::array();
  for (const Value& v : items) out.push_back(to_data(v, what));
  return out;
}

// Python's < on two values (numbers with numbers, strings with strings, lists elementwise).
bool less(const Json& a, const Json& b, const std::string& what) {
  if ((a.is_number() || a.is_boolean()) && (b.is_number() || b.is_boolean())) {
    auto num = [](const Json& j) { return j.is_boolean() ? (j.get<bool>() ? 1.0 : 0.0) : j.get<double>(); };
    if (a.is_number_integer() && b.is_number_integer()) return a.get<int64_t>() < b.get<int64_t>();
    return num(a) < num(b);
  }
  if (a.is_string() && b.is_string()) return code_points(a.get<std::string>()) < code_points(b.get<std::string>());
  if (a.is_array() && b.is_array()) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (less(a[i], b[i], what)) return true;
      if (less(b[i], a[i], what)) return false;
    }
    return a.size() < b.size();
  }
  fail(fmt::format("{}: cannot order {} and {}", what, a.type_name(), b.type_name()));
}

// A dotted attribute path of a value ("function.name"), as Jinja's attribute= arguments read.
Value attribute_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur.is_data() && cur.data().is_array() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      const size_t i = std::stoul(part);
      cur = i < cur.data().size() ? cur.child(cur.data()[i]) : Value::undefined();
    } else if (cur.is_data() && cur.data().is_object() && cur.data().contains(part)) {
      cur = cur.child(cur.data()[part]);
    } else {
      cur = attribute(cur, part);
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

Value callable(const std::string& name, std::function<Value(Args&, Kwargs&)> f) {
  auto c = std::make_shared<Callable>();
  c->name = name;
  c->call = std::move(f);
  return Value::callable(std::move(c));
}

// ---- filters ----

Value filter_tojson(Args& a, Kwargs& kw) {
  PythonJsonOptions options;
  if (const Value* v = arg(a, kw, 1, "ensure_ascii")) options.ensure_ascii = truthy(*v);
  if (const Value* v = arg(a, kw, 2, "indent"))
    if (!(v->is_data() && v->data().is_null())) options.indent = static_cast<int>(int_arg(*v, "tojson(indent)"));
  if (const Value* v = arg(a, kw, 3, "separators")) {
    if (v->is_data() && v->data().is_array() && v->data().size() == 2 && v->data()[0].is_string() &&
        v->data()[1].is_string()) {
      options.item_separator = v->data()[0].get<std::string>();
      options.key_separator = v->data()[1].get<std::string>();
    } else if (!(v->is_data() && v->data().is_null())) {
      fail("tojson(separators) expects a pair of strings");
    }
  }
  if (const Value* v = arg(a, kw, 4, "sort_keys")) options.sort_keys = truthy(*v);
  if (a[0].is_undefined()) fail(fmt::format("tojson: {}", a[0].what()));
  return Json(python_json_dumps(to_data(a[0], "tojson"), options));
}

Value filter_length(Args& a, Kwargs&) {
  const Value& v = a[0];
  if (v.is_undefined()) return Json(0);
  const Json& j = data_of(v, "length");
  if (j.is_string()) return Json(static_cast<int64_t>(code_points(j.get<std::string>()).size()));
  if (j.is_array() || j.is_object()) return Json(static_cast<int64_t>(j.size()));
  fail(fmt::format("length: a {} has no length", type_name(v)));
}

Value filter_default(Args& a, Kwargs& kw) {
  const Value* fallback = arg(a, kw, 1, "default_value");
  const Value* boolean = arg(a, kw, 2, "boolean");
  const bool use = a[0].is_undefined() || (boolean && truthy(*boolean) && !truthy(a[0]));
  if (!use) return a[0];
  return fallback ? *fallback : Value(Json(""));
}

Value filter_join(Args& a, Kwargs& kw) {
  const Value* sep = arg(a, kw, 1, "d");
  const Value* attr = arg(a, kw, 2, "attribute");
  std::string out;
  bool first = true;
  for (const Value& v : items_of(a[0], "join")) {
    if (!first && sep) out += str_of(*sep);
    first = false;
    out += str_of(attr ? attribute_path(v, string_arg(*attr, "join(attribute)")) : v);
  }
  return Json(out);
}

Value filter_trim(Args& a, Kwargs& kw) {
  const Value* chars = arg(a, kw, 1, "chars");
  std::string set = chars && !(chars->is_data() && chars->data().is_null()) ? str_of(*chars) : "";
  const bool with_chars = chars && !(chars->is_data() && chars->data().is_null());
  return Json(py_strip(str_of(a[0]), with_chars ? &set : nullptr, true, true));
}

Value filter_replace(Args& a, Kwargs& kw) {
  std::string s = str_of(a[0]);
  const Value* old_v = arg(a, kw, 1, "old");
  const Value* new_v = arg(a, kw, 2, "new");
  const Value* count_v = arg(a, kw, 3, "count");
  if (!old_v || !new_v) fail("replace expects the old and the new text");
  const std::string from = str_of(*old_v), to = str_of(*new_v);
  int64_t count =
      count_v && !(count_v->is_data() && count_v->data().is_null()) ? int_arg(*count_v, "replace(count)") : -1;
  if (from.empty()) {  // Python inserts `to` between characters and at both ends
    const auto cps = code_points(s);
    std::string out;
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < cps.size()) out += from_code_points(cps, i, i + 1);
    }
    return Json(out);
  }
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  for (size_t at = s.find(from); at != std::string::npos && (count < 0 || done < count); at = s.find(from, pos)) {
    out += s.substr(pos, at - pos) + to;
    pos = at + from.size();
    ++done;
  }
  return Json(out + s.substr(pos));
}

Value first_or_last(Args& a, bool last) {
  std::vector<Value> items = items_of(a[0], last ? "last" : "first");
  if (items.empty()) return Value::undefined(last ? "last of an empty sequence" : "first of an empty sequence");
  return last ? items.back() : items.front();
}

Value filter_reverse(Args& a, Kwargs&) {
  if (a[0].is_data() && a[0].data().is_string()) {
    auto cps = code_points(a[0].data().get<std::string>());
    std::reverse(cps.begin(), cps.end());
    return Json(from_code_points(cps, 0, cps.size()));
  }
  std::vector<Value> items = items_of(a[0], "reverse");
  std::reverse(items.begin(), items.end());
  return list_of(items, "reverse");
}

Value filter_int(Args& a, Kwargs& kw) {
  const Value* def = arg(a, kw, 1, "default");
  const Json fallback = def ? to_data(*def, "int(default)") : Json(0);
  if (!a[0].is_data()) return fallback;
  const Json& j = a[0].data();
  if (j.is_number_integer()) return j;
  if (j.is_boolean()) return Json(j.get<bool>() ? 1 : 0);
  if (j.is_number_float()) return Json(static_cast<int64_t>(std::trunc(j.get<double>())));
  if (j.is_string()) {
    const std::string s = py_strip(j.get<std::string>(), nullptr, true, true);
    try {
      size_t used = 0;
      const long long v = std::stoll(s, &used);
      if (used == s.size()) return Json(static_cast<int64_t>(v));
      const double d = std::stod(s, &used);
      if (used == s.size()) return Json(static_cast<int64_t>(std::trunc(d)));
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value filter_float(Args& a, Kwargs& kw) {
  const Value* def = arg(a, kw, 1, "default");
  const Json fallback = def ? to_data(*def, "float(default)") : Json(0.0);
  if (!a[0].is_data()) return fallback;
  const Json& j = a[0].data();
  if (j.is_number()) return Json(j.get<double>());
  if (j.is_boolean()) return Json(j.get<bool>() ? 1.0 : 0.0);
  if (j.is_string()) {
    const std::string s = py_strip(j.get<std::string>(), nullptr, true, true);
    try {
      size_t used = 0;
      const double d = std::stod(s, &used);
      if (used == s.size()) return Json(d);
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value filter_list(Args& a, Kwargs&) { return list_of(items_of(a[0], "list"), "list"); }

Value filter_items(Args& a, Kwargs&) {
  if (a[0].is_undefined()) return Json::array();
  const Json& j = data_of(a[0], "items");
  if (!j.is_object()) fail(fmt::format("items expects a dict, got {}", type_name(a[0])));
  Json out = Json::array();
  for (auto it = j.begin(); it != j.end(); ++it) out.push_back(Json::array({it.key(), it.value()}));
  return out;
}

Value filter_dictsort(Args& a, Kwargs& kw) {
  Value items = filter_items(a, kw);
  Json list = items.data();
  const Value* by = kwarg(kw, "by");
  const bool by_value = by && str_of(*by) == "value";
  const Value* rev = kwarg(kw, "reverse");
  std::stable_sort(list.begin(), list.end(), [&](const Json& x, const Json& y) {
    const Json &kx = x[by_value ? 1 : 0], &ky = y[by_value ? 1 : 0];
    if (kx.is_string() && ky.is_string()) return py_lower(kx.get<std::string>()) < py_lower(ky.get<std::string>());
    return less(kx, ky, "dictsort");
  });
  if (rev && truthy(*rev)) std::reverse(list.begin(), list.end());
  return list;
}

// select/reject(seq, test, args...) and selectattr/rejectattr(seq, attr, test, args...).
Value filter_select(Args& a, Kwargs&, bool by_attribute, bool keep) {
  size_t next = 1;
  std::string attr;
  if (by_attribute) {
    if (a.size() < 2) fail("selectattr/rejectattr expect an attribute name");
    attr = string_arg(a[next++], "selectattr(attribute)");
  }
  std::string test;
  if (next < a.size()) test = string_arg(a[next++], "select(test)");
  Json out = Json::array();
  for (const Value& item : items_of(a[0], "select")) {
    const Value subject = by_attribute ? attribute_path(item, attr) : item;
    bool pass;
    if (test.empty()) {
      pass = truthy(subject);
    } else {
      Args targs{subject};
      for (size_t k = next; k < a.size(); ++k) targs.push_back(a[k]);
      if (!has_test(test)) fail(fmt::format("unknown test \"{}\"", test));
      pass = apply_test(test, targs);
    }
    if (pass == keep) out.push_back(to_data(item, "select"));
  }
  return out;
}

Value filter_map(Args& a, Kwargs& kw) {
  Json out = Json::array();
  const Value* attr = kwarg(kw, "attribute");
  const Value* def = kwarg(kw, "default");
  for (const Value& item : items_of(a[0], "map")) {
    if (attr) {
      Value v = attribute_path(item, str_of(*attr));
      if (v.is_undefined() && def) v = *def;
      out.push_back(v.is_undefined() ? Json(nullptr) : to_data(v, "map"));
    } else {
      if (a.size() < 2) fail("map expects a filter name or attribute=");
      const std::string name = string_arg(a[1], "map(filter)");
      if (!has_filter(name)) fail(fmt::format("unknown filter \"{}\"", name));
      Args fargs{item};
      for (size_t k = 2; k < a.size(); ++k) fargs.push_back(a[k]);
      Kwargs fkw;
      out.push_back(to_data(apply_filter(name, fargs, fkw), "map"));
    }
  }
  return out;
}

Value filter_sort(Args& a, Kwargs& kw) {
  std::vector<Value> items = items_of(a[0], "sort");
  const Value* rev = arg(a, kw, 1, "reverse");
  const Value* cs = arg(a, kw, 2, "case_sensitive");
  const Value* attr = arg(a, kw, 3, "attribute");
  const bool case_sensitive = cs && truthy(*cs);
  auto key = [&](const Value& v) {
    Json k = to_data(attr ? attribute_path(v, str_of(*attr)) : v, "sort");
    if (!case_sensitive && k.is_string()) k = py_lower(k.get<std::string>());
    return k;
  };
  std::stable_sort(items.begin(), items.end(),
                   [&](const Value& x, const Value& y) { return less(key(x), key(y), "sort"); });
  if (rev && truthy(*rev)) std::reverse(items.begin(), items.end());
  return list_of(items, "sort");
}

Value filter_unique(Args& a, Kwargs& kw) {
  const Value* attr = kwarg(kw, "attribute");
  Json out = Json::array();
  std::vector<Json> seen;
  for (const Value& item : items_of(a[0], "unique")) {
    Json k = to_data(attr ? attribute_path(item, str_of(*attr)) : item, "unique");
    if (k.is_string()) k = py_lower(k.get<std::string>());
    if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
    seen.push_back(k);
    out.push_back(to_data(item, "unique"));
  }
  return out;
}

Value filter_indent(Args& a, Kwargs& kw) {
  const std::string s = str_of(a[0]);
  const Value* width_v = arg(a, kw, 1, "width");
  const Value* first_v = arg(a, kw, 2, "first");
  const Value* blank_v = arg(a, kw, 3, "blank");
  const std::string pad = width_v && width_v->is_data() && width_v->data().is_string()
                              ? width_v->data().get<std::string>()
                              : std::string(static_cast<size_t>(width_v ? int_arg(*width_v, "indent(width)") : 4), ' ');
  const bool first = first_v && truthy(*first_v), blank = blank_v && truthy(*blank_v);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl = s.find('\n'); nl != std::string::npos; nl = s.find('\n', start)) {
    lines.push_back(s.substr(start, nl - start));
    start = nl + 1;
  }
  lines.push_back(s.substr(start));
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    const bool indent = (i == 0 ? first : true) && (blank || !lines[i].empty());
    out += (indent ? pad : "") + lines[i];
  }
  return Json(out);
}

Value filter_escape(Args& a, Kwargs&) {
  std::string out;
  for (char c : str_of(a[0])) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return Json(out);
}

Value filter_round(Args& a, Kwargs& kw) {
  const Json& j = data_of(a[0], "round");
  if (!j.is_number()) fail(fmt::format("round expects a number, got {}", type_name(a[0])));
  const Value* p = arg(a, kw, 1, "precision");
  const Value* m = arg(a, kw, 2, "method");
  const int64_t precision = p ? int_arg(*p, "round(precision)") : 0;
  const std::string method = m ? str_of(*m) : "common";
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = j.get<double>() * scale;
  const double r = method == "floor" ? std::floor(x) : method == "ceil" ? std::ceil(x) : std::round(x);
  return Json(r / scale);
}

Value filter_sum(Args& a, Kwargs& kw) {
  const Value* attr = kwarg(kw, "attribute");
  const Value* start = kwarg(kw, "start");
  Json total = start ? to_data(*start, "sum(start)") : Json(0);
  for (const Value& item : items_of(a[0], "sum")) {
    const Json v = to_data(attr ? attribute_path(item, str_of(*attr)) : item, "sum");
    if (!v.is_number() || !total.is_number()) fail("sum expects numbers");
    if (v.is_number_integer() && total.is_number_integer())
      total = total.get<int64_t>() + v.get<int64_t>();
    else
      total = total.get<double>() + v.get<double>();
  }
  return total;
}

Value filter_min_max(Args& a, Kwargs& kw, bool max) {
  const Value* attr = kwarg(kw, "attribute");
  std::vector<Value> items = items_of(a[0], max ? "max" : "min");
  if (items.empty()) return Value::undefined("min/max of an empty sequence");
  size_t best = 0;
  auto key = [&](size_t i) {
    Json k = to_data(attr ? attribute_path(items[i], str_of(*attr)) : items[i], "min/max");
    return k.is_string() ? Json(py_lower(k.get<std::string>())) : k;
  };
  for (size_t i = 1; i < items.size(); ++i)
    if (max ? less(key(best), key(i), "max") : less(key(i), key(best), "min")) best = i;
  return items[best];
}

Value filter_abs(Args& a, Kwargs&) {
  const Json& j = data_of(a[0], "abs");
  if (j.is_number_integer()) return Json(std::llabs(j.get<int64_t>()));
  if (j.is_number()) return Json(std::fabs(j.get<double>()));
  fail(fmt::format("abs expects a number, got {}", type_name(a[0])));
}

using Filter = Value (*)(Args&, Kwargs&);
const std::map<std::string, std::function<Value(Args&, Kwargs&)>>& filters() {
  static const std::map<std::string, std::function<Value(Args&, Kwargs&)>> table = {
      {"abs", filter_abs},
      {"capitalize", [](Args& a, Kwargs&) { return Value(Json(py_capitalize(str_of(a[0])))); }},
      {"count", filter_length},
      {"d", filter_default},
      {"default", filter_default},
      {"dictsort", filter_dictsort},
      {"e", filter_escape},
      {"escape", filter_escape},
      {"first", [](Args& a, Kwargs&) { return first_or_last(a, false); }},
      {"float", filter_float},
      {"indent", filter_indent},
      {"int", filter_int},
      {"items", filter_items},
      {"join", filter_join},
      {"last", [](Args& a, Kwargs&) { return first_or_last(a, true); }},
      {"length", filter_length},
      {"list", filter_list},
      {"lower", [](Args& a, Kwargs&) { return Value(Json(py_lower(str_of(a[0])))); }},
      {"map", filter_map},
      {"max", [](Args& a, Kwargs& kw) { return filter_min_max(a, kw, true); }},
      {"min", [](Args& a, Kwargs& kw) { return filter_min_max(a, kw, false); }},
      {"reject", [](Args& a, Kwargs& kw) { return filter_select(a, kw, false, false); }},
      {"rejectattr", [](Args& a, Kwargs& kw) { return filter_select(a, kw, true, false); }},
      {"replace", filter_replace},
      {"reverse", filter_reverse},
      {"round", filter_round},
      {"safe", [](Args& a, Kwargs&) { return a[0]; }},
      {"select", [](Args& a, Kwargs& kw) { return filter_select(a, kw, false, true); }},
      {"selectattr", [](Args& a, Kwargs& kw) { return filter_select(a, kw, true, true); }},
      {"sort", filter_sort},
      {"string", [](Args& a, Kwargs&) { return Value(Json(str_of(a[0]))); }},
      {"sum", filter_sum},
      {"title", [](Args& a, Kwargs&) { return Value(Json(py_title(str_of(a[0])))); }},
      {"tojson", filter_tojson},
      {"trim", filter_trim},
      {"unique", filter_unique},
      {"upper", [](Args& a, Kwargs&) { return Value(Json(py_upper(str_of(a[0])))); }},
      {"wordcount",
       [](Args& a, Kwargs&) {
         int64_t n = 0;
         bool in_word = false;
         for (char32_t c : code_points(str_of(a[0]))) {
           const bool word = !py_isspace(c);
           if (word && !in_word) ++n;
           in_word = word;
         }
         return Value(Json(n));
       }},
  };
  return table;
}

// ---- tests ----

bool is_number(const Json& j) { return j.is_number() || j.is_boolean(); }

bool compare_test(const std::string& name, Args& a) {
  if (a.size() < 2) fail(fmt::format("the test \"{}\" expects a value to compare with", name));
  if (name == "eq" || name == "equalto" || name == "==") return equal(a[0], a[1]);
  if (name == "ne" || name == "!=") return !equal(a[0], a[1]);
  const Json& x = data_of(a[0], name);
  const Json& y = data_of(a[1], name);
  if (name == "lt" || name == "lessthan" || name == "<") return less(x, y, name);
  if (name == "gt" || name == "greaterthan" || name == ">") return less(y, x, name);
  if (name == "le" || name == "<=") return !less(y, x, name);
  return !less(x, y, name);  // ge, >=
}

const std::map<std::string, std::function<bool(Args&)>>& tests() {
  auto data = [](const Value& v) { return v.is_data() ? &v.data() : nullptr; };
  static const std::map<std::string, std::function<bool(Args&)>> table = {
      {"defined", [](Args& a) { return !a[0].is_undefined(); }},
      {"undefined", [](Args& a) { return a[0].is_undefined(); }},
      {"none", [data](Args& a) { return data(a[0]) && data(a[0])->is_null(); }},
      {"boolean", [data](Args& a) { return data(a[0]) && data(a[0])->is_boolean(); }},
      {"true", [data](Args& a) { return data(a[0]) && data(a[0])->is_boolean() && data(a[0])->get<bool>(); }},
      {"false", [data](Args& a) { return data(a[0]) && data(a[0])->is_boolean() && !data(a[0])->get<bool>(); }},
      {"integer", [data](Args& a) { return data(a[0]) && data(a[0])->is_number_integer(); }},
      {"float", [data](Args& a) { return data(a[0]) && data(a[0])->is_number_float(); }},
      {"number", [data](Args& a) { return data(a[0]) && is_number(*data(a[0])); }},
      {"string", [data](Args& a) { return data(a[0]) && data(a[0])->is_string(); }},
      {"mapping",
       [data](Args& a) { return (data(a[0]) && data(a[0])->is_object()) || a[0].kind() == Value::Kind::kObject; }},
      {"iterable",
       [data](Args& a) {
         return a[0].is_undefined() ||
                (data(a[0]) && (data(a[0])->is_array() || data(a[0])->is_object() || data(a[0])->is_string()));
       }},
      {"sequence",
       [data](Args& a) {
         return a[0].is_undefined() ||
                (data(a[0]) && (data(a[0])->is_array() || data(a[0])->is_object() || data(a[0])->is_string()));
       }},
      {"callable", [](Args& a) { return a[0].kind() == Value::Kind::kCallable; }},
      {"sameas",
       [](Args& a) {
         if (a.size() < 2) fail("the test \"sameas\" expects a value");
         if (a[0].is_data() && a[1].is_data()) {
           const Json &x = a[0].data(), &y = a[1].data();
           if (x.is_null() || x.is_boolean() || y.is_null() || y.is_boolean()) return x.type() == y.type() && x == y;
           return &x == &y;
         }
         return equal(a[0], a[1]);
       }},
      {"in",
       [](Args& a) {
         if (a.size() < 2) fail("the test \"in\" expects a container");
         const Json& c = data_of(a[1], "in");
         if (c.is_string()) return c.get<std::string>().find(str_of(a[0])) != std::string::npos;
         if (c.is_object())
           return a[0].is_data() && a[0].data().is_string() && c.contains(a[0].data().get<std::string>());
         if (c.is_array()) {
           for (const Json& e : c)
             if (equal(a[0], Value(e))) return true;
           return false;
         }
         fail("the test \"in\" expects a string, list or dict");
       }},
      {"odd", [](Args& a) { return int_arg(a[0], "odd") % 2 != 0; }},
      {"even", [](Args& a) { return int_arg(a[0], "even") % 2 == 0; }},
      {"divisibleby",
       [](Args& a) {
         if (a.size() < 2) fail("the test \"divisibleby\" expects a number");
         const int64_t d = int_arg(a[1], "divisibleby");
         if (d == 0) fail("divisibleby 0");
         return int_arg(a[0], "divisibleby") % d == 0;
       }},
      {"lower",
       [](Args& a) {
         const std::string s = str_of(a[0]);
         return py_lower(s) == s;
       }},
      {"upper",
       [](Args& a) {
         const std::string s = str_of(a[0]);
         return py_upper(s) == s;
       }},
      {"escaped", [](Args&) { return false; }},
  };
  return table;
}

const std::vector<std::string> kCompareTests = {"eq", "equalto",     "==", "ne", "!=", "lt", "lessthan", "<",
                                                "gt", "greaterthan", ">",  "le", "<=", "ge", ">="};

// ---- str and dict methods ----

// Python's str.split(sep, maxsplit) and rsplit.
Json split(const std::string& s, const Value* sep_v, const Value* max_v, bool from_right) {
  const int64_t maxsplit = max_v ? int_arg(*max_v, "split(maxsplit)") : -1;
  Json out = Json::array();
  const bool whitespace = !sep_v || (sep_v->is_data() && sep_v->data().is_null());
  if (whitespace) {
    auto cps = code_points(s);
    if (from_right) std::reverse(cps.begin(), cps.end());
    std::vector<std::string> parts;
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && py_isspace(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t end = cps.size();
        while (end > i && py_isspace(cps[end - 1])) --end;
        std::vector<char32_t> rest(cps.begin() + static_cast<std::ptrdiff_t>(i),
                                   cps.begin() + static_cast<std::ptrdiff_t>(end));
        if (from_right) std::reverse(rest.begin(), rest.end());
        parts.push_back(from_code_points(rest, 0, rest.size()));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !py_isspace(cps[j])) ++j;
      std::vector<char32_t> word(cps.begin() + static_cast<std::ptrdiff_t>(i),
                                 cps.begin() + static_cast<std::ptrdiff_t>(j));
      if (from_right) std::reverse(word.begin(), word.end());
      parts.push_back(from_code_points(word, 0, word.size()));
      i = j;
    }
    if (from_right) std::reverse(parts.begin(), parts.end());
    for (auto& p : parts) out.push_back(p);
    return out;
  }
  const std::string sep = str_of(*sep_v);
  if (sep.empty()) fail("split: empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t pos = 0;
    for (size_t at = s.find(sep);
         at != std::string::npos && (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit);
         at = s.find(sep, pos)) {
      parts.push_back(s.substr(pos, at - pos));
      pos = at + sep.size();
    }
    parts.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep.size()) break;
      const size_t at = s.rfind(sep, end - sep.size());
      if (at == std::string::npos) break;
      parts.push_back(s.substr(at + sep.size(), end - at - sep.size()));
      end = at;
    }
    parts.push_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
  }
  for (auto& p : parts) out.push_back(p);
  return out;
}

bool matches_affix(const std::string& s, const Value& affix, bool suffix) {
  auto one = [&](const std::string& a) {
    return suffix ? s.size() >= a.size() && s.compare(s.size() - a.size(), a.size(), a) == 0
                  : s.compare(0, a.size(), a) == 0;
  };
  if (affix.is_data() && affix.data().is_array()) {
    for (const Json& a : affix.data())
      if (a.is_string() && one(a.get<std::string>())) return true;
    return false;
  }
  return one(string_arg(affix, suffix ? "endswith" : "startswith"));
}

Value string_method(const std::string& s, const std::string& name) {
  auto pred = [&](std::function<bool(char32_t)> f) {
    return callable(name, [s, f](Args&, Kwargs&) {
      const auto cps = code_points(s);
      return Value(Json(!cps.empty() && std::all_of(cps.begin(), cps.end(), f)));
    });
  };
  if (name == "startswith" || name == "endswith")
    return callable(name, [s, name](Args& a, Kwargs&) {
      if (a.empty()) fail(fmt::format("{} expects an argument", name));
      return Value(Json(matches_affix(s, a[0], name == "endswith")));
    });
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return callable(name, [s, name](Args& a, Kwargs&) {
      std::string chars;
      const bool with = !a.empty() && !(a[0].is_data() && a[0].data().is_null());
      if (with) chars = string_arg(a[0], name);
      return Value(Json(py_strip(s, with ? &chars : nullptr, name != "rstrip", name != "lstrip")));
    });
  if (name == "split" || name == "rsplit")
    return callable(name, [s, name](Args& a, Kwargs& kw) {
      return Value(split(s, arg(a, kw, 0, "sep"), arg(a, kw, 1, "maxsplit"), name == "rsplit"));
    });
  if (name == "upper") return callable(name, [s](Args&, Kwargs&) { return Value(Json(py_upper(s))); });
  if (name == "lower") return callable(name, [s](Args&, Kwargs&) { return Value(Json(py_lower(s))); });
  if (name == "title") return callable(name, [s](Args&, Kwargs&) { return Value(Json(py_title(s))); });
  if (name == "capitalize") return callable(name, [s](Args&, Kwargs&) { return Value(Json(py_capitalize(s))); });
  if (name == "replace")
    return callable(name, [s](Args& a, Kwargs& kw) {
      Args fa{Value(Json(s))};
      fa.insert(fa.end(), a.begin(), a.end());
      return filter_replace(fa, kw);
    });
  if (name == "find" || name == "rfind" || name == "count")
    return callable(name, [s, name](Args& a, Kwargs&) {
      if (a.empty()) fail(fmt::format("{} expects an argument", name));
      const std::string sub = string_arg(a[0], name);
      if (name == "count") {
        if (sub.empty()) return Value(Json(static_cast<int64_t>(code_points(s).size() + 1)));
        int64_t n = 0;
        for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
        return Value(Json(n));
      }
      const size_t at = name == "find" ? s.find(sub) : s.rfind(sub);
      if (at == std::string::npos) return Value(Json(-1));
      return Value(Json(static_cast<int64_t>(code_points(s.substr(0, at)).size())));
    });
  if (name == "join")
    return callable(name, [s](Args& a, Kwargs&) {
      if (a.empty()) fail("join expects an iterable");
      std::string out;
      bool first = true;
      for (const Value& v : items_of(a[0], "join")) {
        if (!first) out += s;
        first = false;
        out += string_arg(v, "join");
      }
      return Value(Json(out));
    });
  if (name == "splitlines")
    return callable(name, [s](Args&, Kwargs&) {
      Json out = Json::array();
      size_t start = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
          out.push_back(s.substr(start, i - start));
          if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
          start = i + 1;
        }
      }
      if (start < s.size()) out.push_back(s.substr(start));
      return Value(out);
    });
  if (name == "isdigit") return pred([](char32_t c) { return c >= '0' && c <= '9'; });
  if (name == "isspace") return pred(py_isspace);
  if (name == "isalpha") return pred([](char32_t c) { return (tok::char_class(c) & tok::kLetter) != 0; });
  if (name == "isalnum")
    return pred([](char32_t c) { return (tok::char_class(c) & (tok::kLetter | tok::kNumber)) != 0; });
  return Value::undefined(fmt::format("'str object' has no attribute '{}'", name));
}

Value dict_method(const Value& self, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values")
    return callable(name, [self, name](Args&, Kwargs&) {
      Json out = Json::array();
      for (auto it = self.data().begin(); it != self.data().end(); ++it) {
        if (name == "items")
          out.push_back(Json::array({it.key(), it.value()}));
        else if (name == "keys")
          out.push_back(it.key());
        else
          out.push_back(it.value());
      }
      return Value(out);
    });
  if (name == "get")
    return callable(name, [self](Args& a, Kwargs&) {
      if (a.empty()) fail("get expects a key");
      const std::string key =
          a[0].is_data() && a[0].data().is_string() ? a[0].data().get<std::string>() : repr(to_data(a[0], "get"));
      if (self.data().contains(key)) return self.child(self.data()[key]);
      return a.size() > 1 ? a[1] : Value(Json(nullptr));
    });
  return Value::undefined();
}

}  // namespace

// The items of an iterable: a list's elements, a dict's keys, a string's characters;
// undefined iterates as empty (Jinja's Undefined).
std::vector<Value> items_of(const Value& v, const std::string& what) {
  std::vector<Value> out;
  if (v.is_undefined()) return out;
  const Json& j = data_of(v, what);
  if (j.is_array()) {
    for (const Json& e : j) out.push_back(v.child(e));
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) out.emplace_back(Json(it.key()));
  } else if (j.is_string()) {
    const auto cps = code_points(j.get_ref<const std::string&>());
    for (size_t i = 0; i < cps.size(); ++i) out.emplace_back(Json(from_code_points(cps, i, i + 1)));
  } else {
    fail(fmt::format("{}: a {} is not iterable", what, type_name(v)));
  }
  return out;
}

Value apply_filter(const std::string& name, Args& args, Kwargs& kwargs) {
  const auto& table = filters();
  const auto it = table.find(name);
  if (it == table.end()) fail(fmt::format("unknown filter \"{}\"", name));
  return it->second(args, kwargs);
}

bool has_filter(const std::string& name) { return filters().count(name) > 0; }

bool apply_test(const std::string& name, Args& args) {
  if (std::find(kCompareTests.begin(), kCompareTests.end(), name) != kCompareTests.end())
    return compare_test(name, args);
  const auto& table = tests();
  const auto it = table.find(name);
  if (it == table.end()) fail(fmt::format("unknown test \"{}\"", name));
  return it->second(args);
}

bool has_test(const std::string& name) {
  return tests().count(name) > 0 || std::find(kCompareTests.begin(), kCompareTests.end(), name) != kCompareTests.end();
}

Value attribute(const Value& self, const std::string& name) {
  if (self.is_undefined())
    fail(fmt::format("{} (reading its attribute \"{}\")", self.what().empty() ? "undefined value" : self.what(), name));
  if (self.kind() == Value::Kind::kObject) {
    auto it = self.object().fields.find(name);
    if (it != self.object().fields.end()) return it->second;
    return Value::undefined(fmt::format("'{} object' has no attribute '{}'", self.object().type, name));
  }
  if (!self.is_data()) return Value::undefined(fmt::format("'function' has no attribute '{}'", name));
  const Json& j = self.data();
  if (j.is_string()) return string_method(j.get_ref<const std::string&>(), name);
  if (j.is_object()) {
    Value method = dict_method(self, name);
    if (!method.is_undefined()) return method;
    if (j.contains(name)) return self.child(j[name]);
    return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
  }
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(self), name));
}

const std::map<std::string, Value>& globals() {
  static const std::map<std::string, Value> table = {
      {"range", callable("range",
                         [](Args& a, Kwargs&) {
                           if (a.empty() || a.size() > 3) fail("range expects 1 to 3 integers");
                           int64_t start = 0, stop, step = 1;
                           if (a.size() == 1) {
                             stop = int_arg(a[0], "range");
                           } else {
                             start = int_arg(a[0], "range");
                             stop = int_arg(a[1], "range");
                             if (a.size() == 3) step = int_arg(a[2], "range");
                           }
                           if (step == 0) fail("range: the step is 0");
                           Json out = Json::array();
                           for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                             if (static_cast<int64_t>(out.size()) >= kMaxRange)
                               fail(fmt::format("range: more than {} elements", kMaxRange));
                             out.push_back(i);
                           }
                           return Value(out);
                         })},
      {"namespace", callable("namespace",
                             [](Args& a, Kwargs& kw) {
                               auto o = std::make_shared<Object>();
                               o->type = "namespace";
                               for (const Value& init : a) {  // namespace(some_dict)
                                 const Json& d = data_of(init, "namespace");
                                 if (!d.is_object()) fail("namespace expects keyword arguments or a dict");
                                 for (auto it = d.begin(); it != d.end(); ++it) o->fields[it.key()] = Value(it.value());
                               }
                               for (auto& kv : kw) o->fields[kv.first] = kv.second;
                               return Value::object(o);
                             })},
      {"dict", callable("dict",
                        [](Args& a, Kwargs& kw) {
                          Json out = Json::object();
                          for (const Value& init : a) {
                            const Json& d = data_of(init, "dict");
                            if (!d.is_object()) fail("dict expects keyword arguments or a dict");
                            for (auto it = d.begin(); it != d.end(); ++it) out[it.key()] = it.value();
                          }
                          for (auto& kv : kw) out[kv.first] = to_data(kv.second, "dict");
                          return Value(out);
                        })},
      {"raise_exception",
       callable("raise_exception",
                [](Args& a, Kwargs&) -> Value { throw TemplateRaised{a.empty() ? std::string() : to_str(a[0])}; })},
      {"strftime_now", callable("strftime_now",
                                [](Args& a, Kwargs&) {
                                  if (a.empty()) fail("strftime_now expects a format");
                                  const std::string format = string_arg(a[0], "strftime_now");
                                  const std::time_t now = std::time(nullptr);
                                  std::tm local{};
                                  localtime_r(&now, &local);
                                  char buf[256];
                                  const size_t n = std::strftime(buf, sizeof buf, format.c_str(), &local);
                                  return Value(Json(std::string(buf, n)));
                                })},
  };
  return table;
}

}  // namespace verlpp::model::jinja
