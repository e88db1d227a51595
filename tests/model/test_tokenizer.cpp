// Tokenizer unit tests on the embedded tiny tokenizer (examples/tiny) and small tokenizer.json
// documents built here: hand-checked pieces and tokens, added/special token flags, decoding,
// streaming decode of split multi-byte characters, and load errors that name the field.
// Bit-exactness on real Qwen3 / Llama 3 tokenizers is the peer test's job (tokenizer_peer/).
#include <catch2/catch.hpp>

#include "../../src/core/model/tokenizer_internal.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/model/tokenizer.hpp>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>

#include "../error_of.hpp"

using verlpp::model::StreamDecoder;
using verlpp::model::Tokenizer;
namespace tok = verlpp::model::tok;

namespace {

using verlpp::test::error_of;

const std::string kTinyDir = std::string(VERLPP_SOURCE_DIR) + "/examples/tiny";

const Tokenizer& tiny() {
  static const Tokenizer t = Tokenizer::from_file(kTinyDir);
  return t;
}

std::vector<std::string> tokens_of(const Tokenizer& t, const std::string& text) {
  std::vector<std::string> out;
  for (verlpp::TokenId id : t.encode(text)) out.push_back(t.id_to_token(id).value_or("?"));
  return out;
}

std::vector<std::string> pieces(tok::PreTokenizer::Pattern p, const std::string& text) {
  tok::Pieces out;
  tok::split_by_pattern(p, text, out);
  return {out.begin(), out.end()};
}

// The tiny tokenizer.json with `edit` applied to its JSON.
Tokenizer tiny_edited(const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(kTinyDir + "/tokenizer.json");
  std::stringstream text;
  text << in.rdbuf();
  auto json = nlohmann::json::parse(text.str());
  edit(json);
  return Tokenizer::from_json_string(json.dump(), "edited.json");
}

nlohmann::json added(int id, const std::string& content, bool lstrip, bool rstrip, bool single_word, bool normalized) {
  return {{"id", id},         {"content", content}, {"single_word", single_word},
          {"lstrip", lstrip}, {"rstrip", rstrip},   {"normalized", normalized},
          {"special", false}};
}

}  // namespace

TEST_CASE("Qwen2 pre-tokenizer pattern splits as Oniguruma does", "[tokenizer]") {
  using P = tok::PreTokenizer::Pattern;
  // Contractions are case-insensitive; a letter run takes one leading non-letter.
  CHECK(pieces(P::kQwen2, "I'M don't") == std::vector<std::string>{"I", "'M", " don", "'t"});
  // Digits one by one; a space before a digit stands alone.
  CHECK(pieces(P::kQwen2, "x 123") == std::vector<std::string>{"x", " ", "1", "2", "3"});
  // Whitespace: up to the last newline of a run, then all but the last space, then the word.
  CHECK(pieces(P::kQwen2, "a \n\n  b") == std::vector<std::string>{"a", " \n\n", " ", " b"});
  CHECK(pieces(P::kQwen2, "a   ") == std::vector<std::string>{"a", "   "});
  // Punctuation keeps one leading space and trailing newlines.
  CHECK(pieces(P::kQwen2, "a += b;\n\nc") == std::vector<std::string>{"a", " +=", " b", ";\n\n", "c"});
  // Non-ASCII: \p{L} covers CJK, and U+3000 is whitespace.
  CHECK(pieces(P::kQwen2, "\xE4\xBD\xA0\xE5\xA5\xBD\xE3\x80\x80x") ==
        std::vector<std::string>{"\xE4\xBD\xA0\xE5\xA5\xBD", "\xE3\x80\x80x"});
  CHECK(pieces(P::kQwen2, "").empty());
}

TEST_CASE("Llama 3 and GPT-2 pre-tokenizer patterns", "[tokenizer]") {
  using P = tok::PreTokenizer::Pattern;
  CHECK(pieces(P::kLlama3, "1234567") == std::vector<std::string>{"123", "456", "7"});
  CHECK(pieces(P::kGpt2, "I'M 42x  y") == std::vector<std::string>{"I", "'", "M", " 42", "x", " ", " y"});
}

