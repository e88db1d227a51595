// RLE / bit-packed hybrid decoding (see parquet_levels.hpp).
#include "parquet_levels.hpp"

#include "parquet_error.hpp"

#include <fmt/format.h>

namespace verlpp::data::parquet {

int level_bit_width(int max_level) {
  int width = 0;
  while ((1LL << width) <= max_level) ++width;
  return width;
}

uint64_t read_uleb128(const uint8_t* data, size_t size, size_t& pos, const char* what) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos >= size) format_error(fmt::format("{} is cut short", what));
    const uint8_t b = data[pos++];
    value |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return value;
  }
  format_error(fmt::format("{} has a variable-length integer longer than 10 bytes", what));
}

void unpack_bits(const uint8_t* data, int bit_width, size_t count, uint64_t* out) {
  if (bit_width == 0) {
    for (size_t i = 0; i < count; ++i) out[i] = 0;
    return;
  }
  size_t bit = 0;
  for (size_t i = 0; i < count; ++i) {
    uint64_t v = 0;
    for (int got = 0; got < bit_width;) {
      const size_t byte = bit >> 3;
      const int offset = int(bit & 7);
      const int take = std::min(8 - offset, bit_width - got);
      v |= uint64_t((data[byte] >> offset) & ((1u << take) - 1)) << got;
      got += take;
      bit += size_t(take);
    }
    out[i] = v;
  }
}

std::vector<uint32_t> decode_hybrid(const uint8_t* data, size_t size, int bit_width, size_t count) {
  if (bit_width < 0 || bit_width > 32) format_error(fmt::format("bit width {} is outside 0..32", bit_width));
  std::vector<uint32_t> out;
  out.reserve(count);
  const size_t value_bytes = size_t((bit_width + 7) / 8);
  size_t pos = 0;
  std::vector<uint64_t> group;
  while (out.size() < count) {
    if (pos >= size) format_error(fmt::format("the RLE/bit-packed runs end after {} of {} values", out.size(), count));
    const uint64_t header = read_uleb128(data, size, pos, "an RLE/bit-packed run header");
    if (header & 1) {  // bit-packed: (header >> 1) groups of 8 values
      // Clamped so the products below cannot overflow; no page holds 2^40 groups.
      const uint64_t groups = std::min<uint64_t>(header >> 1, uint64_t(1) << 40);
      const size_t wanted = size_t(std::min<uint64_t>(groups * 8, count - out.size()));
      // Writers pad the last group; a run may also stop at the end of the data once the values
      // needed are in it.
      const uint64_t run_bytes = groups * uint64_t(bit_width);
      const size_t needed_bytes = (wanted * size_t(bit_width) + 7) / 8;
      if (needed_bytes > size - pos)
        format_error(fmt::format("a bit-packed run needs {} bytes, {} are left", needed_bytes, size - pos));
      group.resize(wanted);
      unpack_bits(data + pos, bit_width, wanted, group.data());
      for (uint64_t v : group) out.push_back(uint32_t(v));
      pos += size_t(std::min<uint64_t>(run_bytes, size - pos));
    } else {  // RLE: (header >> 1) copies of one value
      const uint64_t run = header >> 1;
      if (value_bytes > size - pos) format_error("an RLE run's value is cut short");
      uint64_t v = 0;
      for (size_t i = 0; i < value_bytes; ++i) v |= uint64_t(data[pos + i]) << (8 * i);
      pos += value_bytes;
      if (bit_width < 32 && (v >> bit_width) != 0)
        format_error(fmt::format("an RLE run's value {} does not fit {} bits", v, bit_width));
      const size_t take = size_t(std::min<uint64_t>(run, count - out.size()));
      out.insert(out.end(), take, uint32_t(v));
    }
  }
  return out;
}

}  // namespace verlpp::data::parquet
