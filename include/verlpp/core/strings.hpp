// Small string helpers used across layers. join() exists because fmt::join lives in
// fmt/ranges.h, which LibTorch 2.x wheels do not ship beside their own fmt: mixing that
// header from another fmt version breaks the build, so verlpp never includes it.
#pragma once

#include <string>
#include <vector>

namespace verlpp {

// Whether `text` begins / ends with `affix` (C++20's std::string::starts_with / ends_with).
inline bool starts_with(const std::string& text, const std::string& affix) {
  return text.size() >= affix.size() && text.compare(0, affix.size(), affix) == 0;
}
inline bool ends_with(const std::string& text, const std::string& affix) {
  return text.size() >= affix.size() && text.compare(text.size() - affix.size(), affix.size(), affix) == 0;
}

// "a, b, c" from {"a", "b", "c"} with separator ", ".
inline std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

// Splits on `separator`, dropping empty pieces and trimming spaces and tabs around each.
inline std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(separator, start);
    if (end == std::string::npos) end = text.size();
    std::string piece = text.substr(start, end - start);
    size_t first = piece.find_first_not_of(" \t"), last = piece.find_last_not_of(" \t");
    if (first != std::string::npos) out.push_back(piece.substr(first, last - first + 1));
    start = end + 1;
  }
  return out;
}

}  // namespace verlpp