TEST_CASE("tiny tokenizer: vocabulary and hand-checked tokens", "[tokenizer]") {
  const Tokenizer& t = tiny();
  CHECK(t.vocab_size() == 354);
  REQUIRE(t.added_tokens().size() == 5);
  CHECK(t.token_to_id("<|im_start|>") == 350);
  CHECK(t.token_to_id("<|im_end|>") == 351);
  CHECK(t.is_special(350));
  CHECK_FALSE(t.is_special(*t.token_to_id("<think>")));
  // Bytes have the id of their value: 'A' = 65, ' ' = 32 (stored as "Ġ").
  CHECK(t.encode("A") == verlpp::TokenIds{65});
  CHECK(t.id_to_token(32) == "\xC4\xA0");
  CHECK(tokens_of(t, "What is 12 + 7?") ==
        std::vector<std::string>{"What", "\xC4\xA0is", "\xC4\xA0", "1", "2", "\xC4\xA0+", "\xC4\xA0", "7", "?"});
  CHECK(t.encode("").empty());
  // The word cache never changes results.
  auto warm = t.encode("What is 12 + 7? Answer: 19");
  t.clear_cache();
  CHECK(t.encode("What is 12 + 7? Answer: 19") == warm);
}

TEST_CASE("tiny tokenizer: special tokens inside text, decode and round trips", "[tokenizer]") {
  const Tokenizer& t = tiny();
  auto ids = t.encode("<|im_start|>user\nhi<|im_end|>");
  REQUIRE(ids.size() >= 4);
  CHECK(ids.front() == 350);
  CHECK(std::count(ids.begin(), ids.end(), 198) == 0);  // "\n" is byte 10, not GPT-2's 198
  CHECK(std::count(ids.begin(), ids.end(), 10) == 1);
  CHECK(ids.back() == 351);
  CHECK(t.decode(ids) == "<|im_start|>user\nhi<|im_end|>");
  CHECK(t.decode(ids, /*skip_special_tokens=*/true) == "user\nhi");
  // A partial special token is ordinary text.
  for (verlpp::TokenId id : t.encode("<|im_start")) CHECK(id < 349);
  for (std::string s : {"", " ", "e\xCC\x81 caf\xC3\xA9", "\xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
                        "\xE4\xBD\xA0\xE5\xA5\xBD\n\n\t x", "<think>a</think><|endoftext|>"})
    CHECK(t.decode(t.encode(s)) == s);
  // Unknown ids are skipped, as HF does.
  CHECK(t.decode({72, 100000, -1, 105}) == "Hi");
}

TEST_CASE("invalid UTF-8: encode rejects it, decode repairs it like from_utf8_lossy", "[tokenizer]") {
  const Tokenizer& t = tiny();
  CHECK_THAT(error_of([&] { t.encode("ab\xC3"); }), Catch::Contains("not valid UTF-8 at byte 2"));
  // 0xF0 0x9F then 'a': one U+FFFD for the broken prefix; a lone 0x80: one more.
  CHECK(t.decode({0xF0, 0x9F, 'a', 0x80}) ==
        "\xEF\xBF\xBD"
        "a"
        "\xEF\xBF\xBD");
}

TEST_CASE("streaming decode holds split multi-byte characters", "[tokenizer]") {
  const Tokenizer& t = tiny();
  StreamDecoder stream(t);
  // U+1F600 is F0 9F 98 80: four byte tokens in the tiny vocabulary.
  CHECK(stream.push(0xF0).empty());
  CHECK(stream.push(0x9F).empty());
  CHECK(stream.push(0x98).empty());
  CHECK(stream.pending_bytes() == 3);
  CHECK(stream.push(0x80) == "\xF0\x9F\x98\x80");
  CHECK(stream.push('x') == "x");
  // A sequence that cannot complete comes out as U+FFFD as soon as that is known.
  CHECK(stream.push(0xE4).empty());
  CHECK(stream.push('y') == "\xEF\xBF\xBDy");
  // finish() flushes an incomplete tail.
  CHECK(stream.push(0xE4).empty());
  CHECK(stream.finish() == "\xEF\xBF\xBD");
  CHECK(stream.pending_bytes() == 0);
  // Special tokens can be skipped.
  StreamDecoder skipping(t, /*skip_special_tokens=*/true);
  CHECK(skipping.push(350).empty());
  CHECK(skipping.push('a') == "a");

  // The concatenation equals decode() for every token sequence of a mixed text.
  std::string text = "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD <|im_end|> 12+3";
  auto ids = t.encode(text);
  StreamDecoder all(t);
  std::string joined;
  for (verlpp::TokenId id : ids) joined += all.push(id);
  joined += all.finish();
  CHECK(joined == t.decode(ids));
}

