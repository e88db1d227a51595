// Column chunk reading (see parquet_column.hpp). Every offset and size comes from the file, so
// each is checked against the chunk's bounds, and those against the file, before it is used.
#include "parquet_column.hpp"

#include "parquet_codecs.hpp"
#include "parquet_error.hpp"
#include "parquet_levels.hpp"
#include "parquet_values.hpp"

#include <fmt/format.h>

#include <cstring>

namespace verlpp::data::parquet {
namespace {

using json = nlohmann::json;

// A chunk may hold at most this many level entries plus 64 per stored byte. Runs let a few bytes
// stand for many values (a column of nulls), so no exact bound exists; this one admits every
// realistic file (pyarrow's default row group is 2^20 rows) and stops a corrupt count from
// allocating gigabytes.
constexpr uint64_t kFreeValues = uint64_t(1) << 21;
constexpr uint64_t kValuesPerByte = 64;
// No page decompresses to more than this (writers default to 1 MiB pages).
constexpr size_t kMaxPageBytes = size_t(1) << 30;

struct Levels {
  std::vector<uint32_t> rep, def;
};

void check_levels(const std::vector<uint32_t>& levels, int max, const char* what) {
  for (uint32_t l : levels)
    if (l > uint32_t(max)) format_error(fmt::format("a {} level {} exceeds the column's maximum {}", what, l, max));
}

class ChunkReader {
 public:
  ChunkReader(const uint8_t* file, const ColumnChunkMeta& meta, const SchemaNode& node, int max_def, int max_rep)
      : file_(file), meta_(meta), type_(node.type), max_def_(max_def), max_rep_(max_rep) {}

  ColumnData read(size_t begin, size_t end) {
    size_t pos = begin;
    const uint64_t total = uint64_t(meta_.num_values);
    for (int page = 0; uint64_t(out_.def.size()) < total; ++page) {
      if (pos >= end)
        format_error(fmt::format("the column chunk ends after {} of its {} values", out_.def.size(), total));
      page_ = page;
      page_offset_ = pos;
      try {
        pos = read_page(pos, end, total - out_.def.size());
      } catch (const ParquetFormatError& e) {
        format_error(fmt::format("page {} (at byte {}): {}", page, page_offset_, e.what()));
      }
    }
    return std::move(out_);
  }

 private:
  // Reads the page at pos; returns where the next begins.
  size_t read_page(size_t pos, size_t end, uint64_t values_left) {
    size_t header_size = 0;
    const PageHeader h = parse_page_header(file_ + pos, end - pos, header_size);
    pos += header_size;
    const size_t stored = size_t(h.compressed_page_size), full = size_t(h.uncompressed_page_size);
    if (stored > end - pos)
      format_error(fmt::format("the page declares {} bytes, {} are left in the column chunk", stored, end - pos));
    if (full > kMaxPageBytes) format_error(fmt::format("the page declares {} uncompressed bytes (over 1 GiB)", full));
    const uint8_t* body = file_ + pos;
    const size_t next = pos + stored;
    if (h.type == PageType::index_page) return next;
    if (!h.has_type_header) format_error(fmt::format("a page of type {} has no matching header", int(h.type)));
    if (h.num_values < 0) format_error(fmt::format("the page holds {} values", h.num_values));
    if (h.type == PageType::dictionary_page) {
      read_dictionary(h, body, stored, full);
    } else if (h.type == PageType::data_page || h.type == PageType::data_page_v2) {
      if (uint64_t(h.num_values) > values_left)
        format_error(fmt::format("the page holds {} values, more than the {} the column chunk has left", h.num_values,
                                 values_left));
      if (h.type == PageType::data_page)
        read_data_page_v1(h, body, stored, full);
      else
        read_data_page_v2(h, body, stored, full);
    } else {
      format_error(fmt::format("unknown page type {}", int(h.type)));
    }
    return next;
  }

  void read_dictionary(const PageHeader& h, const uint8_t* body, size_t stored, size_t full) {
    if (seen_data_ || has_dictionary_) format_error("a dictionary page that is not the chunk's first page");
    if (h.encoding != Encoding::plain && h.encoding != Encoding::plain_dictionary)
      format_error(fmt::format("the dictionary page is encoded {}, not PLAIN", encoding_name(h.encoding)));
    const std::string bytes = decompress(meta_.codec, body, stored, full);
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    if (uint64_t(h.num_values) > bytes.size() * 8 + 8)
      format_error(fmt::format("the dictionary page claims {} entries in {} bytes", h.num_values, bytes.size()));
    decode_values(Encoding::plain, type_, data, bytes.size(), size_t(h.num_values), dictionary_);
    has_dictionary_ = true;
  }

