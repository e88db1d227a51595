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

}  // namespace verlpp
