// Dataset files as rows of JSON, whatever their format: JSONL (one JSON object per line, blank
// lines allowed) or parquet (data/parquet.hpp), told apart by parquet's magic bytes or a
// .parquet name. Both give the same JSON for the same data, so the prompt dataset, the
// generate command and `verlpp data head` read either.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace verlpp::data {

// One row and where it came from, for messages: "file:line" (JSONL, 1-based) or
// "file, row N" (parquet, 0-based as pandas counts).
struct DataRecord {
  std::string origin;
  nlohmann::json row;  // a JSON object
};

// True when `path` is read as parquet: it ends in ".parquet" or begins with "PAR1".
bool is_parquet_dataset(const std::string& path);

// The first `max_rows` rows of the file (all when 0). Error naming the file (and line or row
// group and column) when it cannot be read, a line is not JSON, or a row is not an object.
std::vector<DataRecord> read_data_records(const std::string& path, size_t max_rows = 0);

// Writes `rows` as JSONL (one compact object per line), replacing `path` (an Error naming the
// file when it cannot be written).
void write_jsonl(const std::string& path, const std::vector<nlohmann::json>& rows);

}  // namespace verlpp::data
