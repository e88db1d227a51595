// Tokenizer: loading tokenizer.json and the encode/decode pipeline. Added tokens are found
// with a byte trie, leftmost-longest, like HF's Aho-Corasick matcher, and a match rejected by
// single_word is skipped without retrying shorter matches inside it (HF does the same). Decode
// precomputes each id's bytes (ByteLevel decoder: a token whose characters are not all in the
// byte alphabet keeps its own UTF-8), then repairs UTF-8 once for the whole output.
#include "../util/input_file.hpp"
#include "tokenizer_internal.hpp"

#include <verlpp/core/error_text.hpp>

#include <verlpp/core/json_limits.hpp>
#include <verlpp/core/error.hpp>

#include <sys/stat.h>

#include <fstream>
#include <sstream>

namespace verlpp::model {

namespace tok {

bool is_directory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}
bool path_exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}
std::string path_join(const std::string& folder, const std::string& name) {
  return !folder.empty() && folder.back() == '/' ? folder + name : folder + "/" + name;
}

}  // namespace tok

using tok::kSpace;

namespace {

// A byte trie over added-token contents for leftmost-longest matching.
class TokenTrie {
 public:
  void add(const std::string& text, int32_t token_index) {
    if (text.empty()) return;
    if (nodes_.empty()) nodes_.emplace_back();
    size_t node = 0;
    first_byte_[static_cast<unsigned char>(text[0])] = true;
    for (unsigned char b : text) {
      auto it = nodes_[node].children.find(b);
      if (it == nodes_[node].children.end()) {
        nodes_[node].children.emplace(b, nodes_.size());
        node = nodes_.size();
        nodes_.emplace_back();
      } else {
        node = it->second;
      }
    }
    if (nodes_[node].token < 0) nodes_[node].token = token_index;
  }
  bool empty() const { return nodes_.empty(); }
  // Longest match starting at `pos`: (end, token index), or token index -1.
  std::pair<size_t, int32_t> longest_at(std::string_view text, size_t pos) const {
    std::pair<size_t, int32_t> best{pos, -1};
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) return best;
    size_t node = 0;
    for (size_t k = pos; k < text.size(); ++k) {
      auto it = nodes_[node].children.find(static_cast<unsigned char>(text[k]));
      if (it == nodes_[node].children.end()) break;
      node = it->second;
      if (nodes_[node].token >= 0) best = {k + 1, nodes_[node].token};
    }
    return best;
  }

 private:
  struct Node {
    std::unordered_map<unsigned char, size_t> children;
    int32_t token = -1;
  };
  std::vector<Node> nodes_;
  std::array<bool, 256> first_byte_{};
};

// The code point that ends just before byte `end`, or 0 when end == 0.
char32_t code_point_before(std::string_view text, size_t end) {
  if (end == 0) return 0;
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return tok::next_code_point(text, start);
}
// The code point at byte `pos`, or 0 at the end.
char32_t code_point_at(std::string_view text, size_t pos) {
  return pos < text.size() ? tok::next_code_point(text, pos) : 0;
}
bool is_space(char32_t c) { return c != 0 && (tok::char_class(c) & kSpace); }

// A post-processor template for one sequence: special-token ids and the place of the text.
struct TemplateItem {
  bool is_sequence = false;
  std::vector<int32_t> ids;
};

std::string read_file(const std::string& path) { return files::read_input(path, "tokenizer file"); }

}  // namespace

struct Tokenizer::Impl {
  std::string origin;
  tok::Normalizer normalizer;
  tok::PreTokenizer pre_tokenizer;
  std::unique_ptr<tok::Bpe> bpe;
  std::vector<AddedToken> added;
  std::unordered_map<std::string, int32_t> added_by_content;  // content -> index into added
  std::unordered_map<int32_t, int32_t> added_by_id;           // id -> index into added
  TokenTrie raw_trie, normalized_trie;
  std::vector<std::string> id_bytes;  // id -> decoded bytes
  std::vector<char> special;          // id -> is an added special token
  std::vector<std::vector<TemplateItem>> templates;
  int32_t vocab_size = 0;

