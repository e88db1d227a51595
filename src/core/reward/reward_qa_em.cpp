// verl's Search-R1 exact-match reward (reward_score/search_r1_like_qa_em.py): the content of the
// last <answer>...</answer> (stripped) is normalised SQuAD-style (lowercase, ASCII punctuation
// removed, the articles a/an/the removed as whole words, whitespace collapsed) and compared with
// each normalised golden answer; 1 on a match (a quarter when the response holds more than ten
// opening or closing tags), else 0.
#include <verlpp/reward/reward.hpp>
#include <verlpp/core/error.hpp>

#include "reward_text.hpp"

namespace verlpp::reward::rules {
namespace {

using text::U32;

bool is_ascii_punctuation(char32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
}

// re.sub(r"\b(a|an|the)\b", " ", s), word boundaries by Python's Unicode word characters.
U32 remove_articles(const U32& s) {
  auto word_at = [&](size_t i) { return i < s.size() && text::is_word(s[i]); };
  auto boundary = [&](size_t i) { return (i > 0 && text::is_word(s[i - 1])) != word_at(i); };
  U32 out;
  size_t i = 0;
  while (i < s.size()) {
    size_t matched = 0;
    if (boundary(i))
      for (const U32 article : {U"a", U"an", U"the"})
        if (s.compare(i, article.size(), article) == 0 && boundary(i + article.size())) {
          matched = article.size();
          break;
        }
    if (matched) {
      out += U' ';
      i += matched;
    } else {
      out += s[i++];
    }
  }
  return out;
}

U32 normalize_answer(const U32& s) {
  U32 no_punct;
  for (char32_t c : text::lower(s))
    if (!is_ascii_punctuation(c)) no_punct += c;
  U32 out;
  for (const U32& piece : text::split_whitespace(remove_articles(no_punct))) {
    if (!out.empty()) out += U' ';
    out += piece;
  }
  return out;
}

}  // namespace

std::string qa_normalize(const std::string& answer) { return text::to_utf8(normalize_answer(text::from_utf8(answer))); }

double qa_em(const std::string& response, const nlohmann::json& ground_truth) {
  if (!ground_truth.is_object() || !ground_truth.contains("target"))
    throw Error("qa_em", fmt::format("ground_truth must be an object with \"target\" (a string or a list of "
                                     "strings), got {}",
                                     ground_truth.dump()));
  const nlohmann::json& target = ground_truth["target"];
  std::vector<std::string> golden;
  if (target.is_string()) {
    golden.push_back(target.get<std::string>());
  } else if (target.is_array()) {
    for (const auto& g : target) {
      if (!g.is_string())
        throw Error("qa_em", fmt::format("ground_truth.target holds {}, which is not a string", g.dump()));
      golden.push_back(g.get<std::string>());
    }
  } else {
    throw Error("qa_em",
                fmt::format("ground_truth.target must be a string or a list of strings, got {}", target.dump()));
  }
  const U32 s = text::from_utf8(response);
  // The last <answer>(.*?)</answer> match, newlines included.
  const U32 open = U"<answer>", close = U"</answer>";
  bool found = false;
  U32 answer;
  size_t pos = 0;
  while (true) {
    const size_t at = s.find(open, pos);
    if (at == U32::npos) break;
    const size_t end = s.find(close, at + open.size());
    if (end == U32::npos) break;
    answer = s.substr(at + open.size(), end - at - open.size());
    found = true;
    pos = end + close.size();
  }
  if (!found) return 0.0;
  const U32 prediction = normalize_answer(text::strip(answer));
  for (const auto& g : golden)
    if (normalize_answer(text::from_utf8(g)) == prediction) {
      const bool flooded = text::count(s, open) > 10 || text::count(s, close) > 10;
      return flooded ? 0.25 : 1.0;
    }
  return 0.0;
}

}  // namespace verlpp::reward::rules
