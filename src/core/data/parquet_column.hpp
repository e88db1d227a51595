// Reading one column chunk: its pages (an optional dictionary page, then data pages v1 or v2,
// each compressed with the chunk's codec) decoded into definition levels, repetition levels and
// the non-null values, ready for record assembly. Internal to the data layer.
#pragma once

#include "parquet_metadata.hpp"
#include "parquet_schema.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace verlpp::data::parquet {

// One column chunk, decoded: one (rep, def) pair per level entry, and a value for each entry
// whose def is the column's maximum.
struct ColumnData {
  std::vector<uint16_t> rep, def;
  std::vector<nlohmann::json> values;
};

// Decodes the chunk `meta` of leaf column `node` from file[0, data_end) (data_end: where the
// footer begins). ParquetFormatError names the page and what is wrong.
ColumnData read_column_chunk(const uint8_t* file, size_t data_end, const ColumnChunkMeta& meta, const SchemaNode& node,
                             int max_def, int max_rep);

}  // namespace verlpp::data::parquet