TEST_CASE("added token flags: lstrip, rstrip, single_word, normalized", "[tokenizer]") {
  Tokenizer t = tiny_edited([](nlohmann::json& j) {
    j["added_tokens"].push_back(added(400, "<L>", true, false, false, false));
    j["added_tokens"].push_back(added(401, "<R>", false, true, false, false));
    j["added_tokens"].push_back(added(402, "cat", false, false, true, false));
    j["added_tokens"].push_back(added(403, "hello", false, false, false, true));
    j["normalizer"] = {{"type", "Lowercase"}};
  });
  // lstrip swallows the spaces on the left, rstrip those on the right.
  CHECK(t.encode("a  <L>") == verlpp::TokenIds{'a', 400});
  CHECK(t.encode("<R>  b") == verlpp::TokenIds{401, 'b'});
  // single_word: only where no word character touches it.
  CHECK(t.encode("cat") == verlpp::TokenIds{402});
  CHECK(t.encode("a cat.") == verlpp::TokenIds{'a', 32, 402, '.'});
  for (verlpp::TokenId id : t.encode("concat")) CHECK(id != 402);
  // normalized: matched after the normalizer (Lowercase) ran.
  CHECK(t.encode("HeLLo") == verlpp::TokenIds{403});
  CHECK(t.vocab_size() == 404);
}

TEST_CASE("post-processor adds special tokens only when asked", "[tokenizer]") {
  Tokenizer t = tiny_edited([](nlohmann::json& j) {
    j["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [349], "tokens": ["<|endoftext|>"]}}})");
  });
  CHECK(t.encode("a") == verlpp::TokenIds{'a'});
  CHECK(t.encode("a", /*add_special_tokens=*/true) == verlpp::TokenIds{349, 'a'});
}

TEST_CASE("load errors name the file, the field and the value", "[tokenizer]") {
  CHECK_THAT(error_of([] { Tokenizer::from_file("/nonexistent/dir/tokenizer.json"); }),
             Catch::Contains("/nonexistent/dir/tokenizer.json") && Catch::Contains("does not exist"));
  CHECK_THAT(error_of([] { Tokenizer::from_json_string("{\"model\": ", "broken.json"); }),
             Catch::Contains("broken.json") && Catch::Contains("not valid JSON"));
  CHECK_THAT(error_of([] {
               Tokenizer::from_json_string("{\"model\": " + std::string(100000, '{') + std::string(100000, '}') + "}",
                                           "deep.json");
             }),
             Catch::Contains("deep.json") && Catch::Contains("JSON nested deeper than 512 levels (at byte 521)"));
  CHECK_THAT(error_of([] { Tokenizer::from_json_string("{}", "empty.json"); }),
             Catch::Contains("empty.json") && Catch::Contains("\"model\""));
  CHECK_THAT(error_of([] { tiny_edited([](nlohmann::json& j) { j["model"]["merges"][3] = "nospace"; }); }),
             Catch::Contains("model") && Catch::Contains("merges[3]") && Catch::Contains("nospace"));
  CHECK_THAT(error_of([] { tiny_edited([](nlohmann::json& j) {
                             j["model"]["merges"][5] = {"zz", "qq"};
                           }); }),
             Catch::Contains("merges[5]") && Catch::Contains("missing from the vocabulary"));
  CHECK_THAT(error_of([] { tiny_edited([](nlohmann::json& j) { j["model"]["vocab"]["A"] = "x"; }); }),
             Catch::Contains("model") && Catch::Contains("vocab[\"A\"]"));
  CHECK_THAT(
      error_of([] {
        tiny_edited([](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+"; });
      }),
      Catch::Contains("pretokenizers[0].pattern.Regex") && Catch::Contains("\\\\w+"));
  CHECK_THAT(error_of([] { tiny_edited([](nlohmann::json& j) {
                             j["normalizer"] = {{"type", "Precompiled"}};
                           }); }),
             Catch::Contains("normalizer") && Catch::Contains("Precompiled"));
  CHECK_THAT(error_of([] { tiny_edited([](nlohmann::json& j) { j["model"]["type"] = "WordPiece"; }); }),
             Catch::Contains("model") && Catch::Contains("WordPiece"));
  CHECK_THAT(error_of([] { tiny_edited([](nlohmann::json& j) { j["added_tokens"][0].erase("id"); }); }),
             Catch::Contains("added_tokens[0]"));
}
