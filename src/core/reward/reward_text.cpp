// Python str semantics on code points, with ICU for the Unicode character properties and case
// mapping (the same Unicode data CPython's str methods read).
#include "reward_text.hpp"

#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include <vector>

namespace verlpp::reward::rules::text {

U32 from_utf8(const std::string& s) {
  U32 out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char b = p[i];
    int len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    char32_t c = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    bool ok = len > 0 && i + size_t(len) <= n;
    for (int k = 1; ok && k < len; ++k) {
      if ((p[i + size_t(k)] & 0xC0) != 0x80) ok = false;
      c = (c << 6) | (p[i + size_t(k)] & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid too.
    if (ok && ((len == 2 && c < 0x80) || (len == 3 && c < 0x800) || (len == 4 && c < 0x10000) ||
               (c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF))
      ok = false;
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(c);
    i += size_t(len);
  }
  return out;
}

std::string to_utf8(const U32& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x80) {
      out.push_back(char(c));
    } else if (c < 0x800) {
      out.push_back(char(0xC0 | (c >> 6)));
      out.push_back(char(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(char(0xE0 | (c >> 12)));
      out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(char(0x80 | (c & 0x3F)));
    } else {
      out.push_back(char(0xF0 | (c >> 18)));
      out.push_back(char(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(char(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

bool is_space(char32_t c) {
  // CPython's list: bidirectional class WS, B or S, or general category Zs.
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_digit(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const int type = u_getIntPropertyValue(UChar32(c), UCHAR_NUMERIC_TYPE);
  return type == U_NT_DECIMAL || type == U_NT_DIGIT;
}

bool is_word(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  // str.isalnum(): a letter (categories Lu Ll Lt Lm Lo) or any numeric character.
  const int8_t category = u_charType(UChar32(c));
  if (category == U_UPPERCASE_LETTER || category == U_LOWERCASE_LETTER || category == U_TITLECASE_LETTER ||
      category == U_MODIFIER_LETTER || category == U_OTHER_LETTER)
    return true;
  return u_getIntPropertyValue(UChar32(c), UCHAR_NUMERIC_TYPE) != U_NT_NONE;
}

U32 lower(const U32& s) {
  bool ascii = true;
  for (char32_t c : s) ascii = ascii && c < 0x80;
  if (ascii) {
    U32 out = s;
    for (auto& c : out)
      if (c >= 'A' && c <= 'Z') c = c - 'A' + 'a';
    return out;
  }
  // Through UTF-16, ICU's root-locale full lowercase mapping (final sigma included).
  std::vector<UChar> utf16(s.size() * 2 + 1);
  int32_t len16 = 0;
  UErrorCode status = U_ZERO_ERROR;
  u_strFromUTF32(utf16.data(), int32_t(utf16.size()), &len16, reinterpret_cast<const UChar32*>(s.data()),
                 int32_t(s.size()), &status);
  if (U_FAILURE(status)) return s;
  std::vector<UChar> lowered(size_t(len16) * 3 + 1);
  status = U_ZERO_ERROR;
  const int32_t len_lower = u_strToLower(lowered.data(), int32_t(lowered.size()), utf16.data(), len16, "", &status);
  if (U_FAILURE(status)) return s;
  U32 out(size_t(len_lower), U'\0');
  int32_t len32 = 0;
  status = U_ZERO_ERROR;
  u_strToUTF32(reinterpret_cast<UChar32*>(out.data()), int32_t(out.size()), &len32, lowered.data(), len_lower, &status);
  if (U_FAILURE(status)) return s;
  out.resize(size_t(len32));
  return out;
}

U32 strip(const U32& s) {
  size_t begin = 0, end = s.size();
  while (begin < end && is_space(s[begin])) ++begin;
  while (end > begin && is_space(s[end - 1])) --end;
  return s.substr(begin, end - begin);
}

std::vector<U32> split_whitespace(const U32& s) {
  std::vector<U32> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_space(s[i])) ++i;
    size_t start = i;
    while (i < s.size() && !is_space(s[i])) ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

std::vector<U32> split_on(const U32& s, const U32& sep) {
  std::vector<U32> parts;
  size_t start = 0, pos;
  while ((pos = s.find(sep, start)) != U32::npos) {
    parts.push_back(s.substr(start, pos - start));
    start = pos + sep.size();
  }
  parts.push_back(s.substr(start));
  return parts;
}

U32 replace_all(U32 s, const U32& from, const U32& to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != U32::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

size_t count(const U32& s, const U32& sub) {
  size_t n = 0, pos = 0;
  while ((pos = s.find(sub, pos)) != U32::npos) {
    ++n;
    pos += sub.size();
  }
  return n;
}

}  // namespace verlpp::reward::rules::text
