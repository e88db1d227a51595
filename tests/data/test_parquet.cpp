// The parquet reader against files written by two independent writers: arrow-rs (the npm
// package parquet-wasm, tables built with apache-arrow; write_fixtures.mjs) wrote
// tests/data/parquet_fixtures/files/, and pyarrow 25 with pandas 3 (what verl's preprocessing
// writes with; write_pyarrow_fixtures.py, run on the GPU host) wrote files/pyarrow/, each under
// every combination of codec (UNCOMPRESSED, SNAPPY, GZIP, ZSTD), dictionary encoding on and off
// and data page v1 and v2, with small pages and row groups of 7 rows, beside the JSON of the
// records written. Each file must read back as those records, field for field. Corrupt copies made here (truncated
// footer, bad magic, a page header cut short, a dictionary index out of range, a chunk past the end) and codecs verlpp
// lacks must each give their specific error, naming the file, row group and column.
#include <verlpp/core/error.hpp>
#include <verlpp/data/parquet.hpp>
#include <verlpp/data/records.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;
using Catch::Contains;
using json = nlohmann::json;

namespace {

const std::string kFixtures = std::string(VERLPP_SOURCE_DIR) + "/tests/data/parquet_fixtures/files/";

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

json read_json(const std::string& path) { return json::parse(read_bytes(path)); }

// The message of the Error that parsing `bytes` raises ("" when it reads).
std::string parse_error(const std::string& bytes, const std::string& name = "corrupt.parquet") {
  try {
    data::parse_parquet(bytes, name);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

uint32_t load_u32(const std::string& bytes, size_t at) {
  uint32_t v;
  std::memcpy(&v, bytes.data() + at, 4);
  return v;
}
void store_u32(std::string& bytes, size_t at, uint32_t v) { std::memcpy(&bytes[at], &v, 4); }

}  // namespace

// Checks every file of the manifest in `folder` against its table's records; returns the
// codec/dictionary/page-version combinations written with small pages.
static std::set<std::string> check_manifest(const std::string& folder) {
  const json manifest = read_json(folder + "manifest.json");
  std::map<std::string, json> expected;
  std::set<std::string> combinations;
  for (const json& entry : manifest) {
    const std::string table = entry["table"], file = entry["file"], codec = entry["codec"];
    if (codec == "LZ4_RAW" || codec == "BROTLI") continue;  // the refusal test's
    if (!expected.count(table)) {
      std::ifstream probe(folder + table + ".expected.json");
      if (!probe) continue;  // arith_*: checked against the demo's generator in tests/controller
      expected[table] = read_json(folder + table + ".expected.json");
    }
    INFO(folder << file << " " << entry.dump());
    const json& want = expected[table];
    const std::vector<json> rows = data::read_parquet(folder + file);
    REQUIRE(rows.size() == want.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      INFO("row " << i << "\n read:    " << rows[i].dump() << "\n written: " << want[i].dump());
      CHECK(rows[i] == want[i]);
    }
    const data::ParquetInfo info = data::read_parquet_info(folder + file);
    CHECK(info.num_rows == int64_t(want.size()));
    const int64_t group_rows = entry["row_group_rows"];
    if (group_rows > 0) CHECK(info.num_row_groups == (want.size() + size_t(group_rows) - 1) / size_t(group_rows));
    std::vector<std::string> keys;
    for (auto it = want[0].begin(); it != want[0].end(); ++it) keys.push_back(it.key());
    std::vector<std::string> fields = info.fields;
    std::sort(fields.begin(), fields.end());
    CHECK(fields == keys);
    if (entry["small_pages"].get<bool>())
      combinations.insert(table + "/" + codec + "/" + entry["dictionary"].dump() + "/" + entry["page_version"].dump());
  }
  return combinations;
}

TEST_CASE("parquet: every arrow-rs writer setting reads back the records written, field for field", "[parquet]") {
  // The manifest really holds every combination for both tables (a lost file fails here).
  CHECK(check_manifest(kFixtures).size() == 2 * 4 * 2 * 2);
}

TEST_CASE("parquet: every pyarrow and pandas writer setting reads back the records written", "[parquet]") {
  CHECK(check_manifest(kFixtures + "pyarrow/").size() == 2 * 4 * 2 * 2);
  // pandas' to_parquet with its defaults, and pyarrow's DELTA and BYTE_STREAM_SPLIT encodings.
  const json verl = read_json(kFixtures + "pyarrow/pyarrow_verl.expected.json");
  CHECK(data::read_parquet(kFixtures + "pyarrow/pyarrow_verl_pandas.parquet") == verl.get<std::vector<json>>());
  CHECK(data::read_parquet_info(kFixtures + "pyarrow/pyarrow_types_encodings.parquet").created_by ==
        "parquet-cpp-arrow version 25.0.1");
}

TEST_CASE("parquet: the first N rows stop early across row groups, and JSONL of the same data reads the same",
          "[parquet]") {
  const std::string file = kFixtures + "verl_zstd_dict_v2.parquet";  // row groups of 7 rows
  const json want = read_json(kFixtures + "verl.expected.json");
  const std::vector<json> ten = data::read_parquet(file, 10);
  REQUIRE(ten.size() == 10);
  for (size_t i = 0; i < 10; ++i) CHECK(ten[i] == want[i]);
  CHECK(data::read_parquet(file, 1000).size() == want.size());

  const std::string jsonl = "/tmp/verlpp-parquet-test-verl.jsonl";
  {
    std::ofstream out(jsonl);
    for (const json& row : want) out << row.dump() << "\n";
  }
  const std::vector<data::DataRecord> from_jsonl = data::read_data_records(jsonl);
  const std::vector<data::DataRecord> from_parquet = data::read_data_records(file);
  REQUIRE(from_jsonl.size() == from_parquet.size());
  for (size_t i = 0; i < from_jsonl.size(); ++i) {
    CHECK(from_jsonl[i].row == from_parquet[i].row);
    CHECK(from_jsonl[i].row.dump() == from_parquet[i].row.dump());  // the same text, as `data head` prints
  }
  CHECK(from_parquet[3].origin == file + ", row 3");
  CHECK(from_jsonl[3].origin == jsonl + ":4");
  CHECK(data::read_data_records(jsonl, 2).size() == 2);
  CHECK(data::is_parquet_dataset(file));
  CHECK_FALSE(data::is_parquet_dataset(jsonl));
  std::remove(jsonl.c_str());
}

TEST_CASE("parquet: the footer's schema and chunks describe the file", "[parquet]") {
  const data::ParquetInfo info = data::read_parquet_info(kFixtures + "verl_default.parquet");
  CHECK(info.created_by == "verlpp fixtures (parquet-wasm 0.8.0)");
  CHECK(info.num_row_groups == 1);
  std::map<std::string, data::ParquetColumn> columns;
  for (const auto& c : info.columns) columns[c.path] = c;
  REQUIRE(columns.count("prompt.list.element.content"));
  const data::ParquetColumn& content = columns["prompt.list.element.content"];
  CHECK(content.physical_type == "BYTE_ARRAY");
  CHECK(content.logical_type == "STRING");
  // optional prompt, repeated list, optional element, optional content.
  CHECK(content.max_definition_level == 4);
  CHECK(content.max_repetition_level == 1);
  CHECK(columns["extra_info.index"].physical_type == "INT64");
  CHECK(columns["extra_info.index"].max_repetition_level == 0);
  CHECK(info.chunks.size() == info.columns.size());
  for (const auto& chunk : info.chunks) CHECK(chunk.codec == "SNAPPY");
}

TEST_CASE("parquet: a corrupt file is an error naming what is wrong and where", "[parquet]") {
  const std::string good = read_bytes(kFixtures + "verl_default.parquet");
  REQUIRE(parse_error(good).empty());
  const uint32_t footer = load_u32(good, good.size() - 8);
  const size_t footer_start = good.size() - 8 - footer;

  SECTION("bad magic at the start") {
    std::string bad = good;
    bad[3] = '2';
    CHECK(parse_error(bad) == "corrupt.parquet: is not a parquet file: it does not begin with the magic bytes 'PAR1'");
  }
  SECTION("a file cut anywhere loses its closing magic") {
    for (size_t keep : {good.size() - 1, good.size() - 4, footer_start + 10, size_t(100)})
      CHECK(parse_error(good.substr(0, keep)) ==
            "corrupt.parquet: does not end with parquet's magic bytes 'PAR1': the file is truncated or not parquet");
    CHECK(parse_error("PAR1") ==
          "corrupt.parquet: is not a parquet file: 4 bytes, shorter than parquet's framing (12 bytes)");
  }
  SECTION("a footer length past the file") {
    std::string bad = good;
    store_u32(bad, bad.size() - 8, uint32_t(good.size()));
    CHECK(parse_error(bad) == fmt::format("corrupt.parquet: the footer length {} is more than the {} bytes before it: "
                                          "the file is truncated",
                                          good.size(), good.size() - 12));
  }
  SECTION("a truncated footer: its Thrift ends before its last field") {
    // The footer's first half, framed as a whole footer: the decoder runs out of bytes.
    const uint32_t half = footer / 2;
    std::string bad = good.substr(0, footer_start + half);
    bad += std::string(4, '\0') + "PAR1";
    store_u32(bad, bad.size() - 8, half);
    CHECK_THAT(parse_error(bad), Contains("corrupt.parquet: the footer (FileMetaData) is malformed at byte") &&
                                     Contains(fmt::format("of {}: ", half)) && Contains("cut short"));
  }
  SECTION("column chunks past the end of the data") {
    // The first half of the data pages dropped: the footer's offsets point past what is left.
    std::string bad = good.substr(0, footer_start / 2) + good.substr(footer_start);
    const std::string message = parse_error(bad);
    CHECK_THAT(message, Contains("corrupt.parquet: row group 0, column ") &&
                            Contains("outside the file's data (bytes 4 to " + std::to_string(footer_start / 2) + ")"));
  }
}

TEST_CASE("parquet: a page header cut short and a dictionary index out of range", "[parquet]") {
  const std::string good = read_bytes(kFixtures + "letters.parquet");
  REQUIRE(data::read_parquet(kFixtures + "letters.parquet") == read_json(kFixtures + "letters.expected.json"));
  const data::ParquetInfo info = data::read_parquet_info(kFixtures + "letters.parquet");
  REQUIRE(info.chunks.size() == 1);
  const data::ParquetChunk chunk = info.chunks[0];
  REQUIRE(chunk.codec == "UNCOMPRESSED");
  REQUIRE(chunk.data_page_offset > chunk.offset);  // a dictionary page, then the data page
  const size_t end = size_t(chunk.offset + chunk.compressed_size);

  SECTION("a dictionary index out of range") {
    // The data page's body ends the chunk: bit width 1, one bit-packed group (header 0x03) of
    // the indices 0,1,0,1,... (0xaa). Checked here, so the edit below hits what it claims.
    REQUIRE(good.substr(end - 3, 3) == std::string("\x01\x03\xaa", 3));
    std::string bad = good;
    // Bit width 8, an RLE run (header 8 << 1) of the index 5: in range for the encoding, past
    // the dictionary's two entries.
    bad.replace(end - 3, 3, std::string("\x08\x10\x05", 3));
    CHECK(parse_error(bad, "letters.parquet") ==
          fmt::format("letters.parquet: row group 0, column letter: page 1 (at byte {}): dictionary index 5 (value 0 "
                      "of the page) is out of range: the dictionary has 2 entries",
                      chunk.data_page_offset));
  }
  SECTION("a page header cut short") {
    // From the data page on, the chunk is refilled with unknown i32 fields (field 40 = 1) that
    // never reach the header's stop byte: the header runs past the end of its chunk.
    std::string bad = good;
    for (size_t i = size_t(chunk.data_page_offset); i < end; ++i)
      bad[i] = "\x05\x50\x02"[(i - chunk.data_page_offset) % 3];
    const size_t length = end - size_t(chunk.data_page_offset);
    CHECK(parse_error(bad, "letters.parquet") ==
          fmt::format("letters.parquet: row group 0, column letter: page 1 (at byte {}): a page header is malformed "
                      "at byte {} of {}: it ends in the middle of a value (cut short)",
                      chunk.data_page_offset, length, length));
  }
  SECTION("a page that declares more bytes than its chunk holds") {
    // The dictionary page's header begins: field 1 (type) = 2, field 2 (uncompressed size),
    // field 3 (compressed size), each 0x15 and a one-byte zigzag varint. A compressed size of 63
    // (0x7e) is more than the chunk has after the header.
    const size_t at = size_t(chunk.offset);
    REQUIRE(good.substr(at, 3) == "\x15\x04\x15");
    REQUIRE(good[at + 4] == '\x15');
    std::string bad = good;
    bad[at + 5] = '\x7e';
    CHECK_THAT(
        parse_error(bad, "letters.parquet"),
        Contains("letters.parquet: row group 0, column letter: page 0 (at byte 4): the page declares 63 bytes, ") &&
            Contains(" are left in the column chunk"));
  }
}

TEST_CASE("parquet: codecs verlpp does not have are refused by name", "[parquet]") {
  for (const char* codec : {"lz4_raw", "brotli"}) {
    const std::string file = kFixtures + "verl_" + codec + ".parquet";
    std::string upper = codec;
    for (char& c : upper) c = char(std::toupper(c));
    CHECK_THROWS_WITH(data::read_parquet(file),
                      Contains(file + ": row group 0, column data_source: compression codec " + upper +
                               " is not supported (verlpp reads UNCOMPRESSED, SNAPPY, GZIP and ZSTD"));
  }
}

TEST_CASE("parquet: every truncation and byte flip of a file reads or is refused with an Error", "[parquet]") {
  // Not a fuzzer (tests/fuzz has one): a deterministic sweep that every prefix and a spread of
  // single-byte edits end in rows or in verlpp::Error, never another exception.
  const std::string good = read_bytes(kFixtures + "letters.parquet");
  for (size_t keep = 0; keep < good.size(); ++keep) CHECK_FALSE(parse_error(good.substr(0, keep)).empty());
  for (size_t at = 0; at < good.size(); ++at)
    for (uint8_t flip : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
      std::string bad = good;
      bad[at] = char(uint8_t(bad[at]) ^ flip);
      CHECK_NOTHROW(parse_error(bad));
    }
}
