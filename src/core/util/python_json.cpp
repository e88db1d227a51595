// Python's json.dumps layout: the scalars are written as nlohmann writes them (the same escapes
// for ensure_ascii=False, shortest round-trip floats with Python's exponent form), the
// containers with Python's separators and indentation.
#include <verlpp/core/python_json.hpp>

#include <algorithm>
#include <cstdio>
#include <limits>

namespace verlpp {
namespace {

struct Writer {
  const PythonJsonOptions& options;
  std::string item_sep, key_sep;
  std::string& out;

  void newline(int depth) {
    if (options.indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(options.indent) * static_cast<size_t>(depth), ' ');
  }

  // A string's JSON form; with ensure_ascii, every code point above U+007F as \uXXXX.
  void string(const std::string& s) {
    std::string dumped =
        nlohmann::ordered_json(s).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    if (!options.ensure_ascii) {
      out += dumped;
      return;
    }
    for (size_t i = 0; i < dumped.size();) {
      const auto b = static_cast<unsigned char>(dumped[i]);
      if (b < 0x80) {
        out += dumped[i++];
        continue;
      }
      const int extra = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : 1;
      char32_t c = b & (0x3F >> extra);
      for (int k = 1; k <= extra && i + k < dumped.size(); ++k)
        c = (c << 6) | (static_cast<unsigned char>(dumped[i + k]) & 0x3F);
      i += extra + 1;
      char buf[16];
      if (c >= 0x10000) {
        const char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    }
  }

  void write(const nlohmann::ordered_json& value, int depth) {
    if (value.is_object()) {
      if (value.empty()) {
        out += "{}";
        return;
      }
      std::vector<nlohmann::ordered_json::const_iterator> items;
      for (auto it = value.begin(); it != value.end(); ++it) items.push_back(it);
      if (options.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto a, auto b) { return a.key() < b.key(); });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        string(items[i].key());
        out += key_sep;
        write(items[i].value(), depth + 1);
      }
      newline(depth);
      out += '}';
    } else if (value.is_array()) {
      if (value.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < value.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        write(value[i], depth + 1);
      }
      newline(depth);
      out += ']';
    } else if (value.is_string()) {
      string(value.get_ref<const std::string&>());
    } else if (value.is_number_float()) {
      const double x = value.get<double>();
      if (x != x)
        out += "NaN";
      else if (x == std::numeric_limits<double>::infinity())
        out += "Infinity";
      else if (x == -std::numeric_limits<double>::infinity())
        out += "-Infinity";
      else
        out += value.dump();
    } else {
      out += value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    }
  }
};

}  // namespace

std::string python_json_dumps(const nlohmann::ordered_json& value, const PythonJsonOptions& options) {
  std::string out;
  Writer w{options, options.item_separator, options.key_separator, out};
  if (w.item_sep.empty()) w.item_sep = options.indent < 0 ? ", " : ",";
  if (w.key_sep.empty()) w.key_sep = ": ";
  w.write(value, 0);
  return out;
}

std::string python_json_dumps(const nlohmann::ordered_json& value) { return python_json_dumps(value, {}); }

}  // namespace verlpp
