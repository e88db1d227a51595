// The BPE model of tokenizer.json. Merges are ranked id pairs; a word is merged lowest rank
// first, leftmost first among equal ranks (HF's order). With a byte-level pre-tokenizer the
// model works on raw bytes: each byte starts as the id of its byte-level character, so no
// per-call mapping to "Ġ"-strings is needed. Short words use a linear scan, long ones a heap;
// results of both are cached per word.
#include "tokenizer_internal.hpp"

#include <verlpp/core/error.hpp>

#include <queue>
#include <tuple>

namespace verlpp::model::tok {
namespace {

constexpr size_t kMaxCachedWordBytes = 256;
constexpr size_t kMaxCacheEntries = 1 << 18;
constexpr size_t kScanLimit = 64;  // words of more symbols use the heap

uint64_t pair_key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

const std::string& string_field(const nlohmann::json& node, const char* key, const std::string& where) {
  VERLPP_CHECK(node.contains(key) && node[key].is_string(), "{}.{}: expected a string", where, key);
  return node[key].get_ref<const std::string&>();
}

}  // namespace

void Bpe::MergeTable::reserve(size_t count) {
  size_t capacity = 16;
  shift = 60;
  while (capacity < 2 * count + 2) {
    capacity *= 2;
    --shift;
  }
  keys.assign(capacity, kEmpty);
  values.assign(capacity, Merge{0, 0});
  mask = capacity - 1;
}

void Bpe::MergeTable::insert(uint64_t key, Merge value) {
  for (uint64_t slot = (key * 0x9E3779B97F4A7C15ull) >> shift;; slot = (slot + 1) & mask) {
    if (keys[slot] == key || keys[slot] == kEmpty) {
      keys[slot] = key;
      values[slot] = value;
      return;
    }
  }
}

std::unique_ptr<Bpe> Bpe::from_json(const nlohmann::json& node, const std::string& where, bool byte_level) {
  VERLPP_CHECK(node.is_object(), "{}: expected an object", where);
  if (node.contains("type")) {
    const auto& type = string_field(node, "type", where);
    VERLPP_CHECK(type == "BPE", "{}.type: unsupported model \"{}\" (supported: BPE)", where, type);
  }
  auto bpe = std::make_unique<Bpe>();
  bpe->byte_level_ = byte_level;
  bpe->ignore_merges_ = node.value("ignore_merges", false);
  if (node.contains("dropout") && !node["dropout"].is_null())
    VERLPP_CHECK(node["dropout"].is_number() && node["dropout"].get<double>() == 0.0,
                 "{}.dropout: BPE dropout is not supported (got {})", where, node["dropout"].dump());
  VERLPP_CHECK(!node.value("byte_fallback", false), "{}.byte_fallback: true is not supported", where);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (node.contains(key) && !node[key].is_null())
      VERLPP_CHECK(node[key].is_string() && node[key].get<std::string>().empty(),
                   "{}.{}: only null or \"\" is supported, got {}", where, key, node[key].dump());
  }

  VERLPP_CHECK(node.contains("vocab") && node["vocab"].is_object(), "{}.vocab: expected an object", where);
  const auto& vocab = node["vocab"];
  bpe->vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    VERLPP_CHECK(it.value().is_number_integer() && it.value().get<int64_t>() >= 0 &&
                     it.value().get<int64_t>() < (int64_t(1) << 31),
                 "{}.vocab[{}]: expected a non-negative integer id, got {}", where, nlohmann::json(it.key()).dump(),
                 it.value().dump());
    int32_t id = it.value().get<int32_t>();
    bpe->vocab.emplace(it.key(), id);
    if (size_t(id) >= bpe->id_to_token.size()) bpe->id_to_token.resize(size_t(id) + 1);
    bpe->id_to_token[size_t(id)] = it.key();
  }

  if (node.contains("unk_token") && !node["unk_token"].is_null()) {
    const auto& unk = string_field(node, "unk_token", where);
    auto it = bpe->vocab.find(unk);
    VERLPP_CHECK(it != bpe->vocab.end(), "{}.unk_token: \"{}\" is not in the vocabulary", where, unk);
    bpe->unk_id_ = it->second;
  }

  VERLPP_CHECK(node.contains("merges") && node["merges"].is_array(), "{}.merges: expected an array", where);
  const auto& merges = node["merges"];
  bpe->merges_.reserve(merges.size());
  std::string left, right;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& m = merges[rank];
    if (m.is_string()) {  // "left right"
      const auto& text = m.get_ref<const std::string&>();
      size_t space = text.find(' ');
      VERLPP_CHECK(space != std::string::npos && text.find(' ', space + 1) == std::string::npos,
                   "{}.merges[{}]: expected \"<left> <right>\", got {}", where, rank, m.dump());
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else {
      VERLPP_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                   "{}.merges[{}]: expected a string or a pair of strings, got {}", where, rank, m.dump());
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    }
    auto l = bpe->vocab.find(left), r = bpe->vocab.find(right), merged = bpe->vocab.find(left + right);
    VERLPP_CHECK(l != bpe->vocab.end() && r != bpe->vocab.end() && merged != bpe->vocab.end(),
                 "{}.merges[{}]: {} uses a token missing from the vocabulary", where, rank, m.dump());
    bpe->merges_.insert(pair_key(l->second, r->second), Merge{int32_t(rank), merged->second});
  }

  if (byte_level) {
    const auto& alphabet = byte_level_alphabet();
    for (int b = 0; b < 256; ++b) {
      auto it = bpe->vocab.find(alphabet.to_token(std::string(1, char(b))));
      bpe->byte_ids_[size_t(b)] = it == bpe->vocab.end() ? -1 : it->second;
    }
    if (bpe->ignore_merges_) {
      std::string bytes;
      for (const auto& [token, id] : bpe->vocab)
        if (alphabet.to_bytes(token, bytes)) bpe->byte_vocab_.emplace(bytes, id);
    }
  }
  return bpe;
}

