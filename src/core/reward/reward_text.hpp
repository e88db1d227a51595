// Python str semantics for the rule rewards: verl's scorers are Python, so lengths, slices and
// indices count code points, str.isspace/isdigit/isalnum/lower follow Unicode, and regular
// expressions see code points. The rules decode UTF-8 to UTF-32 once, work on code points, and
// encode the results back. Invalid UTF-8 bytes decode to U+FFFD each.
#pragma once

#include <string>
#include <vector>

namespace verlpp::reward::rules::text {

using U32 = std::u32string;

U32 from_utf8(const std::string& s);
std::string to_utf8(const U32& s);

// Python's str.isspace() for one code point (White_Space as CPython defines it).
bool is_space(char32_t c);
// Python's str.isdigit() for one code point (Numeric_Type Decimal or Digit).
bool is_digit(char32_t c);
// Python's regex word character: str.isalnum() or '_'.
bool is_word(char32_t c);
// Python's str.lower(): full case mapping, with the final-sigma rule.
U32 lower(const U32& s);

// Python's s.strip() with no argument.
U32 strip(const U32& s);
// Python's s.split() with no argument: runs of whitespace separate, no empty pieces.
std::vector<U32> split_whitespace(const U32& s);
// Python's s.split(sep): keeps empty pieces.
std::vector<U32> split_on(const U32& s, const U32& sep);
// Python's s.replace(from, to) for a non-empty `from`.
U32 replace_all(U32 s, const U32& from, const U32& to);
// Python's `sub in s`.
inline bool contains(const U32& s, const U32& sub) { return s.find(sub) != U32::npos; }
// Python's s.count(sub) for a non-empty `sub`: non-overlapping occurrences.
size_t count(const U32& s, const U32& sub);
// Python's s[-n:].
inline U32 last(const U32& s, size_t n) { return s.size() > n ? s.substr(s.size() - n) : s; }

}  // namespace verlpp::reward::rules::text
