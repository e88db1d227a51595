// The reward model's re-encoded input (verl's _switch_chat_template) against the texts built by
// hand: a reward model with another vocabulary (the tiny tokenizer's ids permuted) and another
// chat template (Qwen2.5's default system prompt) sees exactly its own encoding of the prompt and
// the decoded response without EOS; max_length cuts from the right; a vocabulary that cannot
// encode the text is refused naming the row.
#include <verlpp/reward/reward_model_input.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/data/rl_batch.hpp>

#include <nlohmann/json.hpp>

#include <ATen/ops/from_blob.h>

#include <fstream>
#include <sstream>

// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;
using json = nlohmann::json;

namespace {

json tiny_tokenizer_json() {
  std::ifstream in(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/tokenizer.json");
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

// The tiny tokenizer with every vocabulary id mirrored (id -> V - 1 - id): the same texts, other ids.
model::Tokenizer permuted_tokenizer() {
  json t = tiny_tokenizer_json();
  json& vocab = t["model"]["vocab"];
  const int64_t v = int64_t(vocab.size());
  for (auto& [token, id] : vocab.items()) id = v - 1 - id.get<int64_t>();
  return model::Tokenizer::from_json_string(t.dump(), "permuted tokenizer");
}

// The tiny tokenizer without the digit `digit` (and the merges that use it).
model::Tokenizer tokenizer_without(const std::string& digit) {
  json t = tiny_tokenizer_json();
  json& vocab = t["model"]["vocab"];
  const int64_t removed = vocab[digit].get<int64_t>();
  vocab.erase(digit);
  for (auto& [token, id] : vocab.items())
    if (id.get<int64_t>() > removed) id = id.get<int64_t>() - 1;
  json merges = json::array();
  for (const json& m : t["model"]["merges"])
    if (m[0] != digit && m[1] != digit) merges.push_back(m);
  t["model"]["merges"] = merges;
  for (json& added : t["added_tokens"]) added["id"] = added["id"].get<int64_t>() - 1;
  return model::Tokenizer::from_json_string(t.dump(), "tokenizer without " + digit);
}

// A batch of responses as the rollout returns them: right-padded ids, their mask and attention.
data::Batch response_batch(const std::vector<TokenIds>& responses, int64_t width, TokenId pad) {
  const int64_t rows = int64_t(responses.size());
  std::vector<int64_t> ids(size_t(rows * width), pad);
  std::vector<float> mask(size_t(rows * width), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (size_t k = 0; k < responses[size_t(r)].size(); ++k) {
      ids[size_t(r * width) + k] = responses[size_t(r)][k];
      mask[size_t(r * width) + k] = 1.0f;
    }
  data::Batch b;
  b.set(data::fields::kResponses,
        at::from_blob(ids.data(), {rows, width}, at::TensorOptions().dtype(at::kLong)).clone());
  b.set(data::fields::kResponseMask,
        at::from_blob(mask.data(), {rows, width}, at::TensorOptions().dtype(at::kFloat)).clone());
  b.set(data::fields::kInputIds, b.tensor(data::fields::kResponses));
  b.set(data::fields::kAttentionMask, b.tensor(data::fields::kResponseMask));  // no prompt columns here
  return b;
}

TokenIds row_ids(const data::Batch& b, int64_t row) {
  const at::Tensor ids = b.tensor(data::fields::kInputIds)[row].contiguous();
  const at::Tensor mask = b.tensor(data::fields::kAttentionMask)[row].contiguous();
  TokenIds out;
  for (int64_t k = 0; k < ids.numel(); ++k)
    if (mask[k].item<int64_t>() == 1) out.push_back(ids[k].item<int64_t>());
  return out;
}

}  // namespace

TEST_CASE("reward model input: another vocabulary and template see their own encoding of the text", "[reward_model]") {
  const model::Tokenizer policy = model::Tokenizer::from_file(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny");
  const model::Tokenizer rm_tokenizer = permuted_tokenizer();
  const model::ChatTemplate rm_chat = model::ChatTemplate::builtin("qwen2.5");
  const TokenId eos = *policy.token_to_id("<|im_end|>");
  const std::vector<std::string> texts = {"57", "1 2 3", "<think>9</think>8"};
  const std::vector<std::vector<model::ChatMessage>> prompts = {
      {{"user", "37+20="}}, {{"system", "count"}, {"user", "one two three"}}, {{"user", "4+4="}}};
  std::vector<TokenIds> responses;
  for (size_t i = 0; i < texts.size(); ++i) {
    TokenIds ids = policy.encode(texts[i]);
    if (i != 1) ids.push_back(eos);  // row 1 ran out of length: no EOS
    responses.push_back(ids);
  }
  const data::Batch batch = response_batch(responses, 12, 0);
  reward::RewardModelText rm;
  rm.tokenizer = &rm_tokenizer;
  rm.chat = &rm_chat;
  rm.pad_token_id = 7;
  rm.vocab_size = rm_tokenizer.vocab_size();
  const data::Batch out = reward::reencode_for_reward_model(batch, prompts, policy, "<|im_end|>", rm, 1000);
  size_t longest = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    // The text by hand: the prompt's turns, then the response as the assistant's turn.
    std::string expected_text;
    if (prompts[i][0].role != "system")
      expected_text += "<|im_start|>system\n" + rm_chat.default_system_prompt() + "<|im_end|>\n";
    for (const auto& m : prompts[i]) expected_text += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    expected_text += "<|im_start|>assistant\n" + texts[i] + "<|im_end|>\n";
    const TokenIds expected = rm_tokenizer.encode(expected_text);
    INFO("row " << i << ": " << expected_text);
    CHECK(row_ids(out, int64_t(i)) == expected);
    CHECK(expected != policy.encode(expected_text));  // the vocabularies really differ
    longest = std::max(longest, expected.size());
  }
  CHECK(out.tensor(data::fields::kInputIds).size(1) == int64_t(longest));
  // Padding: the reward model's id, right of each row; positions count the row's tokens.
  const at::Tensor mask = out.tensor(data::fields::kAttentionMask);
  CHECK(out.tensor(data::fields::kPositionIds).equal(mask.cumsum(1).sub(1).clamp_min(0)));
  for (int64_t r = 0; r < mask.size(0); ++r)
    for (int64_t k = 0; k < mask.size(1); ++k)
      if (mask[r][k].item<int64_t>() == 0) CHECK(out.tensor(data::fields::kInputIds)[r][k].item<int64_t>() == 7);

  // max_length cuts each row from the right (verl's truncation "right").
  const data::Batch cut = reward::reencode_for_reward_model(batch, prompts, policy, "<|im_end|>", rm, 9);
  CHECK(cut.tensor(data::fields::kInputIds).size(1) == 9);
  for (int64_t r = 0; r < 3; ++r) {
    const TokenIds full = row_ids(out, r);
    CHECK(row_ids(cut, r) == TokenIds(full.begin(), full.begin() + 9));
  }
}

TEST_CASE("reward model input: a vocabulary that cannot encode the text is refused, naming the row", "[reward_model]") {
  const model::Tokenizer policy = model::Tokenizer::from_file(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny");
  const model::Tokenizer no_seven = tokenizer_without("7");
  const model::ChatTemplate chat = model::ChatTemplate::builtin("chatml");
  const data::Batch batch = response_batch({policy.encode("12"), policy.encode("17")}, 4, 0);
  reward::RewardModelText rm;
  rm.tokenizer = &no_seven;
  rm.chat = &chat;
  rm.vocab_size = no_seven.vocab_size();
  rm.where = "reward_model.model.path (/rm)";
  const std::vector<std::vector<model::ChatMessage>> prompts = {{{"user", "6+6="}}, {{"user", "9+8="}}};
  try {
    reward::reencode_for_reward_model(batch, prompts, policy, "", rm, 100);
    FAIL("no error");
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("reward_model.model.path (/rm)") && Catch::Contains("row 1") &&
                            Catch::Contains("cannot encode") && Catch::Contains("17"));
  }
  // A vocabulary smaller than the tokenizer's ids.
  rm.tokenizer = &policy;
  rm.vocab_size = 10;
  CHECK_THROWS_WITH(reward::reencode_for_reward_model(batch, prompts, policy, "", rm, 100),
                    Catch::Contains("row 0") && Catch::Contains("outside the model's vocabulary of 10"));
}
