// JSON written as Python's json.dumps writes it with its default separators (", " and ": ") and
// ensure_ascii=False: what Hugging Face's `tojson` template filter and verl's tool-call parser
// produce, so text this library renders (a tool schema in a prompt, a call's arguments) is the
// text the model was trained on, byte for byte.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace verlpp {

// `value` as json.dumps(value, ensure_ascii=False) writes it: objects in their own key order.
std::string python_json_dumps(const nlohmann::ordered_json& value);

}  // namespace verlpp
