// verl's Hendrycks MATH reward (reward_score/math_reward.py): the last \boxed{} answer compared
// with the ground truth after strip_string. Written to follow the Python step for step, on code
// points, including its failure paths: where Python's strip_string raises (an assert in
// remove_right_units, an empty piece after \sqrt or \frac), is_equiv falls back to plain string
// equality; where remove_boxed's assert fails (\fbox), the score is 0. fix_a_slash_b keeps the
// cleaned string unless both sides are integers written as Python's str(int) writes them.
#include <verlpp/reward/reward.hpp>

#include "reward_text.hpp"

#include <stdexcept>

namespace verlpp::reward::rules {
namespace {

using text::U32;

// Raised where the Python reference raises; caught by math_equivalent.
struct StripFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

U32 remove_right_units(const U32& s) {
  if (!text::contains(s, U"\\text{ ")) return s;
  auto splits = text::split_on(s, U"\\text{ ");
  if (splits.size() != 2) throw StripFailure("remove_right_units: more than one \\text{ ");
  return splits[0];
}

U32 fix_sqrt(const U32& s) {
  if (!text::contains(s, U"\\sqrt")) return s;
  auto splits = text::split_on(s, U"\\sqrt");
  U32 out = splits[0];
  for (size_t i = 1; i < splits.size(); ++i) {
    const U32& piece = splits[i];
    if (piece.empty()) throw StripFailure("fix_sqrt: nothing after \\sqrt");
    if (piece[0] != U'{')
      out += U"\\sqrt{" + piece.substr(0, 1) + U"}" + piece.substr(1);
    else
      out += U"\\sqrt" + piece;
  }
  return out;
}

U32 fix_fracs(const U32& s) {
  auto pieces = text::split_on(s, U"\\frac");
  U32 out = pieces[0];
  for (size_t i = 1; i < pieces.size(); ++i) {
    const U32& piece = pieces[i];
    out += U"\\frac";
    if (piece.empty()) throw StripFailure("fix_fracs: nothing after \\frac");
    if (piece[0] == U'{') {
      out += piece;
      continue;
    }
    if (piece.size() < 2) return s;  // the reference's caught assert: give up, unchanged
    U32 a = piece.substr(0, 1), b = piece.substr(1, 1), rest = piece.substr(2);
    if (b != U"{")
      out += U"{" + a + U"}{" + b + U"}" + rest;
    else
      out += U"{" + a + U"}" + b + rest;
  }
  return out;
}

// True when str(int(t)) == t in Python: "0", or an optional '-' then ASCII digits without a
// leading zero. Any size: Python's integers have no range.
bool is_canonical_int(const U32& t) {
  size_t i = !t.empty() && t[0] == U'-' ? 1 : 0;
  if (i == t.size()) return false;
  if (t[i] == U'0') return i == 0 && t.size() == 1;
  for (; i < t.size(); ++i)
    if (t[i] < U'0' || t[i] > U'9') return false;
  return true;
}

// Python's fix_a_slash_b: int() of each side and the check that "{a}/{b}" gives the string
// back; any failure there returns the string as it stands.
U32 fix_a_slash_b(const U32& s) {
  auto parts = text::split_on(s, U"/");
  if (parts.size() != 2 || !is_canonical_int(parts[0]) || !is_canonical_int(parts[1])) return s;
  return U"\\frac{" + parts[0] + U"}{" + parts[1] + U"}";
}

U32 strip_string(U32 s) {
  using text::replace_all;
  s = replace_all(s, U"\n", U"");
  s = replace_all(s, U"\\!", U"");
  s = replace_all(s, U"\\\\", U"\\");
  s = replace_all(s, U"tfrac", U"frac");
  s = replace_all(s, U"dfrac", U"frac");
  s = replace_all(s, U"\\left", U"");
  s = replace_all(s, U"\\right", U"");
  s = replace_all(s, U"^{\\circ}", U"");
  s = replace_all(s, U"^\\circ", U"");
  s = replace_all(s, U"\\$", U"");
  s = remove_right_units(s);
  s = replace_all(s, U"\\\\%", U"");
  s = replace_all(s, U"\\%", U"");
  s = replace_all(s, U" .", U" 0.");
  s = replace_all(s, U"{.", U"{0.");
  if (s.empty()) return s;
  if (s[0] == U'.') s = U"0" + s;
  auto eq = text::split_on(s, U"=");
  if (eq.size() == 2 && eq[0].size() <= 2) s = eq[1];
  s = fix_sqrt(s);
  s = replace_all(s, U" ", U"");
  s = fix_fracs(s);
  if (s == U"0.5") s = U"\\frac{1}{2}";
  return fix_a_slash_b(s);
}

bool equivalent(const U32& a, const U32& b) {
  try {
    return strip_string(a) == strip_string(b);
  } catch (const StripFailure&) {
    return a == b;
  }
}

// Python's last_boxed_only_string; false when there is none.
bool last_boxed_u32(const U32& s, U32* out) {
  if (text::contains(s, U"\\boxed ")) {
    const U32 after = text::split_on(s, U"\\boxed ").back();
    *out = U"\\boxed " + after.substr(0, after.find(U'$'));
    return true;
  }
  size_t idx = s.rfind(U"\\boxed");
  if (idx == U32::npos) idx = s.rfind(U"\\fbox");
  if (idx == U32::npos) return false;
  int open = 0;
  for (size_t i = idx; i < s.size(); ++i) {
    if (s[i] == U'{') ++open;
    if (s[i] == U'}' && --open == 0) {
      *out = s.substr(idx, i - idx + 1);
      return true;
    }
  }
  return false;
}

}  // namespace

bool math_equivalent(const std::string& a, const std::string& b) {
  return equivalent(text::from_utf8(a), text::from_utf8(b));
}

std::string last_boxed(const std::string& response, bool* found) {
  U32 boxed;
  *found = last_boxed_u32(text::from_utf8(response), &boxed);
  return *found ? text::to_utf8(boxed) : std::string();
}

double math(const std::string& response, const std::string& ground_truth) {
  U32 boxed;
  if (!last_boxed_u32(text::from_utf8(response), &boxed)) return 0.0;
  U32 answer;
  const U32 spaced = U"\\boxed ", braced = U"\\boxed{";
  if (text::contains(boxed, spaced)) {
    if (boxed.compare(0, spaced.size(), spaced) != 0) return 0.0;
    answer = boxed.substr(spaced.size());
  } else {
    // remove_boxed asserts "\boxed{...}"; \fbox{...} fails it and scores 0, as in verl.
    if (boxed.compare(0, braced.size(), braced) != 0 || boxed.back() != U'}') return 0.0;
    answer = boxed.substr(braced.size(), boxed.size() - braced.size() - 1);
  }
  return equivalent(answer, text::from_utf8(ground_truth)) ? 1.0 : 0.0;
}

}  // namespace verlpp::reward::rules