  void read_data_page_v1(const PageHeader& h, const uint8_t* body, size_t stored, size_t full) {
    const std::string bytes = decompress(meta_.codec, body, stored, full);
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    size_t pos = 0;
    const size_t count = size_t(h.num_values);
    Levels levels;
    // v1: each level stream is its byte length (4 bytes) and RLE/bit-packed runs.
    auto read_levels = [&](int max, Encoding encoding, const char* what) {
      if (encoding != Encoding::rle)
        format_error(fmt::format("{} levels encoded {} are not supported (only RLE)", what, encoding_name(encoding)));
      if (bytes.size() - pos < 4) format_error(fmt::format("the {} levels are cut short (no length)", what));
      uint32_t length;
      std::memcpy(&length, data + pos, 4);
      pos += 4;
      if (length > bytes.size() - pos)
        format_error(
            fmt::format("the {} levels declare {} bytes, {} are left in the page", what, length, bytes.size() - pos));
      std::vector<uint32_t> out = decode_hybrid(data + pos, length, level_bit_width(max), count);
      pos += length;
      check_levels(out, max, what);
      return out;
    };
    if (max_rep_ > 0) levels.rep = read_levels(max_rep_, h.repetition_level_encoding, "repetition");
    if (max_def_ > 0) levels.def = read_levels(max_def_, h.definition_level_encoding, "definition");
    add_page(levels, count, h.encoding, data + pos, bytes.size() - pos);
  }

  void read_data_page_v2(const PageHeader& h, const uint8_t* body, size_t stored, size_t full) {
    const int32_t rep_bytes = h.repetition_levels_byte_length, def_bytes = h.definition_levels_byte_length;
    if (rep_bytes < 0 || def_bytes < 0 || size_t(rep_bytes) + size_t(def_bytes) > stored ||
        size_t(rep_bytes) + size_t(def_bytes) > full)
      format_error(fmt::format("the level lengths ({} + {} bytes) do not fit the page ({} bytes stored)", rep_bytes,
                               def_bytes, stored));
    const size_t count = size_t(h.num_values);
    Levels levels;
    // v2: the levels come first, never compressed, without length prefixes.
    if (max_rep_ > 0) {
      levels.rep = decode_hybrid(body, size_t(rep_bytes), level_bit_width(max_rep_), count);
      check_levels(levels.rep, max_rep_, "repetition");
    }
    if (max_def_ > 0) {
      levels.def = decode_hybrid(body + rep_bytes, size_t(def_bytes), level_bit_width(max_def_), count);
      check_levels(levels.def, max_def_, "definition");
    }
    const size_t levels_size = size_t(rep_bytes) + size_t(def_bytes);
    const uint8_t* values = body + levels_size;
    const size_t values_stored = stored - levels_size, values_full = full - levels_size;
    if (h.is_compressed && meta_.codec != Codec::uncompressed) {
      const std::string bytes = decompress(meta_.codec, values, values_stored, values_full);
      add_page(levels, count, h.encoding, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    } else {
      if (values_stored != values_full)
        format_error(fmt::format("uncompressed values of {} bytes declare {} bytes", values_stored, values_full));
      add_page(levels, count, h.encoding, values, values_stored);
    }
  }

  void add_page(const Levels& levels, size_t count, Encoding encoding, const uint8_t* data, size_t size) {
    seen_data_ = true;
    if (max_rep_ > 0 && count > 0 && out_.rep.empty() && levels.rep[0] != 0)
      format_error(
          fmt::format("the column chunk's first value has repetition level {} (a row must start at 0)", levels.rep[0]));
    size_t present = 0;
    for (size_t i = 0; i < count; ++i) {
      const uint32_t d = max_def_ > 0 ? levels.def[i] : 0;
      out_.def.push_back(uint16_t(d));
      out_.rep.push_back(uint16_t(max_rep_ > 0 ? levels.rep[i] : 0));
      if (int(d) == max_def_) ++present;
    }
    const size_t before = out_.values.size();
    if (encoding == Encoding::plain_dictionary || encoding == Encoding::rle_dictionary) {
      if (!has_dictionary_)
        format_error(
            fmt::format("values are encoded {} but the column chunk has no dictionary page", encoding_name(encoding)));
      decode_dictionary_indices(dictionary_, data, size, present, out_.values);
    } else {
      decode_values(encoding, type_, data, size, present, out_.values);
    }
    if (out_.values.size() - before != present)
      format_error(
          fmt::format("the page decoded {} values where its levels need {}", out_.values.size() - before, present));
  }

  const uint8_t* file_;
  const ColumnChunkMeta& meta_;
  LeafType type_;
  int max_def_, max_rep_;
  ColumnData out_;
  std::vector<json> dictionary_;
  bool has_dictionary_ = false, seen_data_ = false;
  int page_ = 0;
  size_t page_offset_ = 0;
};

}  // namespace

ColumnData read_column_chunk(const uint8_t* file, size_t data_end, const ColumnChunkMeta& meta, const SchemaNode& node,
                             int max_def, int max_rep) {
  check_leaf_supported(node.type);
  if (!codec_supported(meta.codec)) decompress(meta.codec, nullptr, 0, 0);  // the codec's own message
  const int64_t begin = chunk_offset(meta);
  const int64_t size = meta.total_compressed_size;
  if (begin < 4 || size <= 0 || uint64_t(begin) >= data_end || uint64_t(size) > data_end - uint64_t(begin))
    format_error(
        fmt::format("the column chunk declares {} bytes at offset {}, outside the file's data (bytes 4 to "
                    "{})",
                    size, begin, data_end));
  if (meta.num_values < 0 || uint64_t(meta.num_values) > kFreeValues + kValuesPerByte * uint64_t(size))
    format_error(fmt::format("the column chunk claims {} values in {} bytes", meta.num_values, size));
  ChunkReader reader(file, meta, node, max_def, max_rep);
  return reader.read(size_t(begin), size_t(begin + size));
}

}  // namespace verlpp::data::parquet
