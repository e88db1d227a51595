// Dataset files as JSON rows (see records.hpp).
#include "../util/files.hpp"
#include "../util/input_file.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/core/json_limits.hpp>
#include <verlpp/data/parquet.hpp>
#include <verlpp/data/records.hpp>

#include <fmt/format.h>

namespace verlpp::data {
namespace {

using json = nlohmann::json;

const char* const kWhat = "data file";

json parse_line(const std::string& line, const std::string& where) {
  json row;
  check_json_depth(line, where);
  try {
    row = json::parse(line);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number that overflows
    throw Error(where, fmt::format("not valid JSON: {}", e.what()));
  }
  if (!row.is_object()) throw Error(where, "a row must be a JSON object");
  return row;
}

}  // namespace

bool is_parquet_dataset(const std::string& path) {
  const std::string suffix = ".parquet";
  return (path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) ||
         is_parquet_file(path);
}

std::vector<DataRecord> read_data_records(const std::string& path, size_t max_rows) {
  std::vector<DataRecord> records;
  if (is_parquet_dataset(path)) {
    std::vector<json> rows = parse_parquet(files::read_input(path, kWhat), path, max_rows);
    records.reserve(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      // A parquet row is always an object: its keys are the schema's top-level fields.
      records.push_back({fmt::format("{}, row {}", path, i), std::move(rows[i])});
    }
    return records;
  }
  std::ifstream in = files::open_input(path, kWhat);
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are allowed
    const std::string where = fmt::format("{}:{}", path, number);
    records.push_back({where, parse_line(line, where)});
    if (max_rows > 0 && records.size() >= max_rows) break;
  }
  if (in.bad()) throw Error(path, "reading the data file failed part-way");
  return records;
}

void write_jsonl(const std::string& path, const std::vector<nlohmann::json>& rows) {
  std::string text;
  for (const auto& row : rows) text += row.dump() + "\n";
  files::write_text(path, text);
}

}  // namespace verlpp::data
