// Pre-tokenizers: Split (the Qwen2/Qwen3, Llama 3 and GPT-2 regexes, or a literal string),
// ByteLevel and Sequence. The regexes are not compiled by a regex engine: each known pattern is
// recognised by its exact text and matched by a hand-written routine that follows Oniguruma's
// leftmost-first, backtracking semantics alternative by alternative (comments below show the
// alternative each block implements). An unknown pattern is an error naming it.
#include "tokenizer_internal.hpp"

#include <verlpp/core/error.hpp>

namespace verlpp::model::tok {
namespace {

constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Fills the scratch's code points, classes and byte offsets (n + 1 of them) for `text`.
void decode_into(std::string_view text, Scratch& d) {
  d.cps.clear();
  d.classes.clear();
  d.offsets.clear();
  size_t pos = 0;
  while (pos < text.size()) {
    d.offsets.push_back(uint32_t(pos));
    char32_t c = next_code_point(text, pos);
    d.cps.push_back(c);
    d.classes.push_back(char_class(c));
  }
  d.offsets.push_back(uint32_t(text.size()));
}
using Decoded = Scratch;

// Match end (in code points) of the pattern at position i, or i when nothing matches there.
size_t match_at(PreTokenizer::Pattern pattern, const Decoded& d, size_t i) {
  const size_t n = d.cps.size();
  auto has = [&](size_t k, uint8_t cls) { return k < n && (d.classes[k] & cls); };
  auto other = [&](size_t k) { return k < n && !(d.classes[k] & (kSpace | kLetter | kNumber)); };
  const char32_t c = d.cps[i];
  const bool gpt2 = pattern == PreTokenizer::Pattern::kGpt2;

  // Contractions: (?i:'s|'t|'re|'ve|'m|'ll|'d) — case-sensitive for GPT-2.
  if (c == '\'' && i + 1 < n) {
    char32_t c1 = gpt2 ? d.cps[i + 1] : fold_to_ascii(d.cps[i + 1]);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
    if (i + 2 < n) {
      char32_t c2 = gpt2 ? d.cps[i + 2] : fold_to_ascii(d.cps[i + 2]);
      if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return i + 3;
    }
  }
  if (gpt2) {
    // ' ?\p{L}+' | ' ?\p{N}+' | ' ?[^\s\p{L}\p{N}]+'
    size_t j = (c == ' ' && i + 1 < n) ? i + 1 : i;
    for (uint8_t cls : {uint8_t(kLetter), uint8_t(kNumber)}) {
      size_t k = has(j, cls) ? j : has(i, cls) ? i : n + 1;
      if (k <= n) {
        while (has(k, cls)) ++k;
        return k;
      }
    }
    size_t k = other(j) ? j : other(i) ? i : n + 1;
    if (k <= n) {
      while (other(k)) ++k;
      return k;
    }
  } else {
    // [^\r\n\p{L}\p{N}]?\p{L}+
    size_t j = i;
    if (!has(i, kNewline | kLetter | kNumber) && has(i + 1, kLetter)) j = i + 1;
    if (has(j, kLetter)) {
      while (has(j, kLetter)) ++j;
      return j;
    }
    // \p{N} (Qwen2/Qwen3) or \p{N}{1,3} (Llama 3)
    if (has(i, kNumber)) {
      size_t limit = pattern == PreTokenizer::Pattern::kLlama3 ? i + 3 : i + 1;
      j = i;
      while (j < limit && has(j, kNumber)) ++j;
      return j;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    j = (c == ' ' && other(i + 1)) ? i + 1 : i;
    if (other(j)) {
      while (other(j)) ++j;
      while (has(j, kNewline)) ++j;
      return j;
    }
  }
  if (!has(i, kSpace)) return i;
  size_t end = i;  // the whitespace run [i, end)
  while (has(end, kSpace)) ++end;
  if (!gpt2) {
    // \s*[\r\n]+ : backtracking \s* stops at the last \r or \n of the run.
    for (size_t k = end; k > i; --k)
      if (d.classes[k - 1] & kNewline) return k;
  }
  // \s+(?!\S) : the whole run at the end of the text, else the run less its last character.
  if (end == n) return end;
  if (end - 1 > i) return end - 1;
  // \s+
  return end;
}

PreTokenizer::Pattern pattern_from_regex(const std::string& regex, const std::string& where) {
  if (regex == kQwen2Regex) return PreTokenizer::Pattern::kQwen2;
  if (regex == kLlama3Regex) return PreTokenizer::Pattern::kLlama3;
  if (regex == kGpt2Regex) return PreTokenizer::Pattern::kGpt2;
  VERLPP_FAIL_AT(where,
                 "unsupported Split regex {} (supported: the Qwen2/Qwen3, Llama 3 and GPT-2 "
                 "pre-tokenizer patterns, or a literal {{\"String\": ...}})",
                 nlohmann::json(regex).dump());
}

// Appends the pieces of `text` split by `step` (a Split step).
void apply_split(const PreTokenizer::Step& step, std::string_view text, Pieces& out, Scratch& scratch) {
  // Segments covering the text: (begin, end, is_match), in byte offsets.
  auto& segments = scratch.segments;
  segments.clear();
  if (step.pattern == PreTokenizer::Pattern::kLiteral) {
    size_t pos = 0;
    for (size_t hit; !step.literal.empty() && (hit = text.find(step.literal, pos)) != std::string_view::npos;
         pos = hit + step.literal.size()) {
      if (hit > pos) segments.emplace_back(pos, hit, false);
      segments.emplace_back(hit, hit + step.literal.size(), true);
    }
    if (pos < text.size()) segments.emplace_back(pos, text.size(), false);
  } else {
    Decoded& d = scratch;
    decode_into(text, d);
    const size_t n = d.cps.size();
    size_t gap = 0, i = 0;
    while (i < n) {
      size_t end = match_at(step.pattern, d, i);
      if (end == i) {
        ++i;
        continue;
      }
      if (gap < i) segments.emplace_back(d.offsets[gap], d.offsets[i], false);
      segments.emplace_back(d.offsets[i], d.offsets[end], true);
      i = gap = end;
    }
    if (gap < n) segments.emplace_back(d.offsets[gap], d.offsets[n], false);
  }
  for (const auto& [begin, end, is_match] : segments) {
    bool matched = is_match != step.invert;
    if (step.remove_matches && matched) continue;
    out.push_back(text.substr(begin, end - begin));
  }
}

void parse_into(const nlohmann::json& node, const std::string& where, std::vector<PreTokenizer::Step>& steps) {
  if (node.is_null()) return;
  VERLPP_CHECK(node.is_object() && node.contains("type") && node["type"].is_string(),
               "{}: expected an object with a string \"type\", got {}", where, node.dump().substr(0, 200));
  const std::string type = node["type"].get<std::string>();
  using S = PreTokenizer::Step;
  if (type == "Sequence") {
    VERLPP_CHECK(node.contains("pretokenizers") && node["pretokenizers"].is_array(),
                 "{}.pretokenizers: expected an array", where);
    for (size_t i = 0; i < node["pretokenizers"].size(); ++i)
      parse_into(node["pretokenizers"][i], fmt::format("{}.pretokenizers[{}]", where, i), steps);
  } else if (type == "Split") {
    S step(S::kSplit);
    const auto& pattern = node.contains("pattern") ? node["pattern"] : nlohmann::json();
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      step.pattern = pattern_from_regex(pattern["Regex"].get<std::string>(), where + ".pattern.Regex");
    } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
      step.pattern = PreTokenizer::Pattern::kLiteral;
      step.literal = pattern["String"].get<std::string>();
    } else {
      VERLPP_FAIL_AT(where + ".pattern", "expected {{\"Regex\": ...}} or {{\"String\": ...}}, got {}",
                     pattern.dump().substr(0, 200));
    }
    std::string behavior = node.value("behavior", std::string("Isolated"));
    VERLPP_CHECK(behavior == "Isolated" || behavior == "Removed",
                 "{}.behavior: unsupported Split behavior \"{}\" (supported: Isolated, Removed)", where, behavior);
    step.remove_matches = behavior == "Removed";
    step.invert = node.value("invert", false);
    steps.push_back(step);
  } else if (type == "ByteLevel") {
    if (node.value("use_regex", true)) {
      S split(S::kSplit);
      split.pattern = PreTokenizer::Pattern::kGpt2;
      S byte_level(S::kByteLevel);
      byte_level.add_prefix_space = node.value("add_prefix_space", true);
      // HF adds the prefix space before its own regex split.
      steps.push_back(byte_level);
      steps.push_back(split);
      steps.back().add_prefix_space = false;
    } else {
      S step(S::kByteLevel);
      step.add_prefix_space = node.value("add_prefix_space", true);
      steps.push_back(step);
    }
  } else {
    VERLPP_FAIL_AT(where, "unsupported pre_tokenizer type \"{}\" (supported: Sequence, Split, ByteLevel)", type);
  }
}

}  // namespace

