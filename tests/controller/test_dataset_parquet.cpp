// Prompt datasets from parquet: data.train_files given parquet files (verl's own format) load the
// same records as the JSONL of the same data (the fixtures arrow-rs wrote, tests/data says how),
// a list of files concatenates, and the demo's arith data as parquet equals the demo generator's
// rows (make_arith_splits with examples/arith/grpo_tiny.json's verlpp.demo settings).
#include <verlpp/tasks/arith_task.hpp>
#include <verlpp/config/config.hpp>
#include <verlpp/config/run_settings.hpp>
#include <verlpp/controller/dataset.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/data/records.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;
using namespace verlpp::controller;
using namespace verlpp::config;
using namespace verlpp::reward;
using namespace verlpp::tasks;
using Catch::Contains;
using json = nlohmann::json;

namespace {

const std::string kFixtures = std::string(VERLPP_SOURCE_DIR) + "/tests/data/parquet_fixtures/files/";

const model::Tokenizer& tokenizer() {
  static const model::Tokenizer t =
      model::Tokenizer::from_file(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/tokenizer.json");
  return t;
}
const model::ChatTemplate& chat() {
  static const model::ChatTemplate c =
      model::ChatTemplate::from_config_file(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny");
  return c;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

std::string write_rows(const std::string& name, const std::vector<json>& rows) {
  const std::string path = "/tmp/verlpp-dataset-parquet-" + name + ".jsonl";
  std::ofstream out(path);
  for (const json& row : rows) out << row.dump() << "\n";
  return path;
}

void check_same_records(const PromptDataset& a, const PromptDataset& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("record " << i << " (" << a[i].origin << " / " << b[i].origin << ")");
    CHECK(a[i].data_source == b[i].data_source);
    REQUIRE(a[i].prompt.size() == b[i].prompt.size());
    for (size_t m = 0; m < a[i].prompt.size(); ++m) {
      CHECK(a[i].prompt[m].role == b[i].prompt[m].role);
      CHECK(a[i].prompt[m].content == b[i].prompt[m].content);
    }
    CHECK(a[i].ground_truth == b[i].ground_truth);
    CHECK(a[i].extra_info == b[i].extra_info);
    CHECK(a[i].prompt_ids == b[i].prompt_ids);
    CHECK(a[i].response_text == b[i].response_text);
  }
}

}  // namespace

TEST_CASE("dataset: parquet files load the same records as the JSONL of the same data", "[dataset][parquet]") {
  const json rows = read_json(kFixtures + "verl.expected.json");
  const std::string jsonl = write_rows("verl", rows.get<std::vector<json>>());
  DatasetOptions o;
  o.max_prompt_length = 512;  // the gsm8k-like rows are long for the tiny byte-level vocabulary
  const PromptDataset from_jsonl = PromptDataset::load({jsonl}, tokenizer(), chat(), o);
  REQUIRE(from_jsonl.size() == rows.size());
  for (const char* file : {"verl_default.parquet", "verl_zstd_plain_v2.parquet", "verl_gzip_dict_v1.parquet"}) {
    INFO(file);
    const PromptDataset from_parquet = PromptDataset::load({kFixtures + file}, tokenizer(), chat(), o);
    check_same_records(from_parquet, from_jsonl);
    CHECK(from_parquet[5].origin == kFixtures + file + ", row 5");
    CHECK(from_parquet.data_sources() == std::vector<std::string>{"arith", "openai/gsm8k"});
  }
  // A list of files (data.train_files=[a, b]) concatenates, parquet and JSONL alike.
  const PromptDataset both =
      PromptDataset::load({kFixtures + "verl_snappy_dict_v1.parquet", jsonl}, tokenizer(), chat(), o);
  REQUIRE(both.size() == 2 * rows.size());
  CHECK(both[rows.size()].origin == jsonl + ":1");
  CHECK(both[0].prompt_ids == both[rows.size()].prompt_ids);
  std::remove(jsonl.c_str());
}

TEST_CASE("dataset: the demo's arith data as parquet is the demo generator's rows", "[dataset][parquet]") {
  const ArithTaskOptions task = arith_task_options(config::parse_demo_settings(
      config::Config::from_file(std::string(VERLPP_SOURCE_DIR) + "/examples/arith/grpo_tiny.json")));
  const ArithSplits splits = make_arith_splits(task);
  for (const auto& [name, rows] : {std::pair<std::string, const std::vector<json>&>{"train", splits.train},
                                   std::pair<std::string, const std::vector<json>&>{"val", splits.val}}) {
    const std::vector<data::DataRecord> read = data::read_data_records(kFixtures + "arith_" + name + ".parquet");
    REQUIRE(read.size() == rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      INFO(name << " row " << i);
      CHECK(read[i].row == rows[i]);
    }
  }
}

TEST_CASE("dataset: a parquet row that does not fit the dataset names the file and row", "[dataset][parquet]") {
  // letters.parquet has one column, 'letter': no prompt.
  DatasetOptions o;
  CHECK_THROWS_WITH(PromptDataset::load({kFixtures + "letters.parquet"}, tokenizer(), chat(), o),
                    kFixtures + "letters.parquet, row 0: the row has no 'prompt' (data.prompt_key)");
  // A corrupt parquet file is refused with the reader's message.
  CHECK_THROWS_WITH(PromptDataset::load({kFixtures + "verl_brotli.parquet"}, tokenizer(), chat(), o),
                    Contains("compression codec BROTLI is not supported"));
}
