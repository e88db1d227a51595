// Prompt datasets (verl's JSONL schema) with the embedded tiny tokenizer: parsing and its
// errors (file:line), truncation modes against slicing the full ids, filtering, the resumable
// loader, and left-padded collation against a plain loop.
#include <verlpp/controller/dataset.hpp>
#include <verlpp/core/log.hpp>
#include <verlpp/core/error.hpp>

#include <cstdio>
#include <fstream>
#include <set>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;
using namespace verlpp::controller;
using Catch::Contains;

namespace {

const model::Tokenizer& tiny_tokenizer() {
  static const model::Tokenizer t =
      model::Tokenizer::from_file(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/tokenizer.json");
  return t;
}
const model::ChatTemplate& tiny_chat() {
  static const model::ChatTemplate c =
      model::ChatTemplate::from_config_file(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny");
  return c;
}

std::string write_jsonl(const std::string& name, const std::vector<std::string>& lines) {
  std::string path = "/tmp/verlpp-dataset-test-" + name + ".jsonl";
  std::ofstream out(path);
  for (const auto& l : lines) out << l << "\n";
  return path;
}

std::string row(const std::string& question, const std::string& answer) {
  return R"({"data_source": "arith", "prompt": [{"role": "user", "content": ")" + question +
         R"("}], "reward_model": {"style": "rule", "ground_truth": ")" + answer +
         R"("}, "extra_info": {"split": "train"}})";
}

verlpp::TokenIds full_ids(const std::string& question) {
  return tiny_tokenizer().encode(tiny_chat().render({{"user", question}}, {}));
}

}  // namespace

TEST_CASE("dataset: verl rows load with their fields", "[dataset]") {
  std::string path = write_jsonl(
      "ok", {row("1+2", "3"), "", row("10+20", "30"), R"({"data_source": "gsm8k", "prompt": "plain text"})"});
  DatasetOptions o;
  PromptDataset d = PromptDataset::load({path}, tiny_tokenizer(), tiny_chat(), o);
  REQUIRE(d.size() == 3);
  CHECK(d[0].data_source == "arith");
  CHECK(d[0].ground_truth == "3");
  CHECK(d[0].extra_info["split"] == "train");
  CHECK(d[0].origin == path + ":1");
  CHECK(d[1].origin == path + ":3");  // the blank line is skipped but counted
  CHECK(d[0].prompt_ids == full_ids("1+2"));
  CHECK(d[2].prompt.size() == 1);
  CHECK(d[2].prompt[0].role == "user");
  CHECK(d[2].ground_truth.is_null());
  CHECK(d.data_sources() == std::vector<std::string>{"arith", "gsm8k"});
  std::remove(path.c_str());
}

TEST_CASE("dataset: malformed rows name the file and line", "[dataset]") {
  DatasetOptions o;
  auto fails = [&](const std::vector<std::string>& lines, const std::string& expected) {
    std::string path = write_jsonl("bad", lines);
    CHECK_THROWS_WITH(PromptDataset::load({path}, tiny_tokenizer(), tiny_chat(), o),
                      Contains(path + ":2") && Contains(expected));
    std::remove(path.c_str());
  };
  fails({row("1+1", "2"), "{not json"}, "not valid JSON");
  // Nested 10^5 deep (the parser would overflow the stack): refused before parsing.
  fails({row("1+1", "2"), "{\"prompt\": " + std::string(100000, '[') + std::string(100000, ']') + "}"},
        "JSON nested deeper than 512 levels (at byte 522)");
  fails({row("1+1", "2"), R"({"data_source": "arith"})"}, "no 'prompt'");
  fails({row("1+1", "2"), R"({"prompt": "x"})"}, "no string 'data_source'");
  fails({row("1+1", "2"), R"({"data_source": "a", "prompt": [{"role": "user"}]})"}, "'prompt[0]' must be");
  fails({row("1+1", "2"), R"({"data_source": "a", "prompt": []})"}, "non-empty list");
  CHECK_THROWS_WITH(PromptDataset::load({"/nonexistent.jsonl"}, tiny_tokenizer(), tiny_chat(), o),
                    Contains("/nonexistent.jsonl: cannot read the data file: No such file or directory"));
  CHECK_THROWS_WITH(PromptDataset::load({"/tmp"}, tiny_tokenizer(), tiny_chat(), o),
                    Contains("/tmp: the data file is a directory, not a file"));
}

TEST_CASE("dataset: rows without reward_model.ground_truth are loaded with a warning naming the first", "[dataset]") {
  std::vector<std::string> warnings;
  verlpp::set_log_sink([&](verlpp::LogLevel level, const std::string& line) {
    if (level == verlpp::LogLevel::warning) warnings.push_back(line);
  });
  const std::string path =
      write_jsonl("no_truth", {row("1+1", "2"), R"({"data_source": "arith", "prompt": "2+2"})",
                               R"({"data_source": "arith", "prompt": "3+3", "reward_model": {"style": "rule"}})"});
  PromptDataset d = PromptDataset::load({path}, tiny_tokenizer(), tiny_chat(), DatasetOptions{});
  PromptDataset complete =
      PromptDataset::load({write_jsonl("truth", {row("1+1", "2")})}, tiny_tokenizer(), tiny_chat(), DatasetOptions{});
  verlpp::set_log_sink(nullptr);
  CHECK(d.size() == 3);
  REQUIRE(warnings.size() == 1);  // the complete file warned about nothing
  CHECK_THAT(warnings[0], Contains("2 of 3 rows have no reward_model.ground_truth") && Contains(path + ":2"));
  std::remove(path.c_str());
}

