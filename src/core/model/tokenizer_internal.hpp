// Internals of the tokenizer shared by its source files (not installed): UTF-8 and Unicode
// class helpers (ICU behind them), the byte-level alphabet, normalizers, pre-tokenizers, and the
// BPE model. Each piece is built from one node of tokenizer.json and errors name that node.
#pragma once

#include <verlpp/model/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace verlpp::model::tok {

// ---- Files (tokenizer.cpp): POSIX stat, not std::filesystem (see file_util.hpp's note) ----

// Whether `path` is a folder / an existing file or folder.
bool is_directory(const std::string& path);
bool path_exists(const std::string& path);
// `folder`/`name` (no separator doubled).
std::string path_join(const std::string& folder, const std::string& name);

// ---- UTF-8 (tokenizer_unicode.cpp) ----

// Decodes the valid UTF-8 sequence at text[pos], advancing pos. Precondition: text is valid.
inline char32_t next_code_point(std::string_view text, size_t& pos) {
  auto b = static_cast<unsigned char>(text[pos]);
  if (b < 0x80) {
    ++pos;
    return b;
  }
  int extra = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : 1;
  char32_t c = b & (0x3F >> extra);
  for (int k = 1; k <= extra; ++k) c = (c << 6) | (static_cast<unsigned char>(text[pos + k]) & 0x3F);
  pos += extra + 1;
  return c;
}
// Appends the UTF-8 form of `c`.
void append_utf8(char32_t c, std::string& out);
// Byte offset of the first invalid UTF-8 sequence, or npos when `text` is valid.
size_t find_invalid_utf8(std::string_view text);
// Appends `bytes` as valid UTF-8, each maximal invalid subpart replaced by one U+FFFD (Rust's
// from_utf8_lossy). Unless `final`, an incomplete but so-far-valid sequence at the end is left
// unconsumed. Returns the number of bytes consumed.
size_t append_utf8_lossy(std::string_view bytes, std::string& out, bool final);

// ---- Unicode classes (ICU for non-ASCII) ----

enum CharClass : uint8_t {
  kLetter = 1,   // \p{L}
  kNumber = 2,   // \p{N}
  kSpace = 4,    // \s in Oniguruma and Rust regex: the White_Space property
  kNewline = 8,  // \r or \n
};
uint8_t char_class(char32_t c);
// Rust regex \w (added tokens' single_word test): Alphabetic, M, Nd, Pc, Join_Control.
bool is_word_char(char32_t c);
// Simple case fold to an ASCII letter for Oniguruma's (?i:...) on ASCII patterns: 'S' and
// U+017F (long s) -> 's'; 0 when `c` folds to no ASCII letter.
char32_t fold_to_ascii(char32_t c);

// ---- Byte-level alphabet (GPT-2's bytes_to_unicode) ----

struct ByteLevelAlphabet {
  std::array<char32_t, 256> byte_to_char{};
  std::unordered_map<char32_t, uint8_t> char_to_byte;
  // The byte form of a token in this alphabet; false if a character is outside it.
  bool to_bytes(std::string_view token, std::string& bytes) const;
  // The token form of raw bytes ("Ġworld" for " world").
  std::string to_token(std::string_view bytes) const;
};
const ByteLevelAlphabet& byte_level_alphabet();

// ---- Normalizers (tokenizer_normalize.cpp) ----

class Normalizer {
 public:
  // Builds from the "normalizer" node (null gives the identity); `where` names the node.
  static Normalizer from_json(const nlohmann::json& node, const std::string& where);
  bool is_identity() const { return steps_.empty(); }
  // Normalizes `text` in place.
  void apply(std::string& text) const;

  struct Step {
    enum Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kStrip, kReplace, kPrepend };
    explicit Step(Kind k) : kind(k) {}
    Kind kind;
    bool left = false, right = false;  // kStrip
    std::string from, to;              // kReplace (literal), kPrepend (to)
  };

 private:
  std::vector<Step> steps_;
};

// ---- Pre-tokenizers (tokenizer_pretokenize.cpp) ----

// A piece of text during pre-tokenization: a view into the input or into owned storage.
using Pieces = std::vector<std::string_view>;

