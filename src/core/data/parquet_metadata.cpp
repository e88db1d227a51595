// Decoding FileMetaData and PageHeader from the Thrift compact protocol (see parquet_metadata.hpp).
// Field ids and enum values are those of the format's parquet.thrift.
#include "parquet_metadata.hpp"

#include "parquet_thrift.hpp"

#include <fmt/format.h>

namespace verlpp::data::parquet {
namespace {

// A field's value of an expected wire type; a different type for a known field id is corrupt.
int32_t read_i32(ThriftReader& in, ThriftType t, const char* field) {
  if (t != ThriftType::i32) in.fail(fmt::format("{} has wire type {}, not i32", field, int(t)));
  return in.i32();
}
int64_t read_i64(ThriftReader& in, ThriftType t, const char* field) {
  if (t != ThriftType::i64) in.fail(fmt::format("{} has wire type {}, not i64", field, int(t)));
  return in.i64();
}
std::string read_string(ThriftReader& in, ThriftType t, const char* field) {
  if (t != ThriftType::binary) in.fail(fmt::format("{} has wire type {}, not a string", field, int(t)));
  return in.binary();
}
size_t read_list(ThriftReader& in, ThriftType t, ThriftType element, const char* field) {
  if (t != ThriftType::list) in.fail(fmt::format("{} has wire type {}, not a list", field, int(t)));
  auto [type, count] = in.list_header();
  if (count > 0 && type != element)
    in.fail(fmt::format("{} holds wire type {}, not {}", field, int(type), int(element)));
  return count;
}
void expect_struct(ThriftReader& in, ThriftType t, const char* field) {
  if (t != ThriftType::structure) in.fail(fmt::format("{} has wire type {}, not a struct", field, int(t)));
}

// LogicalType is a union: the id of its one field says which type it is.
void read_logical_type(ThriftReader& in, SchemaElement& e) {
  in.read_struct([&](int16_t id, ThriftType t) {
    static const char* const names[] = {"",     "STRING",    "MAP",     "LIST",     "ENUM",     "DECIMAL", "DATE",
                                        "TIME", "TIMESTAMP", "",        "INTEGER",  "UNKNOWN",  "JSON",    "BSON",
                                        "UUID", "FLOAT16",   "VARIANT", "GEOMETRY", "GEOGRAPHY"};
    e.logical_name = id > 0 && id < int16_t(std::size(names)) ? names[id] : fmt::format("logical type {}", id);
    if (id == 5 && t == ThriftType::structure) {  // DecimalType {1: scale, 2: precision}
      e.kind = ValueKind::decimal;
      in.read_struct([&](int16_t f, ThriftType ft) {
        if (f == 1)
          e.scale = read_i32(in, ft, "DecimalType.scale");
        else
          in.skip(ft);
      });
      return;
    }
    if (id == 10 && t == ThriftType::structure) {  // IntType {1: bitWidth, 2: isSigned}
      bool is_signed = true;
      in.read_struct([&](int16_t f, ThriftType ft) {
        if (f == 2)
          is_signed = in.boolean(ft);
        else
          in.skip(ft);
      });
      e.kind = is_signed ? ValueKind::plain : ValueKind::unsigned_int;
      return;
    }
    in.skip(t);
    switch (id) {
      case 1:
      case 4:
      case 12:
        e.kind = ValueKind::text;
        break;
      case 2:
        e.kind = ValueKind::map;
        break;
      case 3:
        e.kind = ValueKind::list;
        break;
      case 6:
      case 7:
      case 8:
      case 11:
        e.kind = ValueKind::plain;  // dates and times as their stored integers; UNKNOWN is always null
        break;
      default:
        e.kind = ValueKind::unsupported;
    }
  });
}

// ConvertedType, the older annotation; used only when no LogicalType was written.
void apply_converted_type(SchemaElement& e, int32_t converted) {
  static const char* const names[] = {"UTF8",
                                      "MAP",
                                      "MAP_KEY_VALUE",
                                      "LIST",
                                      "ENUM",
                                      "DECIMAL",
                                      "DATE",
                                      "TIME_MILLIS",
                                      "TIME_MICROS",
                                      "TIMESTAMP_MILLIS",
                                      "TIMESTAMP_MICROS",
                                      "UINT_8",
                                      "UINT_16",
                                      "UINT_32",
                                      "UINT_64",
                                      "INT_8",
                                      "INT_16",
                                      "INT_32",
                                      "INT_64",
                                      "JSON",
                                      "BSON",
                                      "INTERVAL"};
  e.logical_name = converted >= 0 && converted < int32_t(std::size(names))
                       ? names[converted]
                       : fmt::format("converted type {}", converted);
  if (converted == 0 || converted == 4 || converted == 19)
    e.kind = ValueKind::text;
  else if (converted == 1 || converted == 2)
    e.kind = ValueKind::map;
  else if (converted == 3)
    e.kind = ValueKind::list;
  else if (converted == 5)
    e.kind = ValueKind::decimal;
  else if (converted >= 11 && converted <= 14)
    e.kind = ValueKind::unsigned_int;
  else if ((converted >= 6 && converted <= 10) || (converted >= 15 && converted <= 18))
    e.kind = ValueKind::plain;
  else
    e.kind = ValueKind::unsupported;
}

SchemaElement read_schema_element(ThriftReader& in) {
  SchemaElement e;
  std::optional<int32_t> converted;
  bool has_logical = false;
  in.read_struct([&](int16_t id, ThriftType t) {
    switch (id) {
      case 1: {
        const int32_t type = read_i32(in, t, "SchemaElement.type");
        if (type < 0 || type > 7) in.fail(fmt::format("physical type {} is not one of parquet's (0..7)", type));
        e.type = PhysicalType(type);
        break;
      }
      case 2:
        e.type_length = read_i32(in, t, "SchemaElement.type_length");
        break;
      case 3: {
        const int32_t r = read_i32(in, t, "SchemaElement.repetition_type");
        if (r < 0 || r > 2) in.fail(fmt::format("repetition {} is not REQUIRED, OPTIONAL or REPEATED", r));
        e.repetition = Repetition(r);
        break;
      }
      case 4:
        e.name = read_string(in, t, "SchemaElement.name");
        break;
      case 5:
        e.num_children = read_i32(in, t, "SchemaElement.num_children");
        break;
      case 6:
        converted = read_i32(in, t, "SchemaElement.converted_type");
        break;
      case 7:
        e.scale = read_i32(in, t, "SchemaElement.scale");
        break;
      case 10:
        expect_struct(in, t, "SchemaElement.logicalType");
        has_logical = true;
        read_logical_type(in, e);
        break;
      default:
        in.skip(t);
    }
  });
  if (!has_logical && converted) apply_converted_type(e, *converted);
  return e;
}

ColumnChunkMeta read_column_meta(ThriftReader& in, ColumnChunkMeta c) {
  in.read_struct([&](int16_t id, ThriftType t) {
    switch (id) {
      case 1: {
        const int32_t type = read_i32(in, t, "ColumnMetaData.type");
        if (type < 0 || type > 7) in.fail(fmt::format("physical type {} is not one of parquet's (0..7)", type));
        c.type = PhysicalType(type);
        break;
      }
      case 3: {
        const size_t n = read_list(in, t, ThriftType::binary, "ColumnMetaData.path_in_schema");
        for (size_t i = 0; i < n; ++i) c.path.push_back(in.binary());
        break;
      }
      case 4:
        c.codec = Codec(read_i32(in, t, "ColumnMetaData.codec"));
        break;
      case 5:
        c.num_values = read_i64(in, t, "ColumnMetaData.num_values");
        break;
      case 7:
        c.total_compressed_size = read_i64(in, t, "ColumnMetaData.total_compressed_size");
        break;
      case 9:
        c.data_page_offset = read_i64(in, t, "ColumnMetaData.data_page_offset");
        break;
      case 11:
        c.dictionary_page_offset = read_i64(in, t, "ColumnMetaData.dictionary_page_offset");
        break;
      default:
        in.skip(t);
    }
  });
  c.has_meta_data = true;
  return c;
}

RowGroupMeta read_row_group(ThriftReader& in) {
  RowGroupMeta g;
  in.read_struct([&](int16_t id, ThriftType t) {
    if (id == 1) {
      const size_t n = read_list(in, t, ThriftType::structure, "RowGroup.columns");
      for (size_t i = 0; i < n; ++i) {
        ColumnChunkMeta c;
        in.read_struct([&](int16_t f, ThriftType ft) {
          if (f == 1) {
            c.file_path = read_string(in, ft, "ColumnChunk.file_path");
          } else if (f == 3) {
            expect_struct(in, ft, "ColumnChunk.meta_data");
            c = read_column_meta(in, std::move(c));
          } else {
            in.skip(ft);
          }
        });
        g.columns.push_back(std::move(c));
      }
    } else if (id == 3) {
      g.num_rows = read_i64(in, t, "RowGroup.num_rows");
    } else {
      in.skip(t);
    }
  });
  return g;
}

}  // namespace

std::string physical_type_name(PhysicalType type) {
  static const char* const names[] = {"BOOLEAN", "INT32",  "INT64",      "INT96",
                                      "FLOAT",   "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
  const auto i = size_t(type);
  return i < std::size(names) ? names[i] : fmt::format("type {}", i);
}

std::string codec_name(Codec codec) {
  static const char* const names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
  const auto i = int32_t(codec);
  return i >= 0 && i < int32_t(std::size(names)) ? names[i] : fmt::format("codec {}", i);
}

std::string encoding_name(Encoding encoding) {
  static const char* const names[] = {
      "PLAIN",          "GROUP_VAR_INT",       "PLAIN_DICTIONARY",        "RLE",
      "BIT_PACKED",     "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
      "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
  const auto i = int32_t(encoding);
  return i >= 0 && i < int32_t(std::size(names)) ? names[i] : fmt::format("encoding {}", i);
}

int64_t chunk_offset(const ColumnChunkMeta& chunk) {
  int64_t offset = chunk.data_page_offset;
  if (chunk.dictionary_page_offset && *chunk.dictionary_page_offset > 0 && *chunk.dictionary_page_offset < offset)
    offset = *chunk.dictionary_page_offset;
  return offset;
}

FileMeta parse_file_meta(const uint8_t* data, size_t size) {
  ThriftReader in(data, size, "the footer (FileMetaData)");
  FileMeta m;
  bool has_schema = false;
  in.read_struct([&](int16_t id, ThriftType t) {
    switch (id) {
      case 1:
        m.version = read_i32(in, t, "FileMetaData.version");
        break;
      case 2: {
        const size_t n = read_list(in, t, ThriftType::structure, "FileMetaData.schema");
        for (size_t i = 0; i < n; ++i) m.schema.push_back(read_schema_element(in));
        has_schema = true;
        break;
      }
      case 3:
        m.num_rows = read_i64(in, t, "FileMetaData.num_rows");
        break;
      case 4: {
        const size_t n = read_list(in, t, ThriftType::structure, "FileMetaData.row_groups");
        for (size_t i = 0; i < n; ++i) m.row_groups.push_back(read_row_group(in));
        break;
      }
      case 6:
        m.created_by = read_string(in, t, "FileMetaData.created_by");
        break;
      default:
        in.skip(t);
    }
  });
  if (!has_schema || m.schema.empty()) in.fail("it has no schema");
  return m;
}

PageHeader parse_page_header(const uint8_t* data, size_t size, size_t& consumed) {
  ThriftReader in(data, size, "a page header");
  PageHeader h;
  bool has_type = false, has_sizes[2] = {false, false};
  in.read_struct([&](int16_t id, ThriftType t) {
    switch (id) {
      case 1:
        h.type = PageType(read_i32(in, t, "PageHeader.type"));
        has_type = true;
        break;
      case 2:
        h.uncompressed_page_size = read_i32(in, t, "PageHeader.uncompressed_page_size");
        has_sizes[0] = true;
        break;
      case 3:
        h.compressed_page_size = read_i32(in, t, "PageHeader.compressed_page_size");
        has_sizes[1] = true;
        break;
      case 5:  // DataPageHeader
      case 7:  // DictionaryPageHeader
        expect_struct(in, t, id == 5 ? "PageHeader.data_page_header" : "PageHeader.dictionary_page_header");
        h.has_type_header =
            h.has_type_header || (id == 5 ? h.type == PageType::data_page : h.type == PageType::dictionary_page);
        in.read_struct([&](int16_t f, ThriftType ft) {
          if (f == 1)
            h.num_values = read_i32(in, ft, "num_values");
          else if (f == 2)
            h.encoding = Encoding(read_i32(in, ft, "encoding"));
          else if (f == 3 && id == 5)
            h.definition_level_encoding = Encoding(read_i32(in, ft, "definition_level_encoding"));
          else if (f == 4 && id == 5)
            h.repetition_level_encoding = Encoding(read_i32(in, ft, "repetition_level_encoding"));
          else
            in.skip(ft);
        });
        break;
      case 8:  // DataPageHeaderV2
        expect_struct(in, t, "PageHeader.data_page_header_v2");
        h.has_type_header = h.has_type_header || h.type == PageType::data_page_v2;
        in.read_struct([&](int16_t f, ThriftType ft) {
          if (f == 1)
            h.num_values = read_i32(in, ft, "num_values");
          else if (f == 3)
            h.num_rows = read_i32(in, ft, "num_rows");
          else if (f == 4)
            h.encoding = Encoding(read_i32(in, ft, "encoding"));
          else if (f == 5)
            h.definition_levels_byte_length = read_i32(in, ft, "definition_levels_byte_length");
          else if (f == 6)
            h.repetition_levels_byte_length = read_i32(in, ft, "repetition_levels_byte_length");
          else if (f == 7)
            h.is_compressed = in.boolean(ft);
          else
            in.skip(ft);
        });
        break;
      default:
        in.skip(t);
    }
  });
  if (!has_type || !has_sizes[0] || !has_sizes[1]) in.fail("it lacks the page type or sizes");
  if (h.compressed_page_size < 0 || h.uncompressed_page_size < 0)
    in.fail(fmt::format("negative page size ({} compressed, {} uncompressed)", h.compressed_page_size,
                        h.uncompressed_page_size));
  consumed = in.position();
  return h;
}

}  // namespace verlpp::data::parquet
