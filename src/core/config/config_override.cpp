// Hydra's override grammar (include/verlpp/config/config_override.hpp): a lexer with
// Hydra's value-mode tokens (longest match, ties to the earlier token kind, as ANTLR decides),
// and a recursive-descent parser for elements (primitive, list, dict). Typing follows Hydra's
// visitor: one token is typed by its kind, several tokens are the string of their text.
#include "config_parts.hpp"

#include <verlpp/config/config_override.hpp>
#include <verlpp/core/error.hpp>

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>

namespace verlpp::config {
namespace {

using json = nlohmann::json;

constexpr int kMaxDepth = 512;

enum class Tok {
  popen,     // (   (with blanks around)
  comma,     // ,   (with blanks around)
  pclose,    // )
  lbracket,  // [
  rbracket,  // ]
  lbrace,    // {
  rbrace,    // }
  colon,     // :   (with blanks around)
  equal,     // =
  floating,  // 1.5, .5, 1e-6, inf, nan
  integer,   // -3, 1_000
  boolean,   // true, FALSE
  null,      // null, NULL
  uchar,     // one of / - \ + . $ % * @ ? |
  id,        // foo_bar-1 (and, as a verlpp extension, runs of non-ASCII bytes)
  esc,       // \( \) \[ \] \{ \} \: \= \, \<blank> \\ ...
  ws,        // blanks
  quoted,    // '...' or "..."
  interp,    // ${...}
  end,
};

struct Token {
  Tok kind;
  size_t pos;  // byte offset in the value text
  size_t len;
};

bool is_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_blank(char c) { return c == ' ' || c == '\t'; }
bool is_escapable(char c) {
  return c == '\\' || c == '(' || c == ')' || c == '[' || c == ']' || c == '{' || c == '}' || c == ':' || c == '=' ||
         c == ',' || c == ' ' || c == '\t';
}
bool lower_equals(const std::string& s, size_t p, const char* word) {
  for (size_t i = 0; word[i] != 0; ++i) {
    if (p + i >= s.size()) return false;
    char c = s[p + i];
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    if (c != word[i]) return false;
  }
  return true;
}

class ValueParser {
 public:
  // `column_base`: the 1-based column of the value's first byte in the whole override.
  ValueParser(const std::string& text, size_t column_base, std::string where)
      : s_(text), base_(column_base), where_(std::move(where)) {}

  // value: element (a top-level comma is a sweep), or nothing (the empty string).
  json parse_value() {
    Token t = peek();
    if (t.kind == Tok::ws) {
      advance();
      t = peek();
      if (t.kind == Tok::end) fail(t.pos, "a value, got only blanks");
    }
    if (t.kind == Tok::end) return std::string();
    json v = parse_element(0);
    t = peek();
    if (t.kind == Tok::comma)
      throw Error(where_, fmt::format("at column {}: a comma-separated value is a Hydra sweep (several runs, for "
                                      "--multirun); verlpp runs one configuration: write a list as [a,b] or quote "
                                      "a string that holds commas (\"a,b\")",
                                      column(t.pos)));
    if (t.kind != Tok::end) fail(t.pos, fmt::format("the end of the value, got {}", describe(t)));
    return v;
  }

  // True when the value is one quoted string (set by parse_value's primitive).
  bool whole_value_quoted() const { return whole_quoted_; }

 private:
  const std::string& s_;
  size_t base_;
  std::string where_;
  size_t pos_ = 0;
  bool whole_quoted_ = false;
  int element_count_ = 0;

  size_t column(size_t pos) const { return base_ + pos; }

  [[noreturn]] void fail(size_t pos, const std::string& expected) const {
    throw Error(where_, fmt::format("at column {}: expected {}", column(pos), expected));
  }

  std::string describe(const Token& t) const {
    if (t.kind == Tok::end) return "the end of the value";
    std::string text = s_.substr(t.pos, t.len);
    size_t a = text.find_first_not_of(" \t"), b = text.find_last_not_of(" \t");
    if (a != std::string::npos) text = text.substr(a, b - a + 1);
    return fmt::format("'{}'", text);
  }

