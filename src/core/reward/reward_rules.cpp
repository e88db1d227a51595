// The gsm8k reward. gsm8k follows verl's reward_score/gsm8k.py: only the last 300
// characters are searched; strict takes the last "#### <number>" with commas and '$' removed;
// flexible takes the last number-like run that is not "" or "." (kept as written).
#include <verlpp/reward/reward.hpp>

#include <algorithm>

namespace verlpp::reward::rules {
namespace {

constexpr size_t kClipCodepoints = 300;

bool in_number_set(char c) { return (c >= '0' && c <= '9') || c == '.' || c == ','; }

// The last `n` code points of UTF-8 `s` (Python's s[-n:]).
std::string last_codepoints(const std::string& s, size_t n) {
  size_t count = 0, i = s.size();
  while (i > 0 && count < n) {
    --i;
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) ++count;  // a lead byte starts a code point
  }
  return s.substr(i);
}

// Every match of `-?[0-9.,]+` starting at or after `from`, left to right, non-overlapping;
// with `prefix`, each match must follow it directly (the strict "#### " form).
std::vector<std::string> find_numbers(const std::string& s, const std::string& prefix) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t start = i;
    if (!prefix.empty()) {
      if (s.compare(i, prefix.size(), prefix) != 0) {
        ++i;
        continue;
      }
      start = i + prefix.size();
    }
    size_t j = start;
    if (j < s.size() && s[j] == '-' && j + 1 < s.size() && in_number_set(s[j + 1])) ++j;
    size_t digits = j;
    while (j < s.size() && in_number_set(s[j])) ++j;
    if (j > digits) {
      out.push_back(s.substr(start, j - start));
      i = j;
    } else {
      ++i;
    }
  }
  return out;
}

std::string erase_chars(std::string s, const std::string& chars) {
  s.erase(std::remove_if(s.begin(), s.end(), [&](char c) { return chars.find(c) != std::string::npos; }), s.end());
  return s;
}

}  // namespace

std::string gsm8k_extract(const std::string& response, bool flexible, bool* found) {
  std::string text = response.size() > kClipCodepoints ? last_codepoints(response, kClipCodepoints) : response;
  *found = false;
  if (!flexible) {
    auto matches = find_numbers(text, "#### ");
    if (matches.empty()) return {};
    *found = true;
    return erase_chars(matches.back(), ",$");
  }
  auto matches = find_numbers(text, "");
  if (matches.empty()) return {};
  *found = true;
  // Python's for/else-less loop: without a valid one, the last value iterated (the first) stays.
  for (auto it = matches.rbegin(); it != matches.rend(); ++it)
    if (*it != "" && *it != ".") return *it;
  return matches.front();
}

double gsm8k(const std::string& response, const std::string& ground_truth, bool flexible, double format_score,
             double score) {
  bool found = false;
  std::string answer = gsm8k_extract(response, flexible, &found);
  if (!found) return 0.0;
  return answer == ground_truth ? score : format_score;
}

}  // namespace verlpp::reward::rules
