// `verlpp generate` as a user runs it: verl-schema and plain-text prompts in, one JSON line per
// sample out (prompt and sample index, text, ids, log-probs, finish reason), the same output for
// the same seed, greedy output equal to the engine's own greedy run, and bad input refused with
// the option or file:line named.
#include <verlpp/model/checkpoint.hpp>
#include <verlpp/model/tokenizer.hpp>
#include <verlpp/rollout/engine.hpp>

#include "cli_run.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;
using json = nlohmann::json;

namespace {

using Run = e2e::CliRun;
Run verlpp_cli(const std::string& args) { return e2e::run_cli(args); }

// The rows of a JSONL output, ordered by (prompt_index, sample_index): they are written in the
// order samples finish.
std::vector<json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> rows;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(json::parse(line));
  std::stable_sort(rows.begin(), rows.end(), [](const json& a, const json& b) {
    return std::make_pair(a["prompt_index"].get<int64_t>(), a["sample_index"].get<int64_t>()) <
           std::make_pair(b["prompt_index"].get<int64_t>(), b["sample_index"].get<int64_t>());
  });
  return rows;
}

// A model folder with seeded weights and the tiny tokenizer, and a prompts file.
std::string fixture() {
  const std::string dir = "/tmp/verlpp-generate-cli";
  REQUIRE(std::system(("rm -rf " + dir + " && mkdir -p " + dir + "/model").c_str()) == 0);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    REQUIRE(std::system(
                ("cp " + std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/" + f + " " + dir + "/model/").c_str()) == 0);
  model::DecoderLM m(model::load_model_config(dir + "/model"));
  m.init_weights(4);
  model::save_pretrained(m, dir + "/model");
  std::ofstream(dir + "/prompts.jsonl") << R"({"prompt": [{"role": "user", "content": "12+34="}]})"
                                        << "\n"
                                        << R"({"text": "hello world"})"
                                        << "\n"
                                        << "\n"  // blank lines are skipped
                                        << R"({"prompt": [{"role": "user", "content": "7+8="}]})"
                                        << "\n";
  return dir;
}

}  // namespace

TEST_CASE("verlpp generate: one line per sample, reproducible, greedy equal to the engine", "[e2e][generate]") {
  const std::string dir = fixture();
  const std::string base = "generate --model " + dir + "/model --prompts " + dir + "/prompts.jsonl --max-new-tokens 6 ";
  Run a = verlpp_cli(base + "--n 3 --temperature 0.9 --top-k 50 --seed 11 --output " + dir + "/a.jsonl");
  INFO(a.output);
  REQUIRE(a.status == 0);
  std::vector<json> rows = read_lines(dir + "/a.jsonl");
  REQUIRE(rows.size() == 9);  // 3 prompts x 3 samples
  const model::Tokenizer tokenizer = model::Tokenizer::from_file(dir + "/model");
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& r = rows[i];
    CHECK(r["prompt_index"] == int64_t(i / 3));
    CHECK(r["sample_index"] == int64_t(i % 3));
    const auto ids = r["token_ids"].get<verlpp::TokenIds>();
    CHECK(!ids.empty());
    CHECK(ids.size() <= 6);
    CHECK(r["logprobs"].size() == ids.size());
    for (const auto& lp : r["logprobs"]) CHECK(lp.get<double>() <= 0.0);
    CHECK(r["text"] == tokenizer.decode(ids, true));
    const std::string reason = r["finish_reason"];
    CHECK((reason == "stop" || (reason == "length" && ids.size() == 6)));
  }
  // The same seed, the same samples.
  Run b = verlpp_cli(base + "--n 3 --temperature 0.9 --top-k 50 --seed 11 --output " + dir + "/b.jsonl");
  REQUIRE(b.status == 0);
  CHECK(read_lines(dir + "/b.jsonl") == rows);

  // Greedy through the CLI equals the engine's greedy run on the same weights and prompt ids.
  Run g = verlpp_cli(base + "--temperature 0 --ignore-eos --output " + dir + "/g.jsonl");
  REQUIRE(g.status == 0);
  std::vector<json> greedy = read_lines(dir + "/g.jsonl");
  REQUIRE(greedy.size() == 3);
  rollout::RolloutEngine engine(model::load_pretrained(dir + "/model"));
  rollout::GenerateRequest req;
  req.prompt_ids = tokenizer.encode("hello world");
  req.sampling.temperature = 0;
  req.sampling.max_new_tokens = 6;
  req.sampling.ignore_eos = true;
  auto outs = engine.generate({req});
  CHECK(greedy[1]["token_ids"].get<std::vector<int64_t>>() == outs[0].token_ids);
}

// Several ranks: --nproc 2 runs two engines (prompt i on engine i mod 2) whose lines are the
// one-process run's, sampled with the same seeds; engines split over 2 ranks (tensor parallel,
// alone and as two engines of 2 on 4 ranks) give its greedy tokens. Log-probs agree to fp32
// rounding: a batch of other prompts, or a split sum, rounds differently. Layouts that do not
// fit are refused before any rank starts.
TEST_CASE("verlpp generate --nproc N --tensor-parallel-size t: the lines of one process", "[e2e][generate][dist]") {
  const std::string dir = fixture();
  const std::string base =
      "generate --model " + dir + "/model --prompts " + dir + "/prompts.jsonl --max-new-tokens 6 --device cpu ";
  auto run = [&](const std::string& args, const std::string& name) {
    Run r = verlpp_cli(base + args + "--output " + dir + "/" + name + ".jsonl");
    INFO(r.output);
    REQUIRE(r.status == 0);
    return read_lines(dir + "/" + name + ".jsonl");
  };
  auto same_lines = [](const std::vector<json>& got, const std::vector<json>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      for (const char* key : {"prompt_index", "sample_index", "token_ids", "text", "finish_reason"})
        CHECK(got[i][key] == want[i][key]);
      REQUIRE(got[i]["logprobs"].size() == want[i]["logprobs"].size());
      for (size_t t = 0; t < got[i]["logprobs"].size(); ++t)
        CHECK(got[i]["logprobs"][t].get<double>() == Approx(want[i]["logprobs"][t].get<double>()).margin(1e-5));
    }
  };
  const std::string sampled = "--n 2 --temperature 0.9 --seed 11 ", greedy = "--temperature 0 --ignore-eos ";
  const std::vector<json> one_sampled = run(sampled, "one_sampled"), one_greedy = run(greedy, "one_greedy");
  REQUIRE(one_sampled.size() == 6);
  {
    INFO("--nproc 2, sampled");
    same_lines(run(sampled + "--nproc 2 ", "dp_sampled"), one_sampled);
  }
  for (const std::string layout : {"--nproc 2 --tensor-parallel-size 2 ", "--nproc 4 --tensor-parallel-size 2 "}) {
    INFO(layout << "greedy");
    same_lines(run(greedy + layout, "tp_greedy"), one_greedy);
  }
  Run odd = verlpp_cli(base + "--nproc 4 --tensor-parallel-size 3 --output " + dir + "/x.jsonl");
  CHECK(odd.status != 0);
  CHECK_THAT(odd.output, Catch::Contains("engines of 3 ranks do not fit the 4 rank(s) launched"));
  Run heads = verlpp_cli(base + "--nproc 8 --tensor-parallel-size 8 --output " + dir + "/x.jsonl");
  CHECK(heads.status != 0);
  CHECK_THAT(heads.output, Catch::Contains("8 does not divide the 4 attention heads"));
}

TEST_CASE("verlpp generate: bad input is refused with what and where", "[e2e][generate]") {
  const std::string dir = fixture();
  const std::string base = "generate --model " + dir + "/model --prompts " + dir + "/prompts.jsonl ";
  Run top_p = verlpp_cli(base + "--top-p 1.5");
  CHECK(top_p.status != 0);
  CHECK_THAT(top_p.output, Catch::Contains("top_p"));
  Run n0 = verlpp_cli(base + "--n 0");
  CHECK(n0.status != 0);
  CHECK_THAT(n0.output, Catch::Contains("n"));
  Run missing = verlpp_cli("generate --model " + dir + "/nowhere --prompts " + dir + "/prompts.jsonl");
  CHECK(missing.status != 0);
  CHECK_THAT(missing.output, Catch::Contains("nowhere") && Catch::Contains("config.json"));
  std::ofstream(dir + "/bad.jsonl") << R"({"text": "ok"})"
                                    << "\n"
                                    << "{not json"
                                    << "\n";
  Run bad = verlpp_cli("generate --model " + dir + "/model --prompts " + dir + "/bad.jsonl");
  CHECK(bad.status != 0);
  CHECK_THAT(bad.output, Catch::Contains("bad.jsonl:2"));
}
