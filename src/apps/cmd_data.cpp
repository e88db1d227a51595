// `verlpp data head FILE [--n N]`: the first N rows of a dataset file (JSONL or parquet), one JSON
// object per line, as the prompt dataset reads them (data/records.hpp), so a user can see what a
// parquet file of verl's holds and that it reads at all. Output goes through the checked stdout.
#include "commands.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/data/records.hpp>

#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>

namespace verlpp::apps {
namespace {

struct HeadOptions {
  std::string file;
  int64_t rows = 5;
};

void run_head(const HeadOptions& o) {
  VERLPP_CHECK(o.rows >= 0, "data head: --n {} must be >= 0 (0 prints every row)", o.rows);
  std::string out;
  for (const data::DataRecord& record : data::read_data_records(o.file, size_t(o.rows))) {
    out += record.row.dump() + "\n";
    if (out.size() > (1u << 16)) {
      std::cout.write(out.data(), std::streamsize(out.size()));  // checked (main.cpp's CheckedStdout)
      out.clear();
    }
  }
  std::cout.write(out.data(), std::streamsize(out.size()));
}

}  // namespace

void register_data_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("data", "Inspect dataset files (JSONL or parquet, verl's schema)");
  cmd->require_subcommand(1);
  auto head = std::make_shared<HeadOptions>();
  CLI::App* h = cmd->add_subcommand("head", "The first rows of a dataset file as JSON lines, as training reads them");
  h->add_option("file", head->file, "a .jsonl or .parquet file")->required();
  h->add_option("--n", head->rows, "rows to print (default 5; 0 = all)");
  h->callback([head] { run_head(*head); });
}

}  // namespace verlpp::apps