// Reused buffers of one encode call (allocated once per thread, passed down explicitly).
struct Scratch {
  std::vector<char32_t> cps;                               // code points of the text being split
  std::vector<uint8_t> classes;                            // their CharClass bits
  std::vector<uint32_t> offsets;                           // their byte offsets, plus the end
  std::vector<std::tuple<size_t, size_t, bool>> segments;  // (begin, end, is_match)
  Pieces pieces, next;
  std::deque<std::string> storage;  // text made by pre-tokenizers (prefix spaces)
  std::vector<int32_t> symbols;     // BPE working symbols
};

class PreTokenizer {
 public:
  // Builds from the "pre_tokenizer" node (null gives one piece per segment).
  static PreTokenizer from_json(const nlohmann::json& node, const std::string& where);
  // Splits `text` into pieces appended to `out` (which must not be scratch.pieces/next); new
  // strings (prefix spaces) go to scratch.storage.
  void split(std::string_view text, Pieces& out, Scratch& scratch) const;
  // Whether a ByteLevel step is present (the BPE alphabet is then bytes).
  bool is_byte_level() const { return byte_level_; }

  enum class Pattern { kQwen2, kLlama3, kGpt2, kLiteral };
  struct Step {
    enum Kind { kSplit, kByteLevel };
    explicit Step(Kind k) : kind(k) {}
    Kind kind;
    Pattern pattern = Pattern::kGpt2;
    std::string literal;          // kLiteral
    bool remove_matches = false;  // behaviour "Removed" (else "Isolated")
    bool invert = false;
    bool add_prefix_space = false;  // kByteLevel
  };

 private:
  std::vector<Step> steps_;
  bool byte_level_ = false;
};

// Splits `text` at the matches of one of the known pre-tokenizer regexes (Isolated pieces).
void split_by_pattern(PreTokenizer::Pattern pattern, std::string_view text, Pieces& out);

// ---- BPE model (tokenizer_bpe.cpp) ----

class Bpe {
 public:
  // Builds from the "model" node; `byte_level` selects the raw-byte alphabet.
  static std::unique_ptr<Bpe> from_json(const nlohmann::json& node, const std::string& where, bool byte_level);
  // Empties the word cache.
  void clear_cache() const {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    cache_.clear();
  }
  // Appends the ids of one pre-tokenized piece (raw bytes when byte-level).
  void encode_piece(std::string_view piece, std::vector<int32_t>& ids, Scratch& scratch) const;

  std::unordered_map<std::string, int32_t> vocab;  // stored token form -> id
  std::vector<std::string> id_to_token;            // id -> stored form ("" for holes)

 private:
  void merge_word(std::vector<int32_t>& symbols) const;
  int32_t lookup_symbol(std::string_view text) const;

  bool byte_level_ = false;
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
  std::array<int32_t, 256> byte_ids_{};                  // raw byte -> id (-1 missing)
  std::unordered_map<std::string, int32_t> byte_vocab_;  // raw bytes -> id (byte-level)
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  // Merges keyed by (left id << 32 | right id): an open-addressing table (linear probing, at
  // most half full), since a cold encode is dominated by these lookups.
  struct MergeTable {
    std::vector<uint64_t> keys;  // kEmpty where unused
    std::vector<Merge> values;
    uint64_t mask = 0;
    int shift = 64;
    static constexpr uint64_t kEmpty = ~uint64_t(0);
    void reserve(size_t count);
    // Inserts or replaces: a pair listed twice keeps its last rank, as HF's merge map does.
    void insert(uint64_t key, Merge value);
    const Merge* find(uint64_t key) const {
      for (uint64_t slot = (key * 0x9E3779B97F4A7C15ull) >> shift;; slot = (slot + 1) & mask) {
        if (keys[slot] == key) return &values[slot];
        if (keys[slot] == kEmpty) return nullptr;
      }
    }
  };
  MergeTable merges_;
  // Word cache keyed by the word's hash; the word is stored to rule out collisions.
  struct CacheEntry {
    std::string word;
    std::vector<int32_t> ids;
  };
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<size_t, CacheEntry> cache_;
};

}  // namespace verlpp::model::tok
