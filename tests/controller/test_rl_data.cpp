// The data pieces of the RL loop: the arithmetic task's splits (disjoint, deterministic, correct
// answers), the RL layout of prompts + responses against a plain loop, SFT collation of the
// response key with its EOS suffix, the sft.* config checks, and the estimator families.
#include <verlpp/data/records.hpp>
#include <verlpp/tasks/arith_task.hpp>
#include <verlpp/config/config.hpp>
#include <verlpp/controller/dataset.hpp>
#include <verlpp/controller/rl_trainer.hpp>
#include <verlpp/core/error.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;
using namespace verlpp::controller;
using namespace verlpp::config;
using namespace verlpp::reward;
using namespace verlpp::tasks;
using Catch::Contains;

namespace {

const model::Tokenizer& tokenizer() {
  static const model::Tokenizer t = model::Tokenizer::from_file(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny");
  return t;
}
const model::ChatTemplate& chat() {
  static const model::ChatTemplate c =
      model::ChatTemplate::from_config_file(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny");
  return c;
}

std::string question_of(const nlohmann::json& row) { return row["prompt"][0]["content"].get<std::string>(); }

}  // namespace

TEST_CASE("arith splits are disjoint, deterministic and answered correctly", "[rl_data]") {
  ArithTaskOptions o;
  o.max_operand = 30;
  o.operators = "+-*";
  o.sft_count = 500;
  o.train_count = 400;
  o.val_count = 100;
  ArithSplits a = make_arith_splits(o), b = make_arith_splits(o);
  REQUIRE(a.sft.size() == 500);
  REQUIRE(a.train.size() == 400);
  REQUIRE(a.val.size() == 100);
  std::set<std::string> seen;
  for (const auto* split : {&a.sft, &a.train, &a.val})
    for (const auto& row : *split) {
      const std::string q = question_of(row);
      CHECK(seen.insert(q).second);  // no problem in two splits (or twice in one)
      // The ground truth, recomputed from the question text.
      long x = 0, y = 0;
      char op = 0;
      REQUIRE(std::sscanf(q.c_str(), "%ld%c%ld=", &x, &op, &y) == 3);
      const long expected = op == '+' ? x + y : op == '-' ? x - y : x * y;
      CHECK(row["reward_model"]["ground_truth"] == std::to_string(expected));
      CHECK(row["response"] == std::to_string(expected));
      CHECK(row["data_source"] == "arith");
    }
  for (size_t i = 0; i < a.val.size(); ++i) CHECK(a.val[i] == b.val[i]);
  o.seed = 2;
  CHECK(question_of(make_arith_splits(o).val[0]) != question_of(a.val[0]));  // the seed matters
  o.sft_count = 31 * 31 * 3;
  CHECK_THROWS_WITH(make_arith_splits(o), Contains("give only 2883"));
}

TEST_CASE("append_responses builds verl's [prompt | response] layout", "[rl_data]") {
  std::vector<PromptRecord> records(3);
  const char* questions[] = {"1+2=", "13+27=", "99+99="};
  for (int i = 0; i < 3; ++i) {
    records[size_t(i)].origin = "mem:" + std::to_string(i);
    records[size_t(i)].data_source = "arith";
    records[size_t(i)].prompt = {{"user", questions[i]}};
  }
  DatasetOptions options;
  PromptDataset data = PromptDataset::from_records(records, tokenizer(), chat(), options);
  Batch prompts = collate_prompts(data, {0, 1, 2}, 349);
  std::vector<std::vector<int64_t>> responses = {{52, 351}, {51}, {49, 57, 56, 351}};
  Batch b = append_responses(prompts, responses, 5, 349);
  const int64_t p = prompts.tensor("input_ids").size(1);
  REQUIRE(b.tensor("input_ids").sizes() == at::IntArrayRef({3, p + 5}));
  REQUIRE(b.tensor("prompts").equal(prompts.tensor("input_ids")));
  for (int64_t r = 0; r < 3; ++r) {
    const auto& resp = responses[size_t(r)];
    const int64_t prompt_len = int64_t(data[size_t(r)].prompt_ids.size());
    for (int64_t k = 0; k < 5; ++k) {
      const bool real = k < int64_t(resp.size());
      CHECK(b.tensor("responses")[r][k].item<int64_t>() == (real ? resp[size_t(k)] : 349));
      CHECK(b.tensor("response_mask")[r][k].item<float>() == (real ? 1.0f : 0.0f));
      CHECK(b.tensor("input_ids")[r][p + k].item<int64_t>() == (real ? resp[size_t(k)] : 349));
      CHECK(b.tensor("attention_mask")[r][p + k].item<int64_t>() == (real ? 1 : 0));
      CHECK(b.tensor("position_ids")[r][p + k].item<int64_t>() == prompt_len + k);  // continues after the prompt
    }
  }
  CHECK(b.column("uid") == prompts.column("uid"));
  CHECK_THROWS_WITH(append_responses(prompts, responses, 3, 349), Contains("row 2") && Contains("4 tokens"));
  CHECK_THROWS_WITH(append_responses(prompts, {{1}}, 3, 349), Contains("1 responses for 3"));
}

TEST_CASE("SFT rows: the response key, tokenized with the EOS suffix, collated", "[rl_data]") {
  const std::string path = "/tmp/verlpp-rl-data-sft.jsonl";
  ArithTaskOptions o;
  o.max_operand = 9;
  o.sft_count = 6;
  o.train_count = 0;
  o.val_count = 0;
  data::write_jsonl(path, make_arith_splits(o).sft);
  DatasetOptions options;
  options.response_key = "response";
  options.response_suffix_ids = {351};
  PromptDataset data = PromptDataset::load({path}, tokenizer(), chat(), options);
  REQUIRE(data.size() == 6);
  size_t longest = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    verlpp::TokenIds expected = tokenizer().encode(*data[i].response_text);
    expected.push_back(351);
    CHECK(data[i].response_ids == expected);
    longest = std::max(longest, expected.size());
  }
  Batch b = collate_sft(data, {0, 1, 2, 3, 4, 5}, 349);
  CHECK(b.tensor("responses").size(1) == int64_t(longest));
  CHECK(b.tensor("response_mask").sum().item<double>() ==
        double(data[0].response_ids.size() + data[1].response_ids.size() + data[2].response_ids.size() +
               data[3].response_ids.size() + data[4].response_ids.size() + data[5].response_ids.size()));

  // A row without the response key is an error naming file:line.
  std::ofstream(path, std::ios::app)
      << R"({"data_source": "arith", "prompt": "1+1=", "reward_model": {"ground_truth": "2"}})"
      << "\n";
  CHECK_THROWS_WITH(PromptDataset::load({path}, tokenizer(), chat(), options),
                    Contains(path + ":7") && Contains("'response'"));
}

TEST_CASE("sft.* is checked before any work", "[rl_data]") {
  Config c = Config::defaults();
  c.apply_overrides({"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "critic.enable=false",
                     "algorithm.adv_estimator=grpo", "sft.enable=true", "sft.total_steps=0",
                     "sft.micro_batch_size_per_gpu=0"});
  c.resolve();
  try {
    c.validate(1);
    FAIL("validate accepted a broken sft section");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Contains("sft.train_files"));
    CHECK_THAT(what, Contains("sft.total_steps = 0"));
    CHECK_THAT(what, Contains("sft.micro_batch_size_per_gpu = 0"));
  }
  CHECK_THROWS_WITH(c.apply_override("sft.totl_steps=3"), Contains("sft.total_steps"));
}

