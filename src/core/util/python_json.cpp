// Python's json.dumps layout: the scalars are written as nlohmann writes them (the same escapes
// for ensure_ascii=False, shortest round-trip floats with Python's exponent form), the
// containers with ", " between items and ": " after keys.
#include <verlpp/core/python_json.hpp>

#include <limits>

namespace verlpp {
namespace {

void write(const nlohmann::ordered_json& value, std::string& out) {
  if (value.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += nlohmann::ordered_json(it.key()).dump();
      out += ": ";
      write(it.value(), out);
    }
    out += '}';
  } else if (value.is_array()) {
    out += '[';
    for (size_t i = 0; i < value.size(); ++i) {
      if (i) out += ", ";
      write(value[i], out);
    }
    out += ']';
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

}  // namespace

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  write(value, out);
  return out;
}

}  // namespace verlpp
