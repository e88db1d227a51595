// Hugging Face `tokenizer.json` tokenizers: byte-level BPE (Qwen2, Qwen3, Llama 3, GPT-2 style).
// The pipeline is HF's: added tokens are cut out first (on the raw text, then on the normalized
// text for `normalized` ones), the rest is normalized, pre-tokenized (Split / ByteLevel /
// Sequence), merged by BPE and post-processed; decode maps ids back to bytes and repairs bad
// UTF-8 the way Rust's from_utf8_lossy does. No LibTorch here: the tokenizer is plain C++ + ICU.
#pragma once

#include <verlpp/core/token_id.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace verlpp::model {

// One entry of tokenizer.json's "added_tokens" (HF's AddedToken), with its id.
struct AddedToken {
  TokenId id = -1;
  std::string content;
  bool single_word = false;  // match only when not inside a word (\w on neither side)
  bool lstrip = false;       // also swallow the whitespace on its left
  bool rstrip = false;       // also swallow the whitespace on its right
  bool normalized = true;    // matched against the normalized text rather than the raw text
  bool special = false;      // dropped by decode(..., skip_special_tokens = true)
};

// A loaded tokenizer. Immutable after loading except for an internal word cache, so one
// instance may be shared between threads.
class Tokenizer {
 public:
  // Loads `path`: a tokenizer.json file, or a folder holding one. Errors name the file and the
  // JSON field that is missing or malformed.
  static Tokenizer from_file(const std::string& path);
  // Parses tokenizer.json text; `origin` names it in errors (a path, or "<memory>").
  static Tokenizer from_json_string(const std::string& json_text, const std::string& origin = "<memory>");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text` (UTF-8; invalid UTF-8 is an Error naming the byte offset). Added and
  // special tokens in the text are always recognised; `add_special_tokens` only adds what the
  // post-processor adds (e.g. Llama 3's <|begin_of_text|>).
  TokenIds encode(std::string_view text, bool add_special_tokens = false) const;
  // Text of `ids`. Ids unknown to the vocabulary are skipped (as HF does); with
  // `skip_special_tokens`, added tokens marked special are left out.
  std::string decode(const TokenIds& ids, bool skip_special_tokens = false) const;

  // Id of a token string (added token content, or a vocabulary entry in its stored form).
  std::optional<TokenId> token_to_id(std::string_view token) const;
  // Stored form of a token (e.g. "Ġworld"), or nullopt for an unknown id.
  std::optional<std::string> id_to_token(TokenId id) const;
  // Raw bytes the decoder produces for one id (empty for unknown ids); may be partial UTF-8.
  const std::string& token_bytes(TokenId id) const;
  // Whether `id` is an added token marked special.
  bool is_special(TokenId id) const;

  // Largest id + 1 over the model vocabulary and the added tokens.
  TokenId vocab_size() const;
  // The added tokens, in file order.
  const std::vector<AddedToken>& added_tokens() const;
  // Where this tokenizer was loaded from (a path or "<memory>").
  const std::string& origin() const;
  // Empties the word cache (memory, or cold-start measurements); results never change.
  void clear_cache() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental decoding for generation: push ids one at a time, get back only complete UTF-8.
// A multi-byte character split across tokens is held until its last byte arrives; bytes that
// can never become valid come out as U+FFFD exactly as decode() would produce them, so the
// concatenation of all outputs plus finish() equals decode() of all ids.
class StreamDecoder {
 public:
  // `tokenizer` must outlive the decoder.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  // Text made complete by `id` (often empty while a character is incomplete).
  std::string push(TokenId id);
  // Ends the stream: any incomplete tail comes out as U+FFFD. The decoder can then be reused.
  std::string finish();
  // Number of bytes held back waiting for the rest of a character (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;
};

}  // namespace verlpp::model