  // DIGIT ('_'? DIGIT)* from p; 0 when no digit there.
  size_t digits_len(size_t p) const {
    if (p >= s_.size() || !is_digit(s_[p])) return 0;
    size_t q = p + 1;
    while (q < s_.size()) {
      if (is_digit(s_[q]))
        ++q;
      else if (s_[q] == '_' && q + 1 < s_.size() && is_digit(s_[q + 1]))
        q += 2;
      else
        break;
    }
    return q - p;
  }
  // INT_UNSIGNED: '0' | [1-9] ('_'? DIGIT)*.
  size_t int_unsigned_len(size_t p) const {
    if (p >= s_.size() || !is_digit(s_[p])) return 0;
    if (s_[p] == '0') return 1;
    return digits_len(p);
  }
  size_t sign_len(size_t p) const { return p < s_.size() && (s_[p] == '+' || s_[p] == '-') ? 1 : 0; }
  size_t int_len(size_t p) const {
    size_t sg = sign_len(p), u = int_unsigned_len(p + sg);
    return u == 0 ? 0 : sg + u;
  }
  // [eE] [+-]? DIGIT ('_'? DIGIT)* at p; 0 when none.
  size_t exponent_len(size_t p) const {
    if (p >= s_.size() || (s_[p] != 'e' && s_[p] != 'E')) return 0;
    size_t sg = sign_len(p + 1), d = digits_len(p + 1 + sg);
    return d == 0 ? 0 : 1 + sg + d;
  }
  size_t float_len(size_t p) const {
    const size_t sg = sign_len(p);
    const size_t q = p + sg;
    if (lower_equals(s_, q, "inf") || lower_equals(s_, q, "nan")) return sg + 3;
    const size_t a = int_unsigned_len(q);
    size_t best = 0;
    // POINT_FLOAT: INT_UNSIGNED '.' | INT_UNSIGNED? '.' DIGIT ('_'? DIGIT)*.
    if (q + a < s_.size() && s_[q + a] == '.') {
      const size_t frac = digits_len(q + a + 1);
      size_t point_end = 0;
      if (frac > 0)
        point_end = q + a + 1 + frac;
      else if (a > 0)
        point_end = q + a + 1;
      if (point_end != 0) best = point_end + exponent_len(point_end) - p;
    }
    // EXPONENT_FLOAT from a bare INT_UNSIGNED mantissa.
    if (a > 0) {
      size_t e = exponent_len(q + a);
      if (e > 0) best = std::max(best, sg + a + e);
    }
    return best;
  }
  size_t id_len(size_t p) const {
    if (p >= s_.size()) return 0;
    if (static_cast<unsigned char>(s_[p]) >= 0x80) {  // UTF-8 text: verlpp takes it unquoted
      size_t q = p;
      while (q < s_.size() && static_cast<unsigned char>(s_[q]) >= 0x80) ++q;
      return q - p;
    }
    if (!is_char(s_[p]) && s_[p] != '_') return 0;
    size_t q = p + 1;
    while (q < s_.size() && (is_char(s_[q]) || is_digit(s_[q]) || s_[q] == '_' || s_[q] == '-')) ++q;
    return q - p;
  }
  size_t blanks(size_t p) const {
    size_t q = p;
    while (q < s_.size() && is_blank(s_[q])) ++q;
    return q - p;
  }
  // The closing quote: the first quote of the same kind after an even run of backslashes.
  size_t quoted_len(size_t p) const {
    const char q = s_[p];
    size_t i = p + 1, run = 0;
    for (; i < s_.size(); ++i) {
      if (s_[i] == '\\') {
        ++run;
        continue;
      }
      if (s_[i] == q && run % 2 == 0) return i - p + 1;
      run = 0;
    }
    return 0;
  }
  // ${ ... } with nested ${...} and {...} and quoted strings inside; 0 when not closed.
  size_t interpolation_len(size_t p) const {
    int depth = 0;
    for (size_t i = p; i < s_.size(); ++i) {
      const char c = s_[i];
      if (c == '\'' || c == '"') {
        size_t n = quoted_len(i);
        if (n == 0) return 0;
        i += n - 1;
      } else if (c == '{') {
        ++depth;
      } else if (c == '}') {
        if (--depth == 0) return i - p + 1;
      }
    }
    return 0;
  }