TEST_CASE("dataset: overlong prompts are truncated, filtered or refused", "[dataset]") {
  const std::string q = "123456789+987654321";
  const auto full = full_ids(q);
  const int64_t max_len = int64_t(full.size()) - 5;
  std::string path = write_jsonl("long", {row(q, "1"), row("1+1", "2")});
  DatasetOptions o;
  o.max_prompt_length = max_len;
  CHECK_THROWS_WITH(PromptDataset::load({path}, tiny_tokenizer(), tiny_chat(), o),
                    Contains(path + ":1") && Contains(std::to_string(full.size()) + " tokens"));
  o.truncation = "left";
  CHECK(PromptDataset::load({path}, tiny_tokenizer(), tiny_chat(), o)[0].prompt_ids ==
        verlpp::TokenIds(full.end() - max_len, full.end()));
  o.truncation = "right";
  CHECK(PromptDataset::load({path}, tiny_tokenizer(), tiny_chat(), o)[0].prompt_ids ==
        verlpp::TokenIds(full.begin(), full.begin() + max_len));
  o.truncation = "middle";
  verlpp::TokenIds middle(full.begin(), full.begin() + max_len / 2);
  middle.insert(middle.end(), full.end() - (max_len - max_len / 2), full.end());
  CHECK(PromptDataset::load({path}, tiny_tokenizer(), tiny_chat(), o)[0].prompt_ids == middle);
  o.filter_overlong_prompts = true;
  PromptDataset filtered = PromptDataset::load({path}, tiny_tokenizer(), tiny_chat(), o);
  CHECK(filtered.size() == 1);
  CHECK(filtered.filtered() == 1);
  o.max_prompt_length = 2;
  CHECK_THROWS_WITH(PromptDataset::load({path}, tiny_tokenizer(), tiny_chat(), o), Contains("every prompt (2)"));
  o.truncation = "sideways";
  CHECK_THROWS_WITH(PromptDataset::load({path}, tiny_tokenizer(), tiny_chat(), o), Contains("'sideways'"));
  std::remove(path.c_str());
}

TEST_CASE("dataloader: permutations per epoch, drop_last, and exact resumption", "[dataset]") {
  DataLoader loader(10, 3, true, 42);
  CHECK(loader.batches_per_epoch() == 3);
  std::set<size_t> seen;
  std::vector<size_t> first_epoch;
  for (int k = 0; k < 3; ++k)
    for (size_t i : loader.next()) {
      CHECK(seen.insert(i).second);  // no index twice within an epoch
      first_epoch.push_back(i);
    }
  CHECK(seen.size() == 9);  // drop_last: one of the 10 rows sits this epoch out
  std::vector<size_t> second_epoch;
  for (int k = 0; k < 3; ++k)
    for (size_t i : loader.next()) second_epoch.push_back(i);
  CHECK(loader.epoch() == 1);
  CHECK(second_epoch != first_epoch);
  // Same seed, same sequence; a restored loader continues exactly.
  DataLoader a(10, 3, true, 7), b(10, 3, true, 7);
  for (int k = 0; k < 4; ++k) CHECK(a.next() == b.next());
  nlohmann::json saved = a.state();
  DataLoader resumed(10, 3, true, 7);
  resumed.load_state(saved);
  for (int k = 0; k < 5; ++k) CHECK(resumed.next() == a.next());
  DataLoader other_seed(10, 3, true, 8);
  CHECK_THROWS_WITH(other_seed.load_state(saved), Contains("seed=8"));
  DataLoader ordered(5, 2, false, 0, false);
  CHECK(ordered.next() == std::vector<size_t>{0, 1});
  CHECK(ordered.next() == std::vector<size_t>{2, 3});
  CHECK(ordered.next() == std::vector<size_t>{4});
  CHECK_THROWS_WITH(DataLoader(2, 3, true, 0), Contains("fewer than one batch of 3"));
}

