// verl's math_dapo reward (reward_score/math_dapo.py, Minerva-style): the last "Answer: ..." line
// of the final 300 characters, normalised (normalize_final_answer) and compared with the
// normalised ground truth; +1 / -1, with acc and the normalised prediction as extras. The regular
// expressions of the reference are written out as scans with Python's re semantics: '.' stops at
// a newline, [^{] does not, \s is Unicode whitespace, (?i) lets 's' match U+017F.
#include <verlpp/reward/reward.hpp>

#include "reward_text.hpp"

#include <utility>

namespace verlpp::reward::rules {
namespace {

using text::U32;

// (before, after) in the reference's order, then the expressions it removes, in order.
const std::pair<const char32_t*, const char32_t*> kSubstitutions[] = {
    {U"an ", U""}, {U"a ", U""},       {U".$", U"$"},           {U"\\$", U""},          {U"\\ ", U""},
    {U" ", U""},   {U"mbox", U"text"}, {U",\\text{and}", U","}, {U"\\text{and}", U","}, {U"\\text{m}", U"\\text{}"}};
const char32_t* const kRemoved[] = {U"square",     U"ways",       U"integers",  U"dollars",      U"mph",
                                    U"inches",     U"hours",      U"km",        U"units",        U"\\ldots",
                                    U"sue",        U"points",     U"feet",      U"minutes",      U"digits",
                                    U"cents",      U"degrees",    U"cm",        U"gm",           U"pounds",
                                    U"meters",     U"meals",      U"edges",     U"students",     U"childrentickets",
                                    U"multiples",  U"\\text{s}",  U"\\text{.}", U"\\text{\ns}",  U"\\text{}^2",
                                    U"\\text{}^3", U"\\text{\n}", U"\\text{}",  U"\\mathrm{th}", U"^\\circ",
                                    U"^{\\circ}",  U"\\;",        U",\\!",      U"{,}",          U"\"",
                                    U"\\dots"};

// The end of the line holding position i (the next '\n' or the end).
size_t line_end(const U32& s, size_t i) {
  size_t e = s.find(U'\n', i);
  return e == U32::npos ? s.size() : e;
}

// re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\3$", s): each line with two '$' becomes "$" + what lies
// between its first two '$' + "$".
U32 keep_first_math(const U32& s) {
  U32 out;
  size_t start = 0;
  while (true) {
    const size_t end = line_end(s, start);
    const size_t first = s.find(U'$', start);
    const size_t second = first < end ? s.find(U'$', first + 1) : U32::npos;
    if (second < end)
      out += U"$" + s.substr(first + 1, second - first - 1) + U"$";
    else
      out += s.substr(start, end - start);
    if (end == s.size()) return out;
    out += U'\n';
    start = end + 1;
  }
}

// re.sub(r"(\\cmd\{)(.*?)(\})", r"\2", s): "\cmd{x}" -> "x", up to the first '}' on the line.
U32 unwrap_lazy(const U32& s, const U32& open) {
  U32 out;
  size_t i = 0;
  while (i < s.size()) {
    if (s.compare(i, open.size(), open) == 0) {
      const size_t inner = i + open.size();
      const size_t close = s.find(U'}', inner);
      if (close != U32::npos && close < line_end(s, inner)) {
        out += s.substr(inner, close - inner);
        i = close + 1;
        continue;
      }
    }
    out += s[i++];
  }
  return out;
}

// re.sub(r"(\\boxed\{)(.*)(\})", r"\2", s): on each line, from its first "\boxed{" that has a
// '}' after it on the line, to the line's last '}'.
U32 unwrap_boxed_greedy(const U32& s) {
  const U32 open = U"\\boxed{";
  U32 out;
  size_t start = 0;
  while (true) {
    const size_t end = line_end(s, start);
    const size_t at = s.find(open, start);
    size_t close = U32::npos;
    if (at < end) {
      const size_t last = s.rfind(U'}', end == 0 ? 0 : end - 1);
      if (last != U32::npos && last >= at + open.size() && last < end) close = last;
    }
    if (close != U32::npos)
      out += s.substr(start, at - start) + s.substr(at + open.size(), close - at - open.size()) +
             s.substr(close + 1, end - close - 1);
    else
      out += s.substr(start, end - start);
    if (end == s.size()) return out;
    out += U'\n';
    start = end + 1;
  }
}

// re.sub(r"(frac)([^{])(.)", r"frac{\2}{\3}", s) and re.sub(r"(sqrt)([^{])", r"sqrt{\2}", s).
U32 brace_shorthand(const U32& s) {
  U32 out;
  size_t i = 0;
  while (i < s.size()) {
    if (s.compare(i, 4, U"frac") == 0 && i + 5 < s.size() && s[i + 4] != U'{' && s[i + 5] != U'\n') {
      out += U"frac{" + s.substr(i + 4, 1) + U"}{" + s.substr(i + 5, 1) + U"}";
      i += 6;
    } else {
      out += s[i++];
    }
  }
  U32 result;
  i = 0;
  while (i < out.size()) {
    if (out.compare(i, 4, U"sqrt") == 0 && i + 4 < out.size() && out[i + 4] != U'{') {
      result += U"sqrt{" + out.substr(i + 4, 1) + U"}";
      i += 5;
    } else {
      result += out[i++];
    }
  }
  return result;
}

U32 normalize(U32 s) {
  s = text::split_on(s, U"=").back();
  for (const auto& [before, after] : kSubstitutions) s = text::replace_all(s, before, after);
  for (const char32_t* expr : kRemoved) s = text::replace_all(s, expr, U"");
  s = keep_first_math(s);
  s = unwrap_lazy(s, U"\\text{");
  s = unwrap_lazy(s, U"\\textbf{");
  s = unwrap_lazy(s, U"\\overline{");
  s = unwrap_boxed_greedy(s);
  s = brace_shorthand(s);
  s = text::replace_all(s, U"$", U"");
  const U32 no_commas = text::replace_all(s, U",", U"");
  bool digits = !no_commas.empty();
  for (char32_t c : no_commas) digits = digits && text::is_digit(c);
  if (digits) s = no_commas;
  return text::strip(s);
}

bool answer_letter(char32_t c, char letter) {
  if (c == char32_t(letter) || c == char32_t(letter - 'a' + 'A')) return true;
  return letter == 's' && c == 0x017F;  // LATIN SMALL LETTER LONG S folds to 's'
}

// re.findall(r"(?i)Answer\s*:\s*([^\n]+)", s)[-1], or "[INVALID]" without a match.
U32 last_answer(const U32& s) {
  static const char kWord[] = "answer";
  U32 found = U"[INVALID]";
  size_t i = 0;
  while (i < s.size()) {
    bool word = i + 6 <= s.size();
    for (size_t k = 0; word && k < 6; ++k) word = answer_letter(s[i + k], kWord[k]);
    if (word) {
      size_t j = i + 6;
      while (j < s.size() && text::is_space(s[j])) ++j;
      if (j < s.size() && s[j] == U':') {
        const size_t after = j + 1;
        size_t k = after;
        while (k < s.size() && text::is_space(s[k])) ++k;
        // \s* gives back until [^\n]+ can take at least one character.
        size_t p = k;
        while (p > after && (p == s.size() || s[p] == U'\n')) --p;
        if (p < s.size() && s[p] != U'\n') {
          const size_t end = line_end(s, p);
          found = s.substr(p, end - p);
          i = end;
          continue;
        }
      }
    }
    ++i;
  }
  return found;
}

}  // namespace

std::string math_dapo_normalize(const std::string& answer) { return text::to_utf8(normalize(text::from_utf8(answer))); }

RewardResult math_dapo(const std::string& response, const std::string& ground_truth) {
  const U32 tail = text::last(text::from_utf8(response), 300);
  const U32 pred = normalize(last_answer(tail));
  const bool correct = pred == normalize(text::from_utf8(ground_truth));
  RewardResult r;
  r.score = correct ? 1.0 : -1.0;
  r.extra = {{"acc", correct}, {"pred", text::to_utf8(pred)}};
  return r;
}

}  // namespace verlpp::reward::rules
