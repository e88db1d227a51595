// UTF-8 helpers, Unicode character classes and the byte-level alphabet for the tokenizer.
// Classes follow the engines HF tokenizers uses: Oniguruma for pre-tokenizer regexes (\s is the
// White_Space property, \p{L}/\p{N} the general categories) and Rust's regex crate for added
// tokens' word boundaries (\w). ASCII is answered from a table; ICU answers the rest.
#include "tokenizer_internal.hpp"

#include <unicode/uchar.h>

namespace verlpp::model::tok {

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

namespace {

// Length of the valid UTF-8 sequence at bytes[pos] (Unicode Table 3-7), or -k when the first
// k bytes are a maximal invalid subpart, or 0 when the input ends inside a sequence that is
// valid so far.
int sequence_length(std::string_view bytes, size_t pos) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(bytes[pos + k]); };
  unsigned char b = at(0);
  if (b < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the first continuation byte
  if (b >= 0xC2 && b <= 0xDF)
    need = 1;
  else if (b == 0xE0) {
    need = 2;
    lo = 0xA0;
  } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF)
    need = 2;
  else if (b == 0xED) {
    need = 2;
    hi = 0x9F;
  } else if (b == 0xF0) {
    need = 3;
    lo = 0x90;
  } else if (b >= 0xF1 && b <= 0xF3)
    need = 3;
  else if (b == 0xF4) {
    need = 3;
    hi = 0x8F;
  } else
    return -1;
  for (int k = 1; k <= need; ++k) {
    if (pos + k >= bytes.size()) return 0;
    unsigned char c = at(k);
    unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) return -k;
  }
  return need + 1;
}

}  // namespace

size_t find_invalid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    int len = sequence_length(text, pos);
    if (len <= 0) return pos;
    pos += size_t(len);
  }
  return std::string_view::npos;
}

size_t append_utf8_lossy(std::string_view bytes, std::string& out, bool final) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t start = pos;
    while (pos < bytes.size() && static_cast<unsigned char>(bytes[pos]) < 0x80) ++pos;
    out.append(bytes.data() + start, pos - start);
    if (pos == bytes.size()) break;
    int len = sequence_length(bytes, pos);
    if (len > 0) {
      out.append(bytes.data() + pos, size_t(len));
      pos += size_t(len);
    } else if (len < 0) {
      out += kReplacement;
      pos += size_t(-len);
    } else if (!final) {
      return pos;  // incomplete: wait for more bytes
    } else {
      out += kReplacement;
      return bytes.size();
    }
  }
  return pos;
}

namespace {

uint8_t compute_class(char32_t c) {
  uint8_t out = 0;
  UChar32 u = UChar32(c);
  uint32_t mask = U_GET_GC_MASK(u);
  if (mask & U_GC_L_MASK) out |= kLetter;
  if (mask & U_GC_N_MASK) out |= kNumber;
  if (u_isUWhiteSpace(u)) out |= kSpace;
  if (c == '\r' || c == '\n') out |= kNewline;
  return out;
}

struct AsciiClasses {
  std::array<uint8_t, 128> table{};
  AsciiClasses() {
    for (char32_t c = 0; c < 128; ++c) table[c] = compute_class(c);
  }
};

}  // namespace

uint8_t char_class(char32_t c) {
  static const AsciiClasses ascii;
  if (c < 128) return ascii.table[c];
  return compute_class(c);
}

bool is_word_char(char32_t c) {
  if (c < 128) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  UChar32 u = UChar32(c);
  return u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || (U_GET_GC_MASK(u) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) ||
         u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL);
}

char32_t fold_to_ascii(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c - 'A' + 'a';
  if (c >= 'a' && c <= 'z') return c;
  if (c == 0x017F) return 's';  // LATIN SMALL LETTER LONG S folds to 's'
  if (c == 0x212A) return 'k';  // KELVIN SIGN folds to 'k'
  return 0;
}

bool ByteLevelAlphabet::to_bytes(std::string_view token, std::string& bytes) const {
  bytes.clear();
  size_t pos = 0;
  while (pos < token.size()) {
    char32_t c = next_code_point(token, pos);
    auto it = char_to_byte.find(c);
    if (it == char_to_byte.end()) return false;
    bytes += char(it->second);
  }
  return true;
}

std::string ByteLevelAlphabet::to_token(std::string_view bytes) const {
  std::string out;
  for (unsigned char b : bytes) append_utf8(byte_to_char[b], out);
  return out;
}

const ByteLevelAlphabet& byte_level_alphabet() {
  // Printable Latin-1 bytes stand for themselves; the others (controls, space, 0x7F-0xA0,
  // 0xAD) are shifted to 256, 257, ... in byte order, so every byte is a visible character.
  static const ByteLevelAlphabet alphabet = [] {
    ByteLevelAlphabet a;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      a.byte_to_char[size_t(b)] = printable ? char32_t(b) : next++;
      a.char_to_byte[a.byte_to_char[size_t(b)]] = uint8_t(b);
    }
    return a;
  }();
  return alphabet;
}

}  // namespace verlpp::model::tok
