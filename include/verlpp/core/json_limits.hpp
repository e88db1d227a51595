// Limits on the JSON a user hands in (configs, dataset lines, tokenizer.json, config.json,
// safetensors headers). The JSON parser recurses once per nesting level, so a document nested
// 10^5 deep would overflow the stack: every parser of user files checks the depth first, in one
// linear pass that skips strings, and refuses with the file and the byte where the limit is
// crossed.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace verlpp {

// Deeper than any real config, tokenizer or header (they nest under 20 levels).
constexpr int kMaxJsonDepth = 512;

// Throws Error(where, ...) when `text` nests arrays and objects deeper than `max_depth`,
// naming the byte offset at which it does. Text that is not JSON is left to the parser.
void check_json_depth(std::string_view text, const std::string& where, int max_depth = kMaxJsonDepth);

// Tells a JSON text's string literals from the rest, for the passes that read JSON before the
// parser does (the depth check, the metrics reader's NaN quoting): feed it each character in turn.
class JsonStringScan {
 public:
  // Feeds the next character; true when it belongs to a string literal (its quotes included).
  bool feed(char c) {
    if (!in_string_) return in_string_ = c == '"';
    if (escaped_)
      escaped_ = false;
    else if (c == '\\')
      escaped_ = true;
    else if (c == '"')
      in_string_ = false;
    return true;
  }
  // True between a string's opening quote and its closing one.
  bool in_string() const { return in_string_; }

 private:
  bool in_string_ = false;
  bool escaped_ = false;
};

}  // namespace verlpp
