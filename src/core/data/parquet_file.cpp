// The parquet file reader (include/verlpp/data/parquet.hpp): the file's framing (magic bytes,
// footer length, footer), then each row group's column chunks decoded and assembled into rows.
// Decoders raise ParquetFormatError with what is wrong; this file adds where (the file, row group
// and column) and raises verlpp::Error.
#include "../util/input_file.hpp"
#include "parquet_assembly.hpp"
#include "parquet_column.hpp"
#include "parquet_error.hpp"
#include "parquet_metadata.hpp"
#include "parquet_schema.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/data/parquet.hpp>

#include <fmt/format.h>

#include <cstring>
#include <fstream>

namespace verlpp::data {
namespace {

using json = nlohmann::json;
using namespace parquet;

constexpr char kMagic[] = "PAR1";

struct OpenedFile {
  FileMeta meta;
  Schema schema;
  size_t data_end = 0;  // where the footer begins
};

// Checks the framing and decodes the footer and schema.
OpenedFile open_file(const std::string& bytes, const std::string& name) {
  const size_t size = bytes.size();
  if (size < 12)
    throw Error(name, fmt::format("is not a parquet file: {} bytes, shorter than parquet's framing (12 bytes)", size));
  if (std::memcmp(bytes.data(), "PARE", 4) == 0)
    throw Error(name, "is an encrypted parquet file (magic 'PARE'), which verlpp does not read");
  if (std::memcmp(bytes.data(), kMagic, 4) != 0)
    throw Error(name, "is not a parquet file: it does not begin with the magic bytes 'PAR1'");
  if (std::memcmp(bytes.data() + size - 4, kMagic, 4) != 0)
    throw Error(name, "does not end with parquet's magic bytes 'PAR1': the file is truncated or not parquet");
  uint32_t footer_length;
  std::memcpy(&footer_length, bytes.data() + size - 8, 4);
  if (footer_length > size - 12)
    throw Error(name, fmt::format("the footer length {} is more than the {} bytes before it: the file is truncated",
                                  footer_length, size - 12));
  OpenedFile f;
  f.data_end = size - 8 - footer_length;
  try {
    f.meta = parse_file_meta(reinterpret_cast<const uint8_t*>(bytes.data()) + f.data_end, footer_length);
    f.schema = build_schema(f.meta.schema);
  } catch (const ParquetFormatError& e) {
    throw Error(name, e.what());
  }
  int64_t rows = 0;
  for (const RowGroupMeta& g : f.meta.row_groups) {
    if (g.num_rows < 0 || g.num_rows > INT64_MAX - rows)
      throw Error(name, fmt::format("a row group claims {} rows", g.num_rows));
    rows += g.num_rows;
  }
  if (rows != f.meta.num_rows)
    throw Error(name, fmt::format("the row groups hold {} rows but the footer says {}", rows, f.meta.num_rows));
  return f;
}

std::vector<ColumnData> read_row_group(const std::string& bytes, const OpenedFile& f, size_t g,
                                       const std::string& name) {
  const RowGroupMeta& group = f.meta.row_groups[g];
  const Schema& schema = f.schema;
  if (group.columns.size() != schema.leaves.size())
    throw Error(fmt::format("{}: row group {}", name, g), fmt::format("it has {} column chunks, the schema {} columns",
                                                                      group.columns.size(), schema.leaves.size()));
  std::vector<ColumnData> columns;
  for (size_t c = 0; c < schema.leaves.size(); ++c) {
    const std::string where = fmt::format("{}: row group {}, column {}", name, g, schema.leaf_name(c));
    const ColumnChunkMeta& meta = group.columns[c];
    const SchemaNode& node = schema.nodes[schema.leaves[c]];
    if (!meta.file_path.empty())
      throw Error(where, fmt::format("the column chunk lives in another file ('{}'), which verlpp does not read",
                                     meta.file_path));
    if (!meta.has_meta_data) throw Error(where, "the column chunk has no metadata");
    if (meta.path != schema.leaf_path(c)) {
      std::string chunk_path;
      for (const std::string& part : meta.path) chunk_path += (chunk_path.empty() ? "" : ".") + part;
      throw Error(where, fmt::format("the column chunk is for '{}', not the schema's column {}", chunk_path, c));
    }
    if (meta.type != node.type.physical)
      throw Error(where, fmt::format("the column chunk holds {} values, the schema says {}",
                                     physical_type_name(meta.type), physical_type_name(node.type.physical)));
    try {
      columns.push_back(read_column_chunk(reinterpret_cast<const uint8_t*>(bytes.data()), f.data_end, meta, node,
                                          node.def_level, node.rep_level));
      // Every row has at least one level entry in every column, so this bounds the rows.
      if (group.num_rows > int64_t(columns.back().def.size()))
        format_error(fmt::format("the row group claims {} rows but the column holds {} entries", group.num_rows,
                                 columns.back().def.size()));
    } catch (const ParquetFormatError& e) {
      throw Error(where, e.what());
    }
  }
  return columns;
}

}  // namespace

bool is_parquet_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, kMagic, 4) == 0;
}

ParquetInfo read_parquet_info(const std::string& path) {
  const std::string bytes = files::read_input(path, "parquet file");
  const OpenedFile f = open_file(bytes, path);
  ParquetInfo info;
  info.num_rows = f.meta.num_rows;
  info.num_row_groups = f.meta.row_groups.size();
  info.created_by = f.meta.created_by;
  for (size_t c = 0; c < f.schema.leaves.size(); ++c) {
    const SchemaNode& node = f.schema.nodes[f.schema.leaves[c]];
    info.columns.push_back({f.schema.leaf_name(c), physical_type_name(node.type.physical), node.type.logical_name,
                            node.def_level, node.rep_level});
  }
  for (size_t child : f.schema.nodes[0].children) info.fields.push_back(f.schema.nodes[child].name);
  for (size_t g = 0; g < f.meta.row_groups.size(); ++g) {
    const RowGroupMeta& group = f.meta.row_groups[g];
    for (size_t c = 0; c < group.columns.size(); ++c) {
      const ColumnChunkMeta& meta = group.columns[c];
      std::string column;
      for (const std::string& part : meta.path) column += (column.empty() ? "" : ".") + part;
      info.chunks.push_back({g, column, codec_name(meta.codec), meta.num_values, chunk_offset(meta),
                             meta.data_page_offset, meta.total_compressed_size});
    }
  }
  return info;
}

std::vector<json> parse_parquet(const std::string& bytes, const std::string& name, size_t max_rows) {
  const OpenedFile f = open_file(bytes, name);
  std::vector<json> rows;
  for (size_t g = 0; g < f.meta.row_groups.size(); ++g) {
    if (max_rows > 0 && rows.size() >= max_rows) break;
    const std::vector<ColumnData> columns = read_row_group(bytes, f, g, name);
    try {
      assemble_rows(f.schema, columns, size_t(f.meta.row_groups[g].num_rows), rows);
    } catch (const ParquetFormatError& e) {
      throw Error(fmt::format("{}: row group {}", name, g), e.what());
    }
  }
  if (max_rows > 0 && rows.size() > max_rows) rows.resize(max_rows);
  return rows;
}

std::vector<json> read_parquet(const std::string& path, size_t max_rows) {
  return parse_parquet(files::read_input(path, "parquet file"), path, max_rows);
}

}  // namespace verlpp::data