void split_by_pattern(PreTokenizer::Pattern pattern, std::string_view text, Pieces& out) {
  PreTokenizer::Step step(PreTokenizer::Step::kSplit);
  step.pattern = pattern;
  Scratch scratch;
  apply_split(step, text, out, scratch);
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& node, const std::string& where) {
  PreTokenizer p;
  parse_into(node, where, p.steps_);
  for (const Step& s : p.steps_) p.byte_level_ = p.byte_level_ || s.kind == Step::kByteLevel;
  return p;
}

void PreTokenizer::split(std::string_view text, Pieces& out, Scratch& scratch) const {
  const size_t first = out.size();
  out.push_back(text);
  Pieces& next = scratch.next;
  for (const Step& step : steps_) {
    if (step.kind == Step::kByteLevel && !step.add_prefix_space) continue;  // mapping happens in BPE
    next.clear();
    for (size_t k = first; k < out.size(); ++k) {
      std::string_view piece = out[k];
      if (step.kind == Step::kByteLevel) {
        if (piece.empty() || piece.front() == ' ') {
          next.push_back(piece);
        } else {
          scratch.storage.push_back(" " + std::string(piece));
          next.push_back(scratch.storage.back());
        }
      } else {
        apply_split(step, piece, next, scratch);
      }
    }
    out.resize(first);
    out.insert(out.end(), next.begin(), next.end());
  }
}

}  // namespace verlpp::model::tok
