// Value decoding (see parquet_values.hpp). Every length read from a page is checked against the
// bytes the page has before it is used.
#include "parquet_values.hpp"

#include "parquet_error.hpp"
#include "parquet_levels.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

namespace verlpp::data::parquet {
namespace {

using json = nlohmann::json;

template <class T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // parquet is little-endian, as every host verlpp builds for
  return v;
}

// True when s is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF),
// which is what nlohmann::json accepts when it writes the record out.
bool valid_utf8(const uint8_t* s, size_t n) {
  for (size_t i = 0; i < n;) {
    const uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += len;
  }
  return true;
}

json text_value(const LeafType& type, const uint8_t* p, size_t n) {
  if (!valid_utf8(p, n))
    format_error(type.kind == ValueKind::text
                     ? std::string("a STRING value is not valid UTF-8")
                     : std::string("a binary value is not UTF-8 text (verlpp reads byte arrays as text)"));
  return json(std::string(reinterpret_cast<const char*>(p), n));
}

json integer_value(const LeafType& type, int64_t v) {
  if (type.kind == ValueKind::unsigned_int)
    return json(type.physical == PhysicalType::int32 ? uint64_t(uint32_t(v)) : uint64_t(v));
  if (type.kind == ValueKind::decimal) return json(double(v) / std::pow(10.0, type.scale));
  return json(v);
}

void need(size_t have, size_t count, size_t width, const char* what) {
  if (width != 0 && count > have / width)
    format_error(fmt::format("the page holds {} bytes, too few for {} {} values", have, count, what));
}

void decode_plain(const LeafType& type, const uint8_t* data, size_t size, size_t count, std::vector<json>& out) {
  switch (type.physical) {
    case PhysicalType::boolean: {
      if ((count + 7) / 8 > size) format_error(fmt::format("the page is too short for {} BOOLEAN values", count));
      for (size_t i = 0; i < count; ++i) out.emplace_back(bool((data[i >> 3] >> (i & 7)) & 1));
      return;
    }
    case PhysicalType::int32:
      need(size, count, 4, "INT32");
      for (size_t i = 0; i < count; ++i) out.push_back(integer_value(type, load_le<int32_t>(data + 4 * i)));
      return;
    case PhysicalType::int64:
      need(size, count, 8, "INT64");
      for (size_t i = 0; i < count; ++i) out.push_back(integer_value(type, load_le<int64_t>(data + 8 * i)));
      return;
    case PhysicalType::float32:
      need(size, count, 4, "FLOAT");
      for (size_t i = 0; i < count; ++i) out.emplace_back(double(load_le<float>(data + 4 * i)));
      return;
    case PhysicalType::float64:
      need(size, count, 8, "DOUBLE");
      for (size_t i = 0; i < count; ++i) out.emplace_back(load_le<double>(data + 8 * i));
      return;
    case PhysicalType::byte_array: {
      size_t pos = 0;
      for (size_t i = 0; i < count; ++i) {
        if (size - pos < 4) format_error(fmt::format("BYTE_ARRAY value {} of {} is cut short (no length)", i, count));
        const uint32_t length = load_le<uint32_t>(data + pos);
        pos += 4;
        if (length > size - pos)
          format_error(
              fmt::format("BYTE_ARRAY value {} declares {} bytes, {} are left in the page", i, length, size - pos));
        out.push_back(text_value(type, data + pos, length));
        pos += length;
      }
      return;
    }
    case PhysicalType::fixed_len_byte_array: {
      const size_t width = size_t(type.type_length);
      need(size, count, width, "FIXED_LEN_BYTE_ARRAY");
      for (size_t i = 0; i < count; ++i) out.push_back(text_value(type, data + width * i, width));
      return;
    }
    case PhysicalType::int96:
      break;
  }
  format_error(fmt::format("PLAIN values of type {} are not supported", physical_type_name(type.physical)));
}

// DELTA_BINARY_PACKED: `count` integers from data[pos, size); pos is left after the last
// miniblock read.
std::vector<int64_t> decode_delta_integers(const uint8_t* data, size_t size, size_t& pos, size_t count) {
  const char* what = "a DELTA_BINARY_PACKED header";
  const uint64_t block_size = read_uleb128(data, size, pos, what);
  const uint64_t miniblocks = read_uleb128(data, size, pos, what);
  const uint64_t total = read_uleb128(data, size, pos, what);
  const uint64_t first_raw = read_uleb128(data, size, pos, what);
  if (total != count)
    format_error(fmt::format("a DELTA_BINARY_PACKED run holds {} values where the page needs {}", total, count));
  if (block_size == 0 || block_size > (1u << 20) || miniblocks == 0 || block_size % miniblocks != 0 ||
      (block_size / miniblocks) % 8 != 0)
    format_error(
        fmt::format("a DELTA_BINARY_PACKED header has block size {} with {} miniblocks (the block must "
                    "split into miniblocks of a multiple of 8 values)",
                    block_size, miniblocks));
  const size_t per_miniblock = size_t(block_size / miniblocks);
  std::vector<int64_t> out;
  if (count == 0) return out;
  out.reserve(count);
  uint64_t value = (first_raw >> 1) ^ -(first_raw & 1);
  out.push_back(int64_t(value));
  std::vector<uint64_t> deltas(per_miniblock);
  while (out.size() < count) {
    const uint64_t min_raw = read_uleb128(data, size, pos, "a DELTA_BINARY_PACKED block");
    const uint64_t min_delta = (min_raw >> 1) ^ -(min_raw & 1);
    if (miniblocks > size - pos) format_error("a DELTA_BINARY_PACKED block's bit widths are cut short");
    const uint8_t* widths = data + pos;
    pos += size_t(miniblocks);
    for (size_t m = 0; m < miniblocks && out.size() < count; ++m) {
      const int width = widths[m];
      if (width > 64) format_error(fmt::format("a DELTA_BINARY_PACKED miniblock has bit width {}", width));
      const size_t wanted = std::min(per_miniblock, count - out.size());
      const size_t needed_bytes = (wanted * size_t(width) + 7) / 8;
      if (needed_bytes > size - pos) format_error("a DELTA_BINARY_PACKED miniblock is cut short");
      unpack_bits(data + pos, width, wanted, deltas.data());
      // Wrapping arithmetic, as the writer's; INT32 columns keep the low 32 bits.
      for (size_t i = 0; i < wanted; ++i) out.push_back(int64_t(value += min_delta + deltas[i]));
      pos += std::min(per_miniblock * size_t(width) / 8, size - pos);
    }
  }
  return out;
}

std::vector<int64_t> delta_lengths(const uint8_t* data, size_t size, size_t& pos, size_t count) {
  std::vector<int64_t> lengths = decode_delta_integers(data, size, pos, count);
  for (int64_t l : lengths)
    if (l < 0 || uint64_t(l) > size) format_error(fmt::format("a DELTA length {} is impossible", l));
  return lengths;
}

void decode_delta_length_bytes(const LeafType& type, const uint8_t* data, size_t size, size_t count,
                               std::vector<json>& out) {
  size_t pos = 0;
  const std::vector<int64_t> lengths = delta_lengths(data, size, pos, count);
  for (int64_t l : lengths) {
    if (size_t(l) > size - pos) format_error("DELTA_LENGTH_BYTE_ARRAY data is cut short");
    out.push_back(text_value(type, data + pos, size_t(l)));
    pos += size_t(l);
  }
}

void decode_delta_bytes(const LeafType& type, const uint8_t* data, size_t size, size_t count, std::vector<json>& out) {
  size_t pos = 0;
  const std::vector<int64_t> prefixes = delta_lengths(data, size, pos, count);
  const std::vector<int64_t> suffixes = delta_lengths(data, size, pos, count);
  std::string previous;
  for (size_t i = 0; i < count; ++i) {
    if (size_t(prefixes[i]) > previous.size())
      format_error(fmt::format("DELTA_BYTE_ARRAY value {} shares a {}-byte prefix with a {}-byte value", i, prefixes[i],
                               previous.size()));
    if (size_t(suffixes[i]) > size - pos) format_error("DELTA_BYTE_ARRAY data is cut short");
    previous.resize(size_t(prefixes[i]));
    previous.append(reinterpret_cast<const char*>(data + pos), size_t(suffixes[i]));
    pos += size_t(suffixes[i]);
    out.push_back(text_value(type, reinterpret_cast<const uint8_t*>(previous.data()), previous.size()));
  }
}

void decode_byte_stream_split(const LeafType& type, const uint8_t* data, size_t size, size_t count,
                              std::vector<json>& out) {
  size_t width = 0;
  if (type.physical == PhysicalType::float32 || type.physical == PhysicalType::int32) width = 4;
  if (type.physical == PhysicalType::float64 || type.physical == PhysicalType::int64) width = 8;
  if (type.physical == PhysicalType::fixed_len_byte_array) width = size_t(type.type_length);
  if (width == 0)
    format_error(fmt::format("BYTE_STREAM_SPLIT does not apply to {}", physical_type_name(type.physical)));
  need(size, count, width, "BYTE_STREAM_SPLIT");
  std::string joined(width * count, '\0');
  for (size_t i = 0; i < count; ++i)
    for (size_t b = 0; b < width; ++b) joined[i * width + b] = char(data[b * count + i]);
  decode_plain(type, reinterpret_cast<const uint8_t*>(joined.data()), joined.size(), count, out);
}

}  // namespace