  Token lex(size_t p) const {
    if (p >= s_.size()) return {Tok::end, p, 0};
    const size_t w = blanks(p);
    const size_t after = p + w;
    if (after < s_.size()) {
      const char c = s_[after];
      // Tokens that take the blanks before them (and some the blanks after).
      switch (c) {
        case '(':
          return {Tok::popen, p, w + 1 + blanks(after + 1)};
        case ',':
          return {Tok::comma, p, w + 1 + blanks(after + 1)};
        case ')':
          return {Tok::pclose, p, w + 1};
        case ']':
          return {Tok::rbracket, p, w + 1};
        case '}':
          return {Tok::rbrace, p, w + 1};
        case ':':
          return {Tok::colon, p, w + 1 + blanks(after + 1)};
        case '=':
          return {Tok::equal, p, w + 1 + blanks(after + 1)};
        default:
          break;
      }
    }
    if (w > 0) return {Tok::ws, p, w};
    const char c = s_[p];
    if (c == '[') return {Tok::lbracket, p, 1 + blanks(p + 1)};
    if (c == '$' && p + 1 < s_.size() && s_[p + 1] == '{') {
      size_t n = interpolation_len(p + 1);
      if (n == 0) fail(p, "a '}' to close the interpolation '${' opened here");
      return {Tok::interp, p, n + 1};
    }
    if (c == '{') return {Tok::lbrace, p, 1 + blanks(p + 1)};
    if (c == '\'' || c == '"') {
      size_t n = quoted_len(p);
      if (n == 0) fail(p, fmt::format("a closing {} for the quoted string opened here", c));
      return {Tok::quoted, p, n};
    }
    if (c == '\\' && p + 1 < s_.size() && is_escapable(s_[p + 1])) {
      size_t q = p;
      while (q + 1 < s_.size() && s_[q] == '\\' && is_escapable(s_[q + 1])) q += 2;
      return {Tok::esc, p, q - p};
    }
    // Longest of the word tokens; ties go to the earlier kind (float, int, bool, null, char, id).
    Token best{Tok::end, p, 0};
    auto consider = [&](Tok kind, size_t len) {
      if (len > best.len) best = {kind, p, len};
    };
    consider(Tok::floating, float_len(p));
    consider(Tok::integer, int_len(p));
    consider(Tok::boolean, lower_equals(s_, p, "true") ? 4 : lower_equals(s_, p, "false") ? 5 : 0);
    consider(Tok::null, lower_equals(s_, p, "null") ? 4 : 0);
    const std::string uchars = "/-\\+.$%*@?|";
    consider(Tok::uchar, uchars.find(c) != std::string::npos ? 1 : 0);
    consider(Tok::id, id_len(p));
    if (best.len == 0) {
      std::string shown =
          (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? fmt::format("\\x{:02x}", int(c)) : std::string(1, c);
      throw Error(where_, fmt::format("at column {}: the character '{}' is not allowed in an unquoted value; "
                                      "quote the value ('...' or \"...\")",
                                      column(p), shown));
    }
    return best;
  }

  Token peek() const { return lex(pos_); }
  Token advance() {
    Token t = lex(pos_);
    pos_ += t.len;
    return t;
  }

  std::string text_of(const Token& t) const { return s_.substr(t.pos, t.len); }

  static std::string unescape(const std::string& esc) {
    std::string out;
    for (size_t i = 1; i < esc.size(); i += 2) out += esc[i];
    return out;
  }
  // Hydra's quoted-string unescaping: a run of n backslashes before a quote of the string's
  // kind gives n/2 backslashes (and the quote itself when n is odd); other backslashes stay.
  static std::string unquote(const std::string& quoted) {
    const char q = quoted.front();
    const std::string body = quoted.substr(1, quoted.size() - 2);
    std::string out;
    size_t i = 0;
    while (i < body.size()) {
      if (body[i] != '\\') {
        out += body[i++];
        continue;
      }
      size_t j = i;
      while (j < body.size() && body[j] == '\\') ++j;
      const size_t run = j - i;
      if (j < body.size() && body[j] == q) {  // an escaped quote inside
        out.append(run / 2, '\\');
        out += q;
        i = j + 1;
      } else if (j == body.size()) {  // backslashes before the closing quote
        out.append(run / 2, '\\');
        i = j;
      } else {
        out.append(run, '\\');
        i = j;
      }
    }
    return out;
  }

  json typed_integer(const Token& t) const {
    std::string digits;
    for (char c : text_of(t))
      if (c != '_' && c != '+') digits += c;
    int64_t v = 0;
    auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) {
      uint64_t u = 0;
      auto ru = std::from_chars(digits.data(), digits.data() + digits.size(), u);
      if (ru.ec == std::errc() && ru.ptr == digits.data() + digits.size()) return u;
      throw Error(where_,
                  fmt::format("at column {}: the integer {} is out of range (64 bits)", column(t.pos), text_of(t)));
    }
    return v;
  }

  json typed_float(const Token& t) const {
    std::string text;
    for (char c : text_of(t))
      if (c != '_') text += c;
    double sign = 1.0;
    if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
      if (text[0] == '-') sign = -1.0;
      text = text.substr(1);
    }
    if (lower_equals(text, 0, "inf")) return sign * std::numeric_limits<double>::infinity();
    if (lower_equals(text, 0, "nan")) return std::numeric_limits<double>::quiet_NaN();
    double v = 0;
    auto r = std::from_chars(text.data(), text.data() + text.size(), v);
    if (r.ec == std::errc::result_out_of_range)
      throw Error(where_, fmt::format("at column {}: the number {} is out of range", column(t.pos), text_of(t)));
    if (r.ec != std::errc() || r.ptr != text.data() + text.size())
      fail(t.pos, fmt::format("a number, got '{}'", text_of(t)));
    return sign * v;
  }