  // Splits `text` at added tokens (HF's find_matches); calls on_text(view) for the text between
  // and on_token(id) for each token, in order.
  template <class OnText, class OnToken>
  void split_added(std::string_view text, const TokenTrie& trie, OnText&& on_text, OnToken&& on_token) const {
    if (trie.empty()) return on_text(text);
    size_t emitted = 0, pos = 0;
    while (pos < text.size()) {
      auto [end, index] = trie.longest_at(text, pos);
      if (index < 0) {
        ++pos;
        continue;
      }
      const AddedToken& token = added[size_t(index)];
      size_t start = pos;
      pos = end;
      if (token.single_word &&
          (tok::is_word_char(code_point_before(text, start)) || tok::is_word_char(code_point_at(text, end))))
        continue;
      if (token.lstrip) {
        size_t s = start;
        while (s > emitted && is_space(code_point_before(text, s))) {
          --s;
          while (s > 0 && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
        }
        start = std::max(s, emitted);
      }
      if (token.rstrip) {
        while (end < text.size() && is_space(code_point_at(text, end))) {
          ++end;
          while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
        }
      }
      if (emitted < start) on_text(text.substr(emitted, start - emitted));
      on_token(token.id);
      emitted = end;
      pos = std::max(pos, end);
    }
    if (emitted < text.size()) on_text(text.substr(emitted));
  }

  void encode_normalized(std::string_view text, std::vector<int32_t>& ids, tok::Scratch& scratch) const {
    tok::Pieces& pieces = scratch.pieces;
    pieces.clear();
    scratch.storage.clear();
    pre_tokenizer.split(text, pieces, scratch);
    for (std::string_view piece : pieces) bpe->encode_piece(piece, ids, scratch);
  }

  void parse_added_tokens(const nlohmann::json& root);
  void parse_post_processor(const nlohmann::json& node, const std::string& where);
  void build_decoder(const nlohmann::json& node);
};

void Tokenizer::Impl::parse_added_tokens(const nlohmann::json& root) {
  if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return;
  VERLPP_CHECK(root["added_tokens"].is_array(), "{}: field \"added_tokens\": expected an array", origin);
  const auto& list = root["added_tokens"];
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& t = list[i];
    std::string where = fmt::format("{}: field \"added_tokens[{}]\"", origin, i);
    VERLPP_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t["id"].get<int64_t>() >= 0 &&
                     t.contains("content") && t["content"].is_string(),
                 "{}: expected an object with an integer \"id\" and a string \"content\", got {}", where,
                 t.dump().substr(0, 200));
    AddedToken token;
    token.id = t["id"].get<int32_t>();
    token.content = t["content"].get<std::string>();
    token.single_word = t.value("single_word", false);
    token.lstrip = t.value("lstrip", false);
    token.rstrip = t.value("rstrip", false);
    token.normalized = t.value("normalized", !t.value("special", false));
    token.special = t.value("special", false);
    VERLPP_CHECK(!token.content.empty(), "{}: empty \"content\"", where);
    VERLPP_CHECK(tok::find_invalid_utf8(token.content) == std::string_view::npos, "{}: content is not UTF-8", where);
    auto index = int32_t(added.size());
    added_by_content[token.content] = index;
    added_by_id[token.id] = index;
    added.push_back(token);
  }
  for (size_t i = 0; i < added.size(); ++i) {
    if (!added[i].normalized) {
      raw_trie.add(added[i].content, int32_t(i));
    } else {
      std::string text = added[i].content;
      normalizer.apply(text);
      normalized_trie.add(text, int32_t(i));
    }
  }
}

