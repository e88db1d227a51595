// Parquet's RLE / bit-packed hybrid encoding: definition and repetition levels, dictionary
// indices and RLE booleans are stored in it. Runs are either one value repeated (RLE) or groups
// of 8 values packed LSB first (bit-packed). Internal to the data layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace verlpp::data::parquet {

// The bit width of levels up to `max_level` (0 for 0, 1 for 1, 2 for 2..3, ...).
int level_bit_width(int max_level);

// Decodes `count` values of `bit_width` bits (0..32) from data[0, size). ParquetFormatError when
// the runs end before `count` values or a run is cut short.
std::vector<uint32_t> decode_hybrid(const uint8_t* data, size_t size, int bit_width, size_t count);

// Unpacks `count` values of `bit_width` bits (0..64), LSB first, from data (which must hold
// ceil(count * bit_width / 8) bytes; the caller checks).
void unpack_bits(const uint8_t* data, int bit_width, size_t count, uint64_t* out);

// Reads an unsigned LEB128 varint at data[pos, size), advancing pos.
uint64_t read_uleb128(const uint8_t* data, size_t size, size_t& pos, const char* what);

}  // namespace verlpp::data::parquet
