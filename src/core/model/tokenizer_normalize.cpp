// Normalizers from tokenizer.json: NFC/NFD/NFKC/NFKD (ICU), Lowercase, Strip, Replace with a
// literal pattern, Prepend and Sequence. Qwen2/Qwen3 use NFC; Llama 3 none. Text that is
// already normalized (always so for ASCII) is left untouched without a copy.
#include "tokenizer_internal.hpp"

#include <verlpp/core/error.hpp>

#include <unicode/bytestream.h>
#include <unicode/casemap.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

namespace verlpp::model::tok {
namespace {

bool is_ascii(std::string_view text) {
  for (char c : text)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

const icu::Normalizer2* icu_normalizer(Normalizer::Step::Kind kind) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (kind) {
    case Normalizer::Step::kNfc:
      n = icu::Normalizer2::getNFCInstance(status);
      break;
    case Normalizer::Step::kNfd:
      n = icu::Normalizer2::getNFDInstance(status);
      break;
    case Normalizer::Step::kNfkc:
      n = icu::Normalizer2::getNFKCInstance(status);
      break;
    default:
      n = icu::Normalizer2::getNFKDInstance(status);
      break;
  }
  VERLPP_CHECK(U_SUCCESS(status) && n, "ICU normalizer unavailable: {}", u_errorName(status));
  return n;
}

void unicode_normalize(Normalizer::Step::Kind kind, std::string& text) {
  if (is_ascii(text)) return;
  const icu::Normalizer2* n = icu_normalizer(kind);
  UErrorCode status = U_ZERO_ERROR;
  if (n->isNormalizedUTF8(icu::StringPiece(text.data(), int32_t(text.size())), status) && U_SUCCESS(status)) return;
  status = U_ZERO_ERROR;
  std::string out;
  out.reserve(text.size() + 8);
  icu::StringByteSink<std::string> sink(&out);
  n->normalizeUTF8(0, icu::StringPiece(text.data(), int32_t(text.size())), sink, nullptr, status);
  VERLPP_CHECK(U_SUCCESS(status), "ICU normalization failed: {}", u_errorName(status));
  text.swap(out);
}

void lowercase(std::string& text) {
  bool ascii = is_ascii(text);
  if (ascii) {
    for (char& c : text)
      if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    return;
  }
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  UErrorCode status = U_ZERO_ERROR;
  icu::CaseMap::utf8ToLower("", 0, icu::StringPiece(text.data(), int32_t(text.size())), sink, nullptr, status);
  VERLPP_CHECK(U_SUCCESS(status), "ICU lowercase failed: {}", u_errorName(status));
  text.swap(out);
}

void strip(std::string& text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  if (left) {
    while (begin < end) {
      size_t pos = begin;
      if (!(char_class(next_code_point(text, pos)) & kSpace)) break;
      begin = pos;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      size_t pos = start;
      if (!(char_class(next_code_point(text, pos)) & kSpace)) break;
      end = start;
    }
  }
  text = text.substr(begin, end - begin);
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  if (from.empty() || text.find(from) == std::string::npos) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(text, pos, hit - pos);
    out += to;
  }
  out.append(text, pos, std::string::npos);
  text.swap(out);
}

void parse_into(const nlohmann::json& node, const std::string& where, std::vector<Normalizer::Step>& steps) {
  if (node.is_null()) return;
  VERLPP_CHECK(node.is_object() && node.contains("type") && node["type"].is_string(),
               "{}: expected an object with a string \"type\", got {}", where, node.dump().substr(0, 200));
  const std::string type = node["type"].get<std::string>();
  using S = Normalizer::Step;
  if (type == "Sequence") {
    VERLPP_CHECK(node.contains("normalizers") && node["normalizers"].is_array(), "{}.normalizers: expected an array",
                 where);
    for (size_t i = 0; i < node["normalizers"].size(); ++i)
      parse_into(node["normalizers"][i], fmt::format("{}.normalizers[{}]", where, i), steps);
  } else if (type == "NFC") {
    steps.emplace_back(S::kNfc);
  } else if (type == "NFD") {
    steps.emplace_back(S::kNfd);
  } else if (type == "NFKC") {
    steps.emplace_back(S::kNfkc);
  } else if (type == "NFKD") {
    steps.emplace_back(S::kNfkd);
  } else if (type == "Lowercase") {
    steps.emplace_back(S::kLowercase);
  } else if (type == "Strip") {
    S step(S::kStrip);
    step.left = node.value("strip_left", true);
    step.right = node.value("strip_right", true);
    steps.push_back(step);
  } else if (type == "Replace") {
    const auto& pattern = node.contains("pattern") ? node["pattern"] : nlohmann::json();
    VERLPP_CHECK(pattern.is_object() && pattern.contains("String") && pattern["String"].is_string(),
                 "{}.pattern: only a literal {{\"String\": ...}} pattern is supported, got {}", where,
                 pattern.dump().substr(0, 200));
    VERLPP_CHECK(node.contains("content") && node["content"].is_string(), "{}.content: expected a string", where);
    S step(S::kReplace);
    step.from = pattern["String"].get<std::string>();
    step.to = node["content"].get<std::string>();
    steps.push_back(step);
  } else if (type == "Prepend") {
    VERLPP_CHECK(node.contains("prepend") && node["prepend"].is_string(), "{}.prepend: expected a string", where);
    S step(S::kPrepend);
    step.to = node["prepend"].get<std::string>();
    steps.push_back(step);
  } else {
    VERLPP_FAIL_AT(where,
                   "unsupported normalizer type \"{}\" (supported: Sequence, NFC, NFD, NFKC, NFKD, "
                   "Lowercase, Strip, Replace, Prepend)",
                   type);
  }
}

}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& node, const std::string& where) {
  Normalizer n;
  parse_into(node, where, n.steps_);
  return n;
}

void Normalizer::apply(std::string& text) const {
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::kNfc:
      case Step::kNfd:
      case Step::kNfkc:
      case Step::kNfkd:
        unicode_normalize(step.kind, text);
        break;
      case Step::kLowercase:
        lowercase(text);
        break;
      case Step::kStrip:
        strip(text, step.left, step.right);
        break;
      case Step::kReplace:
        replace_all(text, step.from, step.to);
        break;
      case Step::kPrepend:
        if (!text.empty()) text.insert(0, step.to);
        break;
    }
  }
}

}  // namespace verlpp::model::tok