void Tokenizer::Impl::parse_post_processor(const nlohmann::json& node, const std::string& where) {
  if (node.is_null()) return;
  VERLPP_CHECK(node.is_object() && node.contains("type") && node["type"].is_string(),
               "{}: expected an object with a string \"type\"", where);
  const std::string type = node["type"].get<std::string>();
  if (type == "ByteLevel") return;  // only offsets change; ids do not
  if (type == "Sequence") {
    VERLPP_CHECK(node.contains("processors") && node["processors"].is_array(), "{}.processors: expected an array",
                 where);
    for (size_t i = 0; i < node["processors"].size(); ++i)
      parse_post_processor(node["processors"][i], fmt::format("{}.processors[{}]", where, i));
    return;
  }
  VERLPP_CHECK(type == "TemplateProcessing",
               "{}: unsupported post_processor type \"{}\" (supported: ByteLevel, TemplateProcessing, Sequence)", where,
               type);
  VERLPP_CHECK(node.contains("single") && node["single"].is_array(), "{}.single: expected an array", where);
  const auto specials = node.value("special_tokens", nlohmann::json::object());
  std::vector<TemplateItem> items;
  for (size_t i = 0; i < node["single"].size(); ++i) {
    const auto& item = node["single"][i];
    TemplateItem out;
    if (item.contains("Sequence")) {
      out.is_sequence = true;
    } else {
      VERLPP_CHECK(item.contains("SpecialToken") && item["SpecialToken"].contains("id"),
                   "{}.single[{}]: expected a SpecialToken or a Sequence", where, i);
      std::string name = item["SpecialToken"]["id"].get<std::string>();
      VERLPP_CHECK(specials.contains(name) && specials[name].contains("ids") && specials[name]["ids"].is_array(),
                   "{}.special_tokens: no ids for \"{}\"", where, name);
      for (const auto& id : specials[name]["ids"]) out.ids.push_back(id.get<int32_t>());
    }
    items.push_back(std::move(out));
  }
  templates.push_back(std::move(items));
}

void Tokenizer::Impl::build_decoder(const nlohmann::json& node) {
  const std::string where = origin + ": field \"decoder\"";
  VERLPP_CHECK(node.is_object() && node.value("type", std::string()) == "ByteLevel",
               "{}: unsupported decoder {} (supported: ByteLevel)", where, node.dump().substr(0, 200));
  const auto& alphabet = tok::byte_level_alphabet();
  id_bytes.assign(size_t(vocab_size), std::string());
  special.assign(size_t(vocab_size), 0);
  auto decoded = [&](const std::string& token) {
    std::string bytes;
    return alphabet.to_bytes(token, bytes) ? bytes : token;
  };
  for (size_t id = 0; id < bpe->id_to_token.size(); ++id)
    if (!bpe->id_to_token[id].empty()) id_bytes[id] = decoded(bpe->id_to_token[id]);
  for (const AddedToken& t : added) {
    id_bytes[size_t(t.id)] = decoded(t.content);
    special[size_t(t.id)] = t.special;
  }
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::string file = path;
  if (tok::is_directory(path)) file = tok::path_join(path, "tokenizer.json");
  VERLPP_CHECK(tok::path_exists(file), "tokenizer file \"{}\" does not exist", file);
  return from_json_string(read_file(file), file);
}