void check_leaf_supported(const LeafType& type) {
  if (type.physical == PhysicalType::int96)
    format_error("INT96 values (legacy timestamps) are not supported; write timestamps as INT64");
  if (type.kind == ValueKind::unsupported)
    format_error(fmt::format("the logical type {} is not supported", type.logical_name));
  if (type.kind == ValueKind::decimal && type.physical != PhysicalType::int32 && type.physical != PhysicalType::int64)
    format_error(fmt::format("DECIMAL stored as {} is not supported (only INT32 and INT64 decimals)",
                             physical_type_name(type.physical)));
  if (type.physical == PhysicalType::fixed_len_byte_array && type.type_length <= 0)
    format_error(fmt::format("FIXED_LEN_BYTE_ARRAY with width {}", type.type_length));
}

void decode_values(Encoding encoding, const LeafType& type, const uint8_t* data, size_t size, size_t count,
                   std::vector<json>& out) {
  const bool integer = type.physical == PhysicalType::int32 || type.physical == PhysicalType::int64;
  const bool bytes = type.physical == PhysicalType::byte_array || type.physical == PhysicalType::fixed_len_byte_array;
  switch (encoding) {
    case Encoding::plain:
      decode_plain(type, data, size, count, out);
      return;
    case Encoding::rle:
      if (type.physical == PhysicalType::boolean) {
        if (size < 4) format_error("RLE booleans are cut short (no length)");
        const uint32_t length = load_le<uint32_t>(data);
        if (length > size - 4)
          format_error(fmt::format("RLE booleans declare {} bytes, {} are left", length, size - 4));
        for (uint32_t v : decode_hybrid(data + 4, length, 1, count)) out.emplace_back(v != 0);
        return;
      }
      break;
    case Encoding::delta_binary_packed:
      if (integer) {
        size_t pos = 0;
        for (int64_t v : decode_delta_integers(data, size, pos, count))
          out.push_back(integer_value(type, type.physical == PhysicalType::int32 ? int64_t(int32_t(v)) : v));
        return;
      }
      break;
    case Encoding::delta_length_byte_array:
      if (bytes) {
        decode_delta_length_bytes(type, data, size, count, out);
        return;
      }
      break;
    case Encoding::delta_byte_array:
      if (bytes) {
        decode_delta_bytes(type, data, size, count, out);
        return;
      }
      break;
    case Encoding::byte_stream_split:
      decode_byte_stream_split(type, data, size, count, out);
      return;
    default:
      break;
  }
  format_error(fmt::format("encoding {} is not supported for {} values", encoding_name(encoding),
                           physical_type_name(type.physical)));
}

void decode_dictionary_indices(const std::vector<json>& dictionary, const uint8_t* data, size_t size, size_t count,
                               std::vector<json>& out) {
  if (count == 0) return;
  if (size < 1) format_error("dictionary indices are cut short (no bit width)");
  const int width = data[0];
  if (width > 32) format_error(fmt::format("dictionary indices have bit width {} (at most 32)", width));
  const std::vector<uint32_t> indices = decode_hybrid(data + 1, size - 1, width, count);
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] >= dictionary.size())
      format_error(
          fmt::format("dictionary index {} (value {} of the page) is out of range: the dictionary has {} "
                      "entries",
                      indices[i], i, dictionary.size()));
    out.push_back(dictionary[indices[i]]);
  }
}

}  // namespace verlpp::data::parquet