  bool is_primitive_token(Tok k, bool dict_key) const {
    switch (k) {
      case Tok::id:
      case Tok::null:
      case Tok::integer:
      case Tok::floating:
      case Tok::boolean:
      case Tok::uchar:
      case Tok::esc:
      case Tok::ws:
        return true;
      case Tok::interp:
      case Tok::colon:
        return !dict_key;
      default:
        return false;
    }
  }

  // primitive: one quoted string, or a run of word tokens (typed when there is one).
  json parse_primitive(bool dict_key, bool top_level) {
    const Token first = peek();
    if (first.kind == Tok::quoted) {
      advance();
      if (peek().kind == Tok::ws) advance();  // blanks after a quoted value (verlpp allows them)
      if (is_primitive_token(peek().kind, dict_key) || peek().kind == Tok::quoted)
        fail(peek().pos, "the end of the quoted string's element; to join text with a quoted part, quote it all");
      if (top_level) whole_quoted_ = true;
      return unquote(text_of(first));
    }
    std::vector<Token> tokens;
    while (true) {
      const Token t = peek();
      if (t.kind == Tok::quoted)
        fail(t.pos,
             "no quote inside an unquoted value; quote the whole value or escape nothing but \\( \\) \\[ "
             "\\] \\{ \\} \\: \\= \\, and blanks");
      if (!is_primitive_token(t.kind, dict_key)) break;
      tokens.push_back(advance());
    }
    while (!tokens.empty() && tokens.back().kind == Tok::ws) tokens.pop_back();
    size_t start = 0;
    while (start < tokens.size() && tokens[start].kind == Tok::ws) ++start;
    if (start == tokens.size()) {
      const Token t = peek();
      fail(t.pos, fmt::format("a value, got {}", describe(t)));
    }
    if (tokens.size() - start == 1) {
      const Token& t = tokens[start];
      switch (t.kind) {
        case Tok::integer:
          return typed_integer(t);
        case Tok::floating:
          return typed_float(t);
        case Tok::boolean:
          return lower_equals(s_, t.pos, "true");
        case Tok::null:
          return nullptr;
        case Tok::esc:
          return unescape(text_of(t));
        default:
          return text_of(t);
      }
    }
    std::string out;
    for (size_t i = start; i < tokens.size(); ++i)
      out += tokens[i].kind == Tok::esc ? unescape(text_of(tokens[i])) : text_of(tokens[i]);
    return out;
  }

  std::string key_string(const json& key) const {
    if (key.is_string()) return key.get<std::string>();
    if (key.is_null()) return "null";
    return key.dump();
  }