Tokenizer Tokenizer::from_json_string(const std::string& json_text, const std::string& origin) {
  nlohmann::json root;
  check_json_depth(json_text, origin);
  try {
    root = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number that overflows
    VERLPP_FAIL_AT(origin, "not valid JSON: {}", e.what());
  }
  VERLPP_CHECK(root.is_object(), "{}: expected a JSON object at the top level", origin);
  // A field of another JSON type than the format has, somewhere the checks do not look first, is
  // nlohmann-json's type error: it is reported against the file like every other problem.
  try {
    auto impl = std::make_unique<Impl>();
    impl->origin = origin;
    auto field = [&](const char* key) { return root.contains(key) ? root.at(key) : nlohmann::json(); };
    auto where = [&](const char* key) { return fmt::format("{}: field \"{}\"", origin, key); };
    impl->normalizer = tok::Normalizer::from_json(field("normalizer"), where("normalizer"));
    impl->pre_tokenizer = tok::PreTokenizer::from_json(field("pre_tokenizer"), where("pre_tokenizer"));
    VERLPP_CHECK(root.contains("model"), "{}: missing \"model\"", where("model"));
    impl->bpe = tok::Bpe::from_json(root.at("model"), where("model"), impl->pre_tokenizer.is_byte_level());
    impl->parse_added_tokens(root);
    impl->parse_post_processor(field("post_processor"), where("post_processor"));
    impl->vocab_size = int32_t(impl->bpe->id_to_token.size());
    for (const AddedToken& t : impl->added) impl->vocab_size = std::max(impl->vocab_size, int32_t(t.id + 1));
    impl->build_decoder(field("decoder"));
    return Tokenizer(std::move(impl));
  } catch (const nlohmann::json::exception& e) {
    VERLPP_FAIL_AT(origin, "malformed tokenizer: {}", error_text(e));
  }
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

TokenIds Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  size_t bad = tok::find_invalid_utf8(text);
  VERLPP_CHECK(bad == std::string_view::npos, "encode: input is not valid UTF-8 at byte {} (0x{:02x})", bad,
               bad == std::string_view::npos ? 0 : static_cast<unsigned char>(text[bad]));
  const Impl& im = *impl_;
  thread_local tok::Scratch scratch;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  auto push_id = [&](int32_t id) { ids.push_back(id); };
  auto on_text = [&](std::string_view segment) {
    if (im.normalizer.is_identity()) {
      im.split_added(
          segment, im.normalized_trie, [&](std::string_view s) { im.encode_normalized(s, ids, scratch); }, push_id);
      return;
    }
    std::string normalized(segment);
    im.normalizer.apply(normalized);
    im.split_added(
        normalized, im.normalized_trie, [&](std::string_view s) { im.encode_normalized(s, ids, scratch); }, push_id);
  };
  im.split_added(text, im.raw_trie, on_text, push_id);
  if (add_special_tokens) {
    for (const auto& items : im.templates) {
      std::vector<int32_t> out;
      for (const TemplateItem& item : items) {
        if (item.is_sequence)
          out.insert(out.end(), ids.begin(), ids.end());
        else
          out.insert(out.end(), item.ids.begin(), item.ids.end());
      }
      ids.swap(out);
    }
  }
  // BPE works in 32-bit ids (its tables' type); the public id type is TokenId.
  return TokenIds(ids.begin(), ids.end());
}

std::string Tokenizer::decode(const TokenIds& ids, bool skip_special_tokens) const {
  std::string bytes;
  for (TokenId id : ids) {
    if (id < 0 || id >= impl_->vocab_size) continue;
    if (skip_special_tokens && impl_->special[size_t(id)]) continue;
    bytes += impl_->id_bytes[size_t(id)];
  }
  std::string out;
  out.reserve(bytes.size());
  tok::append_utf8_lossy(bytes, out, true);
  return out;
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  std::string key(token);
  if (auto it = impl_->added_by_content.find(key); it != impl_->added_by_content.end())
    return impl_->added[size_t(it->second)].id;
  if (auto it = impl_->bpe->vocab.find(key); it != impl_->bpe->vocab.end()) return it->second;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(TokenId id) const {
  if (id < 0 || id >= impl_->vocab_size) return std::nullopt;
  if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end())
    return impl_->added[size_t(it->second)].content;
  if (id >= 0 && size_t(id) < impl_->bpe->id_to_token.size() && !impl_->bpe->id_to_token[size_t(id)].empty())
    return impl_->bpe->id_to_token[size_t(id)];
  return std::nullopt;
}

const std::string& Tokenizer::token_bytes(TokenId id) const {
  static const std::string kEmpty;
  return id >= 0 && id < impl_->vocab_size ? impl_->id_bytes[size_t(id)] : kEmpty;
}

bool Tokenizer::is_special(TokenId id) const { return id >= 0 && id < impl_->vocab_size && impl_->special[size_t(id)]; }

TokenId Tokenizer::vocab_size() const { return impl_->vocab_size; }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }
const std::string& Tokenizer::origin() const { return impl_->origin; }
void Tokenizer::clear_cache() const { impl_->bpe->clear_cache(); }

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamDecoder::push(TokenId id) {
  if (skip_special_tokens_ && tokenizer_->is_special(id)) return {};
  pending_ += tokenizer_->token_bytes(id);
  std::string out;
  size_t consumed = tok::append_utf8_lossy(pending_, out, false);
  pending_.erase(0, consumed);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  tok::append_utf8_lossy(pending_, out, true);
  pending_.clear();
  return out;
}

}  // namespace verlpp::model
