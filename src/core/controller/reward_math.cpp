// verl's `math` reward: the last \boxed{} answer compared with the ground truth after the
// Hendrycks MATH normalisation (strip_string). Written to match the Python reference step for
// step, including its failure paths: where Python's strip_string raises (an assert in
// remove_right_units, an empty piece after \sqrt or \frac, a non-integer in a/b), is_equiv
// falls back to plain string equality; where remove_boxed's assert fails (\fbox), the score is 0.
#include <verlpp/controller/reward.hpp>

#include <climits>
#include <stdexcept>

namespace verlpp::controller::rewards {
namespace {

// Raised where the Python reference raises; caught by math_equivalent.
struct StripFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

// Python's str.split(sep): keeps empty pieces.
std::vector<std::string> split_on(const std::string& s, const std::string& sep) {
  std::vector<std::string> parts;
  size_t start = 0, pos;
  while ((pos = s.find(sep, start)) != std::string::npos) {
    parts.push_back(s.substr(start, pos - start));
    start = pos + sep.size();
  }
  parts.push_back(s.substr(start));
  return parts;
}

// Python's int(text) for what can reach it here (no spaces): [+-]digits with single '_'
// between digits. Throws StripFailure where Python raises ValueError.
long long python_int(const std::string& text) {
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  if (i == text.size()) throw StripFailure("int(): no digits");
  long long value = 0;
  bool last_digit = false;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c >= '0' && c <= '9') {
      if (value > (LLONG_MAX - (c - '0')) / 10) throw StripFailure("int(): out of range");
      value = value * 10 + (c - '0');
      last_digit = true;
    } else if (c == '_' && last_digit && i + 1 < text.size() && text[i + 1] >= '0' && text[i + 1] <= '9') {
      last_digit = false;
    } else {
      throw StripFailure("int(): not an integer");
    }
  }
  return negative ? -value : value;
}

std::string remove_right_units(const std::string& s) {
  if (s.find("\\text{ ") == std::string::npos) return s;
  auto splits = split_on(s, "\\text{ ");
  if (splits.size() != 2) throw StripFailure("remove_right_units: more than one \\text{ ");
  return splits[0];
}

std::string fix_sqrt(const std::string& s) {
  if (s.find("\\sqrt") == std::string::npos) return s;
  auto splits = split_on(s, "\\sqrt");
  std::string out = splits[0];
  for (size_t i = 1; i < splits.size(); ++i) {
    const std::string& piece = splits[i];
    if (piece.empty()) throw StripFailure("fix_sqrt: nothing after \\sqrt");
    if (piece[0] != '{')
      out += "\\sqrt{" + piece.substr(0, 1) + "}" + piece.substr(1);
    else
      out += "\\sqrt" + piece;
  }
  return out;
}

std::string fix_fracs(const std::string& s) {
  auto pieces = split_on(s, "\\frac");
  std::string out = pieces[0];
  for (size_t i = 1; i < pieces.size(); ++i) {
    const std::string& piece = pieces[i];
    out += "\\frac";
    if (piece.empty()) throw StripFailure("fix_fracs: nothing after \\frac");
    if (piece[0] == '{') {
      out += piece;
      continue;
    }
    if (piece.size() < 2) return s;  // the reference's caught assert: give up, unchanged
    std::string a = piece.substr(0, 1), b = piece.substr(1, 1), rest = piece.substr(2);
    if (b != "{")
      out += "{" + a + "}{" + b + "}" + rest;
    else
      out += "{" + a + "}" + b + rest;
  }
  return out;
}

std::string fix_a_slash_b(const std::string& s) {
  auto parts = split_on(s, "/");
  if (parts.size() != 2) return s;
  long long a = python_int(parts[0]), b = python_int(parts[1]);    // ValueError propagates
  if (s != std::to_string(a) + "/" + std::to_string(b)) return s;  // the caught assert
  return "\\frac{" + std::to_string(a) + "}{" + std::to_string(b) + "}";
}

std::string strip_string(std::string s) {
  s = replace_all(s, "\n", "");
  s = replace_all(s, "\\!", "");
  s = replace_all(s, "\\\\", "\\");
  s = replace_all(s, "tfrac", "frac");
  s = replace_all(s, "dfrac", "frac");
  s = replace_all(s, "\\left", "");
  s = replace_all(s, "\\right", "");
  s = replace_all(s, "^{\\circ}", "");
  s = replace_all(s, "^\\circ", "");
  s = replace_all(s, "\\$", "");
  s = remove_right_units(s);
  s = replace_all(s, "\\%", "");
  s = replace_all(s, " .", " 0.");
  s = replace_all(s, "{.", "{0.");
  if (s.empty()) return s;
  if (s[0] == '.') s = "0" + s;
  auto eq = split_on(s, "=");
  if (eq.size() == 2 && eq[0].size() <= 2) s = eq[1];
  s = fix_sqrt(s);
  s = replace_all(s, " ", "");
  s = fix_fracs(s);
  if (s == "0.5") s = "\\frac{1}{2}";
  return fix_a_slash_b(s);
}

}  // namespace

bool math_equivalent(const std::string& a, const std::string& b) {
  try {
    return strip_string(a) == strip_string(b);
  } catch (const StripFailure&) {
    return a == b;
  }
}

std::string last_boxed(const std::string& text, bool* found) {
  *found = false;
  if (text.find("\\boxed ") != std::string::npos) {
    auto after = split_on(text, "\\boxed ").back();
    *found = true;
    return "\\boxed " + after.substr(0, after.find('$'));
  }
  size_t idx = text.rfind("\\boxed");
  if (idx == std::string::npos) idx = text.rfind("\\fbox");
  if (idx == std::string::npos) return {};
  int open = 0;
  for (size_t i = idx; i < text.size(); ++i) {
    if (text[i] == '{') ++open;
    if (text[i] == '}' && --open == 0) {
      *found = true;
      return text.substr(idx, i - idx + 1);
    }
  }
  return {};
}

double math(const std::string& response, const std::string& ground_truth) {
  bool found = false;
  std::string boxed = last_boxed(response, &found);
  if (!found) return 0.0;
  std::string answer;
  const std::string spaced = "\\boxed ", braced = "\\boxed{";
  if (boxed.find(spaced) != std::string::npos) {
    if (boxed.rfind(spaced, 0) != 0) return 0.0;
    answer = boxed.substr(spaced.size());
  } else {
    // remove_boxed asserts "\boxed{...}"; \fbox{...} fails it and scores 0, as in verl.
    if (boxed.rfind(braced, 0) != 0 || boxed.back() != '}') return 0.0;
    answer = boxed.substr(braced.size(), boxed.size() - braced.size() - 1);
  }
  return math_equivalent(answer, ground_truth) ? 1.0 : 0.0;
}

}  // namespace verlpp::controller::rewards