  json parse_element(int depth) {
    if (depth >= kMaxDepth) fail(peek().pos, fmt::format("a value nested at most {} levels deep", kMaxDepth));
    if (++element_count_ > 1000000) fail(peek().pos, "at most 1000000 elements in one value");
    const Token t = peek();
    if (t.kind == Tok::lbracket) {
      advance();
      json list = json::array();
      if (peek().kind == Tok::rbracket) {
        advance();
        return list;
      }
      while (true) {
        list.push_back(parse_element(depth + 1));
        const Token sep = advance();
        if (sep.kind == Tok::rbracket) return list;
        if (sep.kind != Tok::comma)
          fail(sep.pos,
               fmt::format("',' or ']' in the list opened at column {}, got {}", column(t.pos), describe(sep)));
      }
    }
    if (t.kind == Tok::lbrace) {
      advance();
      json dict = json::object();
      if (peek().kind == Tok::rbrace) {
        advance();
        return dict;
      }
      while (true) {
        const Token key_token = peek();
        json key;
        if (key_token.kind == Tok::quoted) {  // a verlpp extension: JSON-style "key"
          advance();
          key = unquote(text_of(key_token));
        } else {
          key = parse_primitive(true, false);
        }
        const Token colon = advance();
        if (colon.kind != Tok::colon)
          fail(colon.pos, fmt::format("':' after the dict key {}, got {}", key.dump(), describe(colon)));
        dict[key_string(key)] = parse_element(depth + 1);
        const Token sep = advance();
        if (sep.kind == Tok::rbrace) return dict;
        if (sep.kind != Tok::comma)
          fail(sep.pos,
               fmt::format("',' or '}}' in the dict opened at column {}, got {}", column(t.pos), describe(sep)));
      }
    }
    json v = parse_primitive(false, depth == 0);
    if (peek().kind == Tok::popen)
      throw Error(where_, fmt::format("at column {}: Hydra's function {}(...) (sweeps, casts, tags) is not "
                                      "supported; verlpp takes plain values",
                                      column(t.pos), v.is_string() ? v.get<std::string>() : v.dump()));
    return v;
  }
};

bool is_key_char(char c) { return is_char(c) || is_digit(c) || c == '_' || c == '-' || c == '$'; }

// Checks the dotted key (Hydra's DOT_PATH: KEY_SPECIAL or INT_UNSIGNED components).
void check_key(const std::string& key, size_t column_base, const std::string& where) {
  if (key.empty())
    throw Error(where, fmt::format("at column {}: expected a key, e.g. algorithm.adv_estimator=grpo", column_base));
  for (size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    if (c == '/' || c == '@')
      throw Error(where, fmt::format("at column {}: '{}' is Hydra's config-group syntax (group/option, "
                                     "group@package), which selects config files; verlpp has one built-in config "
                                     "tree: set its keys instead (a.b.c=value)",
                                     column_base + i, c));
    if (c != '.' && !is_key_char(c))
      throw Error(where, fmt::format("at column {}: expected a key character (a letter, a digit, _ - $ or .), got "
                                     "'{}'",
                                     column_base + i, c));
  }
  size_t start = 0;
  bool dotted = key.find('.') != std::string::npos;
  while (true) {
    size_t dot = key.find('.', start);
    std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty())
      throw Error(where, fmt::format("at column {}: expected a key component, got an empty one", column_base + start));
    const bool numeric = is_digit(part[0]);
    if (numeric) {
      bool all_digits = true;
      for (char c : part) all_digits = all_digits && is_digit(c);
      if (!all_digits || (part.size() > 1 && part[0] == '0') || !dotted)
        throw Error(where, fmt::format("at column {}: a key component starts with a letter, _ or $ (or is a list "
                                       "index such as 0), got '{}'",
                                       column_base + start, part));
    } else if (part[0] == '-') {
      throw Error(where, fmt::format("at column {}: a key component starts with a letter, _ or $, got '{}'",
                                     column_base + start, part));
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
}

}  // namespace

void check_utf8(const std::string& text, size_t column_base, const std::string& where) {
  const size_t bad = detail::first_invalid_utf8(text);
  if (bad != std::string::npos)
    throw Error(where, fmt::format("at column {}: the byte 0x{:02x} is not UTF-8 text", column_base + bad,
                                   int(static_cast<unsigned char>(text[bad]))));
}

Override parse_override(const std::string& text) {
  const std::string where = "override '" + text + "'";
  check_utf8(text, 1, where);
  Override o;
  size_t p = 0;
  if (text.rfind("~", 0) == 0) {
    o.action = OverrideAction::remove;
    p = 1;
  } else if (text.rfind("++", 0) == 0) {
    o.action = OverrideAction::add_or_change;
    p = 2;
  } else if (text.rfind("+", 0) == 0) {
    o.action = OverrideAction::add;
    p = 1;
  }
  const size_t eq = text.find('=', p);
  o.key = text.substr(p, eq == std::string::npos ? std::string::npos : eq - p);
  check_key(o.key, p + 1, where);
  if (eq == std::string::npos) {
    if (o.action != OverrideAction::remove)
      throw Error(where, fmt::format("at column {}: expected '=' and a value (key=value, e.g. "
                                     "algorithm.adv_estimator=grpo), or ~key to delete a key",
                                     text.size() + 1));
    o.has_value = false;
    return o;
  }
  size_t v = eq + 1;
  while (v < text.size() && is_blank(text[v])) ++v;  // '=' takes the blanks after it
  const std::string value = text.substr(v);
  ValueParser parser(value, v + 1, where);
  o.value = parser.parse_value();
  o.value_quoted = parser.whole_value_quoted();
  size_t last = value.find_last_not_of(" \t");
  o.value_text = last == std::string::npos ? std::string() : value.substr(0, last + 1);
  return o;
}

nlohmann::json parse_override_value(const std::string& text, const std::string& where) {
  check_utf8(text, 1, where);
  size_t v = 0;
  while (v < text.size() && is_blank(text[v])) ++v;
  const std::string value = text.substr(v);
  ValueParser parser(value, v + 1, where);
  return parser.parse_value();
}

}  // namespace verlpp::config