TEST_CASE("each estimator belongs to one step family", "[rl_data]") {
  CHECK(algorithm_family("gae") == AlgorithmFamily::kWithCritic);
  CHECK(algorithm_family("remax") == AlgorithmFamily::kGreedyBaseline);
  for (const char* name :
       {"grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "opo", "gpg", "grpo_passk"})
    CHECK(algorithm_family(name) == AlgorithmFamily::kCriticFree);
  CHECK_THROWS_WITH(algorithm_family("grpoo"), Contains("algorithm.adv_estimator") && Contains("grpo"));
}

TEST_CASE("arith: the sloppy SFT teacher drops the carry in the asked fraction, only in SFT rows", "[rl_data]") {
  CHECK(sum_without_carry(37, 58) == 85);
  CHECK(sum_without_carry(67, 58) == 115);
  CHECK(sum_without_carry(31, 58) == 89);  // no carry: exact
  ArithTaskOptions o;
  o.sft_count = 4000;
  o.train_count = 1000;
  o.val_count = 500;
  o.sft_carry_error = 0.7;
  ArithSplits s = make_arith_splits(o);
  int64_t carry_rows = 0, dropped = 0;
  for (const auto& row : s.sft) {
    long a = 0, b = 0;
    REQUIRE(std::sscanf(question_of(row).c_str(), "%ld+%ld=", &a, &b) == 2);
    CHECK(row["reward_model"]["ground_truth"] == std::to_string(a + b));  // the truth stays exact
    const bool carries = (a % 10) + (b % 10) >= 10;
    const std::string response = row["response"].get<std::string>();
    if (!carries) {
      CHECK(response == std::to_string(a + b));
      continue;
    }
    ++carry_rows;
    if (response == std::to_string(a + b - 10))
      ++dropped;
    else
      CHECK(response == std::to_string(a + b));
  }
  // Binomial(carry_rows, 0.7): 5 standard deviations.
  const double rate = double(dropped) / double(carry_rows), sd = std::sqrt(0.7 * 0.3 / double(carry_rows));
  INFO(dropped << " of " << carry_rows << " carry rows dropped");
  CHECK(std::abs(rate - 0.7) < 5 * sd);
  for (const auto* split : {&s.train, &s.val})
    for (const auto& row : *split) CHECK(row["response"] == row["reward_model"]["ground_truth"]);
  o.sft_carry_error = 1.5;
  CHECK_THROWS_WITH(make_arith_splits(o), Contains("sft_carry_error 1.5"));
}
