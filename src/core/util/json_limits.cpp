// check_json_depth: counts [ and { outside strings (a backslash escapes the next character in
// a string), so the parser never sees a document deeper than the limit.
#include <verlpp/core/error.hpp>
#include <verlpp/core/json_limits.hpp>

#include <fmt/format.h>

namespace verlpp {

void check_json_depth(std::string_view text, const std::string& where, int max_depth) {
  int depth = 0;
  JsonStringScan strings;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (strings.feed(c)) continue;
    if (c == '[' || c == '{') {
      if (++depth > max_depth)
        throw Error(where, fmt::format("JSON nested deeper than {} levels (at byte {})", max_depth, i));
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;
    }
  }
}

}  // namespace verlpp