int32_t Bpe::lookup_symbol(std::string_view text) const {
  auto it = vocab.find(std::string(text));
  return it == vocab.end() ? unk_id_ : it->second;
}

void Bpe::merge_word(std::vector<int32_t>& symbols) const {
  const size_t n = symbols.size();
  if (n < 2) return;
  auto find_merge = [&](int32_t a, int32_t b) { return merges_.find(pair_key(a, b)); };
  if (n <= kScanLimit) {
    // ranks[k]: rank of the pair (symbols[k], symbols[k + 1]), INT32_MAX when none.
    std::vector<int32_t> ranks(n - 1), merged(n - 1);
    for (size_t k = 0; k + 1 < n; ++k) {
      const Merge* m = find_merge(symbols[k], symbols[k + 1]);
      ranks[k] = m ? m->rank : INT32_MAX;
      merged[k] = m ? m->id : -1;
    }
    while (!ranks.empty()) {
      size_t best = 0;
      for (size_t k = 1; k < ranks.size(); ++k)
        if (ranks[k] < ranks[best]) best = k;
      if (ranks[best] == INT32_MAX) break;
      symbols[best] = merged[best];
      symbols.erase(symbols.begin() + long(best) + 1);
      ranks.erase(ranks.begin() + long(best));
      merged.erase(merged.begin() + long(best));
      for (size_t k : {best - 1, best}) {
        if (k >= ranks.size()) continue;  // also skips best - 1 when best == 0 (wraps around)
        const Merge* m = find_merge(symbols[k], symbols[k + 1]);
        ranks[k] = m ? m->rank : INT32_MAX;
        merged[k] = m ? m->id : -1;
      }
    }
    return;
  }
  // Heap of candidate merges (rank, left position, right position, left id, right id); entries
  // made stale by earlier merges are recognised by their ids and skipped.
  using Candidate = std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t>;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  std::vector<int32_t> prev(n), next(n);
  std::vector<char> alive(n, 1);
  for (size_t k = 0; k < n; ++k) {
    prev[k] = int32_t(k) - 1;
    next[k] = k + 1 < n ? int32_t(k + 1) : -1;
  }
  auto push = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    if (const Merge* m = find_merge(symbols[size_t(l)], symbols[size_t(r)]))
      heap.emplace(m->rank, l, r, symbols[size_t(l)], symbols[size_t(r)]);
  };
  for (size_t k = 0; k + 1 < n; ++k) push(int32_t(k), int32_t(k + 1));
  while (!heap.empty()) {
    auto [rank, l, r, left_id, right_id] = heap.top();
    heap.pop();
    if (!alive[size_t(l)] || !alive[size_t(r)] || next[size_t(l)] != r || symbols[size_t(l)] != left_id ||
        symbols[size_t(r)] != right_id)
      continue;
    symbols[size_t(l)] = find_merge(left_id, right_id)->id;
    alive[size_t(r)] = 0;
    next[size_t(l)] = next[size_t(r)];
    if (next[size_t(r)] >= 0) prev[size_t(next[size_t(r)])] = l;
    push(prev[size_t(l)], l);
    push(l, next[size_t(l)]);
  }
  size_t out = 0;
  for (int32_t k = 0; k >= 0; k = next[size_t(k)]) symbols[out++] = symbols[size_t(k)];
  symbols.resize(out);
}

void Bpe::encode_piece(std::string_view piece, std::vector<int32_t>& ids, Scratch& scratch) const {
  if (piece.empty()) return;
  if (byte_level_ && piece.size() == 1) {  // a lone byte needs no merge and no cache
    int32_t id = byte_ids_[static_cast<unsigned char>(piece[0])];
    if (id < 0) id = unk_id_;
    if (id >= 0) ids.push_back(id);
    return;
  }
  const bool cacheable = piece.size() <= kMaxCachedWordBytes;
  const size_t key = std::hash<std::string_view>()(piece);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end() && it->second.word == piece) {
      ids.insert(ids.end(), it->second.ids.begin(), it->second.ids.end());
      return;
    }
  }
  std::vector<int32_t>& symbols = scratch.symbols;
  symbols.clear();
  if (ignore_merges_) {
    const auto& table = byte_level_ ? byte_vocab_ : vocab;
    auto it = table.find(std::string(piece));
    if (it != table.end()) symbols.push_back(it->second);
  }
  if (symbols.empty()) {
    if (byte_level_) {
      for (unsigned char b : piece) {
        int32_t id = byte_ids_[b] >= 0 ? byte_ids_[b] : unk_id_;
        if (id >= 0) symbols.push_back(id);
      }
    } else {
      size_t pos = 0;
      while (pos < piece.size()) {
        size_t start = pos;
        next_code_point(piece, pos);
        int32_t id = lookup_symbol(piece.substr(start, pos - start));
        if (id >= 0) symbols.push_back(id);
      }
    }
    merge_word(symbols);
  }
  ids.insert(ids.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    CacheEntry& entry = cache_[key];
    entry.word.assign(piece);
    entry.ids.assign(symbols.begin(), symbols.end());
  }
}

}  // namespace verlpp::model::tok