TEST_CASE("collate: left padding, mask and positions", "[dataset]") {
  std::string path = write_jsonl("collate", {row("1+2", "3"), row("100+200", "300")});
  PromptDataset d = PromptDataset::load({path}, tiny_tokenizer(), tiny_chat(), DatasetOptions{});
  Batch b = collate_prompts(d, {1, 0}, -7, "s0-");
  const auto& a = d[1].prompt_ids;
  const auto& c = d[0].prompt_ids;
  const int64_t t = int64_t(std::max(a.size(), c.size()));
  REQUIRE(b.tensor("input_ids").sizes() == std::vector<int64_t>{2, t});
  for (int r = 0; r < 2; ++r) {
    const auto& ids = r == 0 ? a : c;
    int64_t pad = t - int64_t(ids.size());
    for (int64_t k = 0; k < t; ++k) {
      bool real = k >= pad;
      CHECK(b.tensor("input_ids")[r][k].item<int64_t>() == (real ? ids[size_t(k - pad)] : -7));
      CHECK(b.tensor("attention_mask")[r][k].item<int64_t>() == (real ? 1 : 0));
      CHECK(b.tensor("position_ids")[r][k].item<int64_t>() == (real ? k - pad : 0));
    }
  }
  CHECK(b.column("ground_truth")[0] == "300");
  CHECK(b.column("index")[1] == 0);
  CHECK(b.column("uid")[0] != b.column("uid")[1]);
  std::remove(path.c_str());
}

TEST_CASE("dataset: SFT conversation rows train on the assistant turns only", "[dataset]") {
  // A hermes template of our own: assistant tool_calls as <tool_call> blocks, tool replies as
  // user turns of <tool_response>.
  const model::ChatTemplate chat = model::ChatTemplate::from_jinja(
      "{% for m in messages %}{% if m.role == 'tool' %}"
      "{{ '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' }}"
      "{% else %}{{ '<|im_start|>' + m.role + '\\n' + (m.content or '') }}"
      "{% for c in m.tool_calls | default([]) %}"
      "{{ '<tool_call>\\n' + {'name': c.function.name, 'arguments': c.function.arguments} | tojson + '\\n</tool_call>' "
      "}}"
      "{% endfor %}{{ '<|im_end|>\\n' }}{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
      std::string(VERLPP_SOURCE_DIR) + "/examples/tiny", "test template");
  const nlohmann::json conversation = nlohmann::json::parse(R"({"messages": [
      {"role": "user", "content": "6*7?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":
        {"name": "calc", "arguments": {"expression": "6*7"}}}]},
      {"role": "tool", "content": "42"}, {"role": "assistant", "content": "42"}]})");
  const std::string path = write_jsonl(
      "conversation", {conversation.dump(), R"({"prompt": [{"role": "user", "content": "1+1"}], "response": "2"})"});
  DatasetOptions o;
  o.response_key = "response";
  o.messages_key = "messages";
  const TokenId eos = *tiny_tokenizer().token_to_id("<|im_end|>");
  o.response_suffix_ids = {eos};
  PromptDataset d = PromptDataset::load({path}, tiny_tokenizer(), chat, o);
  REQUIRE(d.size() == 2);
  // The prompt: the messages before the first assistant one, with the generation prompt.
  CHECK(d[0].prompt_ids == tiny_tokenizer().encode("<|im_start|>user\n6*7?<|im_end|>\n<|im_start|>assistant\n"));
  // The response, from the literal text the template writes, turn by turn.
  TokenIds want;
  std::vector<uint8_t> mask;
  auto add = [&](const std::string& text, uint8_t trained) {
    const TokenIds ids = tiny_tokenizer().encode(text);
    want.insert(want.end(), ids.begin(), ids.end());
    mask.insert(mask.end(), ids.size(), trained);
  };
  add("<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"6*7\"}}\n</tool_call><|im_end|>", 1);
  add("\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n", 0);
  add("42<|im_end|>", 1);
  add("\n", 0);
  CHECK(d[0].response_ids == want);
  CHECK(d[0].response_loss_mask == mask);
  // A prompt-and-response row is trained on whole.
  CHECK(d[1].response_loss_mask.empty());

  // Collated: the response mask holds the holes; the padding after a response stays 0.
  const Batch b = collate_sft(d, {0, 1}, 349, 0);
  const at::Tensor m = b.tensor("response_mask");
  REQUIRE(m.size(1) == int64_t(want.size()));
  for (size_t j = 0; j < want.size(); ++j) CHECK(m[0][int64_t(j)].item<int64_t>() == mask[j]);
  const size_t second = d[1].response_ids.size();
  for (size_t j = 0; j < want.size(); ++j) CHECK(m[1][int64_t(j)].item<int64_t>() == (j < second ? 1 : 0));
  std::remove(path.c_str());

  // A conversation without an assistant turn, and a template whose renderings do not extend
  // each other, are refused naming the row.
  const std::string bad = write_jsonl("conversation-bad", {R"({"messages": [{"role": "user", "content": "x"}]})"});
  CHECK_THROWS_WITH(PromptDataset::load({bad}, tiny_tokenizer(), chat, o),
                    Contains(bad + ":1") && Contains("an assistant message"));
  const model::ChatTemplate counting = model::ChatTemplate::from_jinja(
      "{{ messages | length }}{% for m in messages %}{{ m.role }}{% endfor %}", "", "counting template");
  const std::string two = write_jsonl(
      "conversation-2", {R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})"});
  CHECK_THROWS_WITH(PromptDataset::load({two}, tiny_tokenizer(), counting, o), Contains("extend each other"));
  std::remove(two.c_str());
  std::remove(bad.c_str());
}
