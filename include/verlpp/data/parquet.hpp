// Reading parquet files into rows of JSON, the way verl's datasets are stored (pandas/pyarrow's
// to_parquet, Hugging Face datasets): each row becomes the JSON object a JSONL line of the same
// data would hold (structs as objects, lists as arrays, nulls as null), so the rest of the
// pipeline does not know which format it read.
//
// verlpp has its own reader because Debian 12 packages no Arrow or Parquet C++ library; it is
// built on what Debian has (libsnappy, libzstd, zlib) and reads the subset verl's data uses:
// PLAIN, dictionary (PLAIN_DICTIONARY / RLE_DICTIONARY), RLE, DELTA_* and BYTE_STREAM_SPLIT
// encodings; data pages v1 and v2; any number of row groups and pages; UNCOMPRESSED, SNAPPY,
// GZIP and ZSTD; BOOLEAN, INT32, INT64, FLOAT, DOUBLE, BYTE_ARRAY and FIXED_LEN_BYTE_ARRAY
// columns (text as UTF-8 strings); structs, LIST (three- and two-level) and MAP nesting with
// nulls at every level. docs/data.md lists the subset and the errors.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace verlpp::data {

// One leaf column of a parquet schema.
struct ParquetColumn {
  std::string path;           // path_in_schema joined with dots ("prompt.list.element.role")
  std::string physical_type;  // "BYTE_ARRAY", "INT64", ...
  std::string logical_type;   // "STRING", "LIST", ... ("" when none)
  int max_definition_level = 0;
  int max_repetition_level = 0;
};

// Where one column chunk lies (row group g, leaf column c), as the footer says.
struct ParquetChunk {
  size_t row_group = 0;
  std::string column;            // the leaf's path, as in ParquetColumn
  std::string codec;             // "SNAPPY", ...
  int64_t num_values = 0;        // level entries (values and nulls)
  int64_t offset = 0;            // the chunk's first byte (its dictionary page, if it has one)
  int64_t data_page_offset = 0;  // the first data page
  int64_t compressed_size = 0;   // bytes from `offset`
};

// What the footer says about a file.
struct ParquetInfo {
  int64_t num_rows = 0;
  size_t num_row_groups = 0;
  std::string created_by;              // the writer ("parquet-cpp-arrow version 25.0.0")
  std::vector<ParquetColumn> columns;  // the leaves, in file order
  std::vector<std::string> fields;     // the top-level fields (the keys of every row)
  std::vector<ParquetChunk> chunks;    // every row group's column chunks, in file order
};

// True when the file at `path` begins with parquet's magic bytes "PAR1" (false for a shorter or
// unreadable file: opening it then reports why).
bool is_parquet_file(const std::string& path);

// The footer's schema and counts; Error(path, ...) when the file is not a readable parquet file.
ParquetInfo read_parquet_info(const std::string& path);

// The file's rows (the first `max_rows` of them, or all when 0). A corrupt or unsupported file is
// an Error naming the file and, past the footer, the row group, the column and what is wrong.
std::vector<nlohmann::json> read_parquet(const std::string& path, size_t max_rows = 0);

// read_parquet on the file's bytes in memory; `name` stands for the file in errors.
std::vector<nlohmann::json> parse_parquet(const std::string& bytes, const std::string& name, size_t max_rows = 0);

}  // namespace verlpp::data
