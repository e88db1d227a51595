// Decoding a page's non-null values into JSON values: PLAIN, RLE (booleans), DELTA_BINARY_PACKED,
// DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY and BYTE_STREAM_SPLIT, and dictionary indices
// (PLAIN_DICTIONARY / RLE_DICTIONARY) into a decoded dictionary. A value becomes the JSON a JSONL
// row would hold: integers, doubles, booleans, and UTF-8 strings. Internal to the data layer.
#pragma once

#include "parquet_metadata.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace verlpp::data::parquet {

// What decoding a leaf column needs to know about it.
struct LeafType {
  PhysicalType physical = PhysicalType::int32;
  int32_t type_length = 0;  // FIXED_LEN_BYTE_ARRAY
  ValueKind kind = ValueKind::plain;
  int32_t scale = 0;  // DECIMAL
  std::string logical_name;
};

// Refuses (ParquetFormatError) a leaf whose type verlpp does not render: INT96, FLOAT16, a
// DECIMAL stored as bytes, and the like.
void check_leaf_supported(const LeafType& type);

// Appends `count` values encoded with `encoding` at data[0, size) to `out`.
void decode_values(Encoding encoding, const LeafType& type, const uint8_t* data, size_t size, size_t count,
                   std::vector<nlohmann::json>& out);

// Appends `count` dictionary entries selected by the indices at data[0, size) (a bit-width byte,
// then RLE/bit-packed runs) to `out`; an index past the dictionary is a ParquetFormatError.
void decode_dictionary_indices(const std::vector<nlohmann::json>& dictionary, const uint8_t* data, size_t size,
                               size_t count, std::vector<nlohmann::json>& out);

}  // namespace verlpp::data::parquet
