// The parts of parquet's Thrift metadata (parquet.thrift) that reading rows needs: the footer's
// FileMetaData (schema, row groups, column chunks) and each page's PageHeader. Fields the reader
// does not use (statistics, indexes, bloom filters, encryption) are skipped. Numbers are the
// format's own enum values. Internal to the data layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace verlpp::data::parquet {

enum class PhysicalType : int32_t {
  boolean = 0,
  int32 = 1,
  int64 = 2,
  int96 = 3,
  float32 = 4,
  float64 = 5,
  byte_array = 6,
  fixed_len_byte_array = 7
};
enum class Repetition : int32_t { required = 0, optional = 1, repeated = 2 };
enum class Codec : int32_t {
  uncompressed = 0,
  snappy = 1,
  gzip = 2,
  lzo = 3,
  brotli = 4,
  lz4 = 5,
  zstd = 6,
  lz4_raw = 7
};
enum class Encoding : int32_t {
  plain = 0,
  plain_dictionary = 2,
  rle = 3,
  bit_packed = 4,
  delta_binary_packed = 5,
  delta_length_byte_array = 6,
  delta_byte_array = 7,
  rle_dictionary = 8,
  byte_stream_split = 9
};
enum class PageType : int32_t { data_page = 0, index_page = 1, dictionary_page = 2, data_page_v2 = 3 };

// How a column's values are to be read beyond their physical type (LogicalType, or the older
// ConvertedType when a writer gave only that).
enum class ValueKind {
  plain,         // the physical type as it is
  text,          // STRING / UTF8 / ENUM / JSON: UTF-8 text
  list,          // LIST group
  map,           // MAP / MAP_KEY_VALUE group
  unsigned_int,  // INTEGER(unsigned) / UINT_*: the bits as an unsigned number
  decimal,       // DECIMAL(scale) on INT32/INT64
  unsupported,   // a logical type verlpp cannot render faithfully (FLOAT16, INTERVAL, ...)
};

std::string physical_type_name(PhysicalType type);
std::string codec_name(Codec codec);
std::string encoding_name(Encoding encoding);

// One SchemaElement of the flattened, depth-first schema list.
struct SchemaElement {
  std::string name;
  std::optional<PhysicalType> type;  // set on leaves only
  int32_t type_length = 0;           // FIXED_LEN_BYTE_ARRAY width
  Repetition repetition = Repetition::required;
  int32_t num_children = 0;
  ValueKind kind = ValueKind::plain;
  int32_t scale = 0;         // DECIMAL
  std::string logical_name;  // for messages ("FLOAT16")
};

struct ColumnChunkMeta {
  PhysicalType type = PhysicalType::int32;
  std::vector<std::string> path;  // path_in_schema
  Codec codec = Codec::uncompressed;
  int64_t num_values = 0;
  int64_t total_compressed_size = 0;
  int64_t data_page_offset = 0;
  std::optional<int64_t> dictionary_page_offset;
  bool has_meta_data = false;
  std::string file_path;  // set when the chunk lives in another file (not supported)
};

// Where a chunk begins: its dictionary page when it has one, else its first data page. (Some
// writers put 0 in dictionary_page_offset for "none".)
int64_t chunk_offset(const ColumnChunkMeta& chunk);

struct RowGroupMeta {
  std::vector<ColumnChunkMeta> columns;
  int64_t num_rows = 0;
};

struct FileMeta {
  int32_t version = 0;
  std::vector<SchemaElement> schema;
  int64_t num_rows = 0;
  std::vector<RowGroupMeta> row_groups;
  std::string created_by;
};

struct PageHeader {
  PageType type = PageType::data_page;
  int32_t uncompressed_page_size = -1;
  int32_t compressed_page_size = -1;
  // DataPageHeader / DataPageHeaderV2 / DictionaryPageHeader, whichever the type has.
  int32_t num_values = -1;
  Encoding encoding = Encoding::plain;
  Encoding definition_level_encoding = Encoding::rle;
  Encoding repetition_level_encoding = Encoding::rle;
  int32_t num_rows = -1;                      // v2
  int32_t definition_levels_byte_length = 0;  // v2
  int32_t repetition_levels_byte_length = 0;  // v2
  bool is_compressed = true;                  // v2
  bool has_type_header = false;               // the header matching `type` was present
};

// Decodes the footer (the Thrift bytes between the last row group and the length word).
FileMeta parse_file_meta(const uint8_t* data, size_t size);
// Decodes one page header at data[0, size); `consumed` is set to its length in bytes.
PageHeader parse_page_header(const uint8_t* data, size_t size, size_t& consumed);

}  // namespace verlpp::data::parquet
