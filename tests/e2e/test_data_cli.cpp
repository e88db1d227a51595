// `verlpp data head` on parquet and JSONL as a user runs it (the rows as JSON lines, equal to the
// records the fixtures' writer wrote, the same text for both formats, --n, errors), and
// `verlpp train` with data.train_files / data.val_files given as parquet files: the run is the
// run of the JSONL of the same data, metric for metric.
#include <verlpp/config/config.hpp>
#include <verlpp/config/run_settings.hpp>
#include <verlpp/tasks/arith_task.hpp>

#include "cli_run.hpp"
#include "e2e_util.hpp"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

using namespace verlpp;
using namespace verlpp::e2e;
using Catch::Contains;

namespace {

const std::string kFixtures = std::string(VERLPP_SOURCE_DIR) + "/tests/data/parquet_fixtures/files/";

json read_json_file(const std::string& path) { return json::parse(read_file(path)); }

// The expected rows as `data head` prints them: one compact JSON object per line.
std::string lines_of(const json& rows, size_t n) {
  std::string out;
  for (size_t i = 0; i < n && i < rows.size(); ++i) out += rows[i].dump() + "\n";
  return out;
}

}  // namespace

TEST_CASE("verlpp data head: the first rows of parquet and JSONL, as JSON lines", "[cli][data]") {
  const json rows = read_json_file(kFixtures + "verl.expected.json");
  const std::string parquet = kFixtures + "verl_zstd_dict_v2.parquet";
  const CliRun head = run_cli("data head " + parquet);
  INFO(head.output);
  CHECK(head.status == 0);
  CHECK(head.output == lines_of(rows, 5));
  const CliRun all = run_cli("data head " + parquet + " --n 0");
  CHECK(all.status == 0);
  CHECK(all.output == lines_of(rows, rows.size()));
  CHECK(run_cli("data head " + parquet + " --n 9").output == lines_of(rows, 9));
  CHECK(run_cli("data head " + kFixtures + "pyarrow/pyarrow_verl_pandas.parquet --n 0").output ==
        lines_of(read_json_file(kFixtures + "pyarrow/pyarrow_verl.expected.json"), 1000));

  const std::string jsonl = "/tmp/verlpp-data-head.jsonl";
  {  // blank lines between the rows, which JSONL allows
    std::ofstream out(jsonl);
    for (const json& row : rows) out << row.dump() << "\n\n";
  }
  CHECK(run_cli("data head " + jsonl + " --n 0").output == all.output);
  std::remove(jsonl.c_str());
}

TEST_CASE("verlpp data head: unreadable files and bad arguments are one-line errors", "[cli][data]") {
  const CliRun missing = run_cli("data head /tmp/verlpp-no-such-file.parquet");
  CHECK(missing.status == 1);
  CHECK(missing.output ==
        "verlpp: error: /tmp/verlpp-no-such-file.parquet: cannot read the data file: No such file or directory\n");
  const CliRun codec = run_cli("data head " + kFixtures + "verl_brotli.parquet");
  CHECK(codec.status == 1);
  CHECK_THAT(codec.output, Contains("verlpp: error: " + kFixtures +
                                    "verl_brotli.parquet: row group 0, column data_source: compression codec BROTLI "
                                    "is not supported"));
  const CliRun negative = run_cli("data head " + kFixtures + "verl_default.parquet --n -1");
  CHECK(negative.status == 1);
  CHECK(negative.output == "verlpp: error: data head: --n -1 must be >= 0 (0 prints every row)\n");
  // Standard output on a full device, standard error to a file of its own.
  const std::string err = "/tmp/verlpp-data-head-full.err";
  const int full = std::system(
      (std::string(VERLPP_CLI) + " data head " + kFixtures + "arith_train.parquet --n 0 > /dev/full 2> " + err)
          .c_str());
  CHECK((WIFEXITED(full) && WEXITSTATUS(full) == 1));
  std::ifstream err_in(err);
  const std::string err_text((std::istreambuf_iterator<char>(err_in)), std::istreambuf_iterator<char>());
  CHECK_THAT(err_text, Contains("writing standard output") && Contains("No space left on device"));
}

TEST_CASE("verlpp train: parquet train and val files train exactly as the JSONL of the same data", "[e2e][data]") {
  const std::string dir = make_fixture("parquet");
  // The demo's arith splits: as parquet (the fixtures) and as the JSONL the demo writes.
  const tasks::ArithTaskOptions task = tasks::arith_task_options(config::parse_demo_settings(
      config::Config::from_file(std::string(VERLPP_SOURCE_DIR) + "/examples/arith/grpo_tiny.json")));
  const tasks::ArithSplits splits = tasks::make_arith_splits(task);
  data::write_jsonl(dir + "/arith_train.jsonl", splits.train);
  data::write_jsonl(dir + "/arith_val.jsonl", splits.val);

  std::vector<std::vector<json>> runs;
  for (const std::string format : {"jsonl", "parquet"}) {
    const std::string run = dir + "/" + format;
    const std::string config = write_config(dir, run, "grpo");
    const std::string data = format == "jsonl" ? dir + "/arith_" : kFixtures + "arith_";
    run_to_end(config, run + ".log",
               {"data.train_files=" + data + "train." + format, "data.val_files=" + data + "val." + format,
                "sft.enable=false", "trainer.total_training_steps=2", "trainer.save_freq=-1", "trainer.test_freq=-1"});
    runs.push_back(deterministic_rows(run));
  }
  REQUIRE(runs[0].size() == 3);  // validation before training, then 2 steps
  CHECK(runs[0][0].contains("val/arith/acc"));
  for (size_t i = 0; i < runs[0].size(); ++i) {
    INFO("row " << i << "\n jsonl:   " << runs[0][i].dump() << "\n parquet: " << runs[1][i].dump());
    CHECK(runs[1][i] == runs[0][i]);
  }
}
