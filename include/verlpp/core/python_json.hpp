// JSON written as Python's json.dumps writes it with its default separators (", " and ": ") and
// ensure_ascii=False: what Hugging Face's `tojson` template filter and verl's tool-call parser
// produce, so text this library renders (a tool schema in a prompt, a call's arguments) is the
// text the model was trained on, byte for byte.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace verlpp {

// json.dumps's layout arguments (Hugging Face's `tojson` filter passes these through).
struct PythonJsonOptions {
  int indent = -1;             // negative: one line (indent=None); otherwise a newline and this many spaces per level
  std::string item_separator;  // empty: Python's default, ", " on one line and "," when indented
  std::string key_separator;   // empty: ": "
  bool sort_keys = false;      // objects' keys in code-point order instead of their own order
  bool ensure_ascii = false;   // non-ASCII characters written as \uXXXX escapes (surrogate pairs above U+FFFF)
};

// `value` as json.dumps(value, ensure_ascii=False) writes it: objects in their own key order.
std::string python_json_dumps(const nlohmann::ordered_json& value);
// `value` as json.dumps writes it with `options`.
std::string python_json_dumps(const nlohmann::ordered_json& value, const PythonJsonOptions& options);

}  // namespace verlpp
