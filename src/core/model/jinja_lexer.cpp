// The Jinja lexer: cuts a template into text and tags, applies whitespace control as
// transformers configures Jinja for chat templates (trim_blocks: the newline after a block or
// comment tag is dropped; lstrip_blocks: spaces and tabs before a block or comment tag at the
// start of a line are dropped; "-" strips all whitespace on its side, "+" turns the two off),
// drops one trailing newline of the source (keep_trailing_newline=False), and tokenizes the
// tags' contents.
#include "jinja_internal.hpp"

#include "tokenizer_internal.hpp"

#include <verlpp/core/error.hpp>

#include <cstring>

namespace verlpp::model::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

class Lexer {
 public:
  Lexer(const std::string& source, const std::string& origin) : src_(source), origin_(origin) {
    if (!src_.empty() && src_.back() == '\n') {
      src_.pop_back();
      if (!src_.empty() && src_.back() == '\r') src_.pop_back();
    }
  }

  std::vector<Piece> run() {
    std::vector<Piece> pieces;
    size_t pos = 0;
    // How the tag before the current text ends: strip all whitespace, or drop one newline.
    bool strip_next = false, trim_newline = false;
    while (pos <= src_.size()) {
      const size_t open = find_tag(pos);
      std::string text = src_.substr(pos, (open == std::string::npos ? src_.size() : open) - pos);
      char kind = 0, control = 0;
      if (open != std::string::npos) {
        kind = src_[open + 1];
        if (open + 2 < src_.size() && (src_[open + 2] == '-' || src_[open + 2] == '+')) control = src_[open + 2];
      }
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.erase(0, k);
      } else if (trim_newline) {
        if (starts(text, "\r\n"))
          text.erase(0, 2);
        else if (!text.empty() && text[0] == '\n')
          text.erase(0, 1);
      }
      if (open != std::string::npos) {
        if (control == '-') {
          size_t k = text.size();
          while (k > 0 && is_space(text[k - 1])) --k;
          text.resize(k);
        } else if ((kind == '%' || kind == '#') && control != '+') {
          // Only when the tag starts its line: the source before it on that line is blank.
          size_t j = open;
          while (j > pos && (src_[j - 1] == ' ' || src_[j - 1] == '\t')) --j;
          if (j == 0 || src_[j - 1] == '\n') {
            size_t k = text.size();
            while (k > 0 && (text[k - 1] == ' ' || text[k - 1] == '\t')) --k;
            text.resize(k);
          }
        }
      }
      if (!text.empty()) {
        Piece p;
        p.kind = Piece::Kind::kText;
        p.text = std::move(text);
        set_position(p, pos);
        pieces.push_back(std::move(p));
      }
      if (open == std::string::npos) break;
      pos = tag(open, kind, pieces, strip_next, trim_newline);
    }
    return pieces;
  }

 private:
  std::string src_;
  const std::string& origin_;

  static bool starts(const std::string& s, const char* p) { return s.compare(0, std::strlen(p), p) == 0; }

  size_t find_tag(size_t from) const {
    for (size_t at = src_.find('{', from); at != std::string::npos; at = src_.find('{', at + 1))
      if (at + 1 < src_.size() && (src_[at + 1] == '{' || src_[at + 1] == '%' || src_[at + 1] == '#')) return at;
    return std::string::npos;
  }

  void where(size_t offset, int& line, int& col) const {
    line = 1;
    col = 1;
    for (size_t i = 0; i < offset && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
  }
  template <typename T>
  void set_position(T& p, size_t offset) const {
    where(offset, p.line, p.col);
  }

  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    int line, col;
    where(offset, line, col);
    VERLPP_FAIL_AT(origin_, "line {}, column {}: {}", line, col, message);
  }

  // Lexes the tag at `open`; returns the position after it.
  size_t tag(size_t open, char kind, std::vector<Piece>& pieces, bool& strip_next, bool& trim_newline) {
    size_t pos = open + 2;
    if (pos < src_.size() && (src_[pos] == '-' || src_[pos] == '+')) ++pos;
    if (kind == '#') {
      const size_t close = src_.find("#}", pos);
      if (close == std::string::npos) fail(open, "a comment is not closed (\"#}\" missing)");
      const bool minus = close > pos && src_[close - 1] == '-';
      strip_next = minus;
      trim_newline = !(close > pos && src_[close - 1] == '+');
      return close + 2;
    }
    Piece p;
    p.kind = kind == '{' ? Piece::Kind::kOutput : Piece::Kind::kStatement;
    set_position(p, open);
    const char* close = kind == '{' ? "}}" : "%}";
    int depth = 0;
    for (;;) {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
      if (pos >= src_.size()) fail(open, fmt::format("a tag is not closed (\"{}\" missing)", close));
      // The tag's end, with its whitespace control.
      if (depth == 0) {
        const bool marked = (src_[pos] == '-' || src_[pos] == '+') && src_.compare(pos + 1, 2, close) == 0;
        if (marked || src_.compare(pos, 2, close) == 0) {
          strip_next = marked && src_[pos] == '-';
          trim_newline = kind == '%' && !(marked && src_[pos] == '+');
          pos += marked ? 3 : 2;
          break;
        }
      }
      Token t = token(pos, depth);
      p.tokens.push_back(std::move(t));
    }
    Token end;
    end.kind = Token::Kind::kEnd;
    end.line = p.line;
    end.col = p.col;
    p.tokens.push_back(end);
    // {% raw %} ... {% endraw %}: the text between is literal.
    if (p.kind == Piece::Kind::kStatement && p.tokens.size() == 2 && p.tokens[0].kind == Token::Kind::kName &&
        p.tokens[0].text == "raw") {
      for (size_t at = find_tag(pos); at != std::string::npos; at = find_tag(at + 1)) {
        if (src_[at + 1] != '%') continue;
        size_t k = at + 2;
        const bool minus_open = k < src_.size() && src_[k] == '-';
        if (minus_open || (k < src_.size() && src_[k] == '+')) ++k;
        while (k < src_.size() && is_space(src_[k])) ++k;
        if (src_.compare(k, 6, "endraw") != 0) continue;
        k += 6;
        while (k < src_.size() && is_space(src_[k])) ++k;
        const bool minus_close = k < src_.size() && src_[k] == '-';
        if (minus_close || (k < src_.size() && src_[k] == '+')) ++k;
        if (src_.compare(k, 2, "%}") != 0) continue;
        std::string text = src_.substr(pos, at - pos);
        if (strip_next) {
          size_t s = 0;
          while (s < text.size() && is_space(text[s])) ++s;
          text.erase(0, s);
        }
        if (minus_open) {
          size_t e = text.size();
          while (e > 0 && is_space(text[e - 1])) --e;
          text.resize(e);
        }
        Piece raw;
        raw.kind = Piece::Kind::kText;
        raw.text = std::move(text);
        set_position(raw, pos);
        if (!raw.text.empty()) pieces.push_back(std::move(raw));
        strip_next = minus_close;
        trim_newline = true;
        return k + 2;
      }
      fail(open, "{% raw %} is not closed by {% endraw %}");
    }
    pieces.push_back(std::move(p));
    return pos;
  }

  Token token(size_t& pos, int& depth) {
    Token t;
    set_position(t, pos);
    const char c = src_[pos];
    if (is_name_start(c)) {
      size_t end = pos;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      t.kind = Token::Kind::kName;
      t.text = src_.substr(pos, end - pos);
      pos = end;
      return t;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t end = pos;
      while (end < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) ++end;
      bool is_float = false;
      if (end + 1 < src_.size() && src_[end] == '.' && std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
        is_float = true;
        ++end;
        while (end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]))) ++end;
      }
      if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
        size_t k = end + 1;
        if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
        if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
          is_float = true;
          end = k;
          while (end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]))) ++end;
        }
      }
      std::string digits;
      for (size_t k = pos; k < end; ++k)
        if (src_[k] != '_') digits += src_[k];
      t.kind = is_float ? Token::Kind::kFloat : Token::Kind::kInt;
      try {
        t.number = is_float ? Json(std::stod(digits)) : Json(std::stoll(digits));
      } catch (const std::exception&) {
        fail(pos, fmt::format("the number {} is out of range", digits));
      }
      t.text = digits;
      pos = end;
      return t;
    }
    if (c == '\'' || c == '"') {
      t.kind = Token::Kind::kString;
      t.text = string_literal(pos);
      return t;
    }
    static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                 ">",  "(",  ")",  "[",  "]",  "{",  "}", ",", ".", ":", "|", "="};
    for (const char* op : kOps) {
      const size_t n = std::strlen(op);
      if (src_.compare(pos, n, op) == 0) {
        t.kind = Token::Kind::kOp;
        t.text = op;
        pos += n;
        if (n == 1 && (c == '(' || c == '[' || c == '{')) ++depth;
        if (n == 1 && (c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        return t;
      }
    }
    fail(pos, fmt::format("unexpected character {}", Json(std::string(1, c)).dump()));
  }

  // A quoted string at `pos` with Python's escapes (Jinja decodes them as unicode-escape).
  std::string string_literal(size_t& pos) {
    const char quote = src_[pos];
    const size_t start = pos++;
    std::string out;
    while (pos < src_.size() && src_[pos] != quote) {
      char c = src_[pos++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos >= src_.size()) break;
      const char e = src_[pos++];
      auto hex = [&](int n) {
        if (pos + n > src_.size()) fail(start, "a \\x, \\u or \\U escape is cut short");
        const std::string digits = src_.substr(pos, n);
        for (char d : digits)
          if (!std::isxdigit(static_cast<unsigned char>(d)))
            fail(start, "a \\x, \\u or \\U escape has a non-hex digit");
        pos += n;
        return static_cast<char32_t>(std::stoul(digits, nullptr, 16));
      };
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case '\n':
          break;  // a line continuation
        case 'x':
          tok::append_utf8(hex(2), out);
          break;
        case 'u':
          tok::append_utf8(hex(4), out);
          break;
        case 'U':
          tok::append_utf8(hex(8), out);
          break;
        default:
          if (e >= '0' && e <= '7') {  // octal, up to three digits
            char32_t v = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && pos < src_.size() && src_[pos] >= '0' && src_[pos] <= '7'; ++k)
              v = v * 8 + static_cast<char32_t>(src_[pos++] - '0');
            tok::append_utf8(v, out);
          } else {  // an unknown escape keeps its backslash
            out += '\\';
            out += e;
          }
      }
    }
    if (pos >= src_.size()) fail(start, "a string is not closed");
    ++pos;
    return out;
  }
};

}  // namespace

std::vector<Piece> lex(const std::string& source, const std::string& origin) { return Lexer(source, origin).run(); }

}  // namespace verlpp::model::jinja
