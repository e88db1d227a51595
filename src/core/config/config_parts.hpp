// Internal pieces of Config shared by its source files (config.cpp, config_compose.cpp,
// config_resolve.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace verlpp::config::detail {

// The offset of the first byte that is not part of well-formed UTF-8 (no overlong forms, no
// surrogates, nothing past U+10FFFF), or npos. Config text must be UTF-8: JSON holds nothing
// else, and an error message quoting a value must be printable.
inline size_t first_invalid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return i;
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return i;
    }
    i += n + 1;
  }
  return std::string::npos;
}

// A config file with its Hydra composition taken out: the keys to merge, and whether verl's base
// config comes after them (`defaults: [_self_, ppo_trainer]`, so the base's values win).
struct ConfigFileParts {
  nlohmann::json body;
  bool base_after_self = false;
};
// Checks the `defaults:` list and the `hydra:` section of a parsed config file; errors name
// `origin` and the entry that verlpp does not support.
ConfigFileParts split_config_file(const nlohmann::json& given, const std::string& origin);

// The tree with every interpolation resolved (Config::resolve).
nlohmann::json resolve_config_tree(const nlohmann::json& tree);

}  // namespace verlpp::config::detail
