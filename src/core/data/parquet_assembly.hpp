// Record assembly (the Dremel algorithm): a row group's decoded columns, each a stream of
// (repetition level, definition level, value), put back together into one JSON object per row.
// The definition level says how deep a path is present (so a null struct, a null list, an empty
// list and a null element differ); the repetition level says at which repeated ancestor a new
// element begins. Internal to the data layer.
#pragma once

#include "parquet_column.hpp"
#include "parquet_schema.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <vector>

namespace verlpp::data::parquet {

// Appends `num_rows` objects assembled from `columns` (one per leaf of `schema`) to `rows`.
// ParquetFormatError naming the column when its levels do not describe `num_rows` rows or
// contradict another column's.
void assemble_rows(const Schema& schema, const std::vector<ColumnData>& columns, size_t num_rows,
                   std::vector<nlohmann::json>& rows);

}  // namespace verlpp::data::parquet
