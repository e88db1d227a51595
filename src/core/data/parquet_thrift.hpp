// The Thrift compact protocol, read side only: what a parquet footer (FileMetaData) and a page
// header (PageHeader) are encoded in. Hand-written because the whole need is a few dozen lines
// and Debian's libthrift would bring a code generator and a runtime for two structs. Every read
// is bounded by the buffer it was given; unknown fields are skipped by their wire type, so files
// from newer writers (extra fields) read as well as older ones. Internal to the data layer.
#pragma once

#include "parquet_error.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace verlpp::data::parquet {

// Wire types of the compact protocol.
enum class ThriftType : uint8_t {
  stop = 0,
  bool_true = 1,
  bool_false = 2,
  byte = 3,
  i16 = 4,
  i32 = 5,
  i64 = 6,
  dbl = 7,
  binary = 8,
  list = 9,
  set = 10,
  map = 11,
  structure = 12,
};

class ThriftReader {
 public:
  // Reads from data[0, size); `what` names the structure in errors ("the footer", "a page header").
  ThriftReader(const uint8_t* data, size_t size, std::string what);

  // Bytes consumed so far.
  size_t position() const { return pos_; }

  // Reads one struct: calls on_field(id, type) for each field, which must consume the value
  // (with the readers below, or skip(type)). Returns after the struct's stop byte.
  template <class OnField>
  void read_struct(OnField&& on_field) {
    enter();
    int16_t last_id = 0;
    for (;;) {
      const uint8_t header = byte_at();
      const auto type = ThriftType(header & 0x0f);
      if (type == ThriftType::stop) break;
      const int delta = header >> 4;
      const int16_t id = delta ? int16_t(last_id + delta) : int16_t(zigzag());
      check_type(type);
      on_field(id, type);
      last_id = id;
    }
    leave();
  }
  // Reads a list (or set) header: element type and count (bounded by the bytes left).
  std::pair<ThriftType, size_t> list_header();

  bool boolean(ThriftType field_type);  // a struct field's bool (the value is in its type)
  bool list_boolean();                  // a list element's bool (one byte)
  int32_t i32();
  int64_t i64();
  double dbl();
  std::string binary();
  // Skips one value of the given wire type, nested structures included.
  void skip(ThriftType type);

  // Throws ParquetFormatError "<what> is cut short / malformed: <detail>" at the current position.
  [[noreturn]] void fail(const std::string& detail) const;

 private:
  uint8_t byte_at();
  uint64_t varint();
  int64_t zigzag();
  void check_type(ThriftType type) const;
  void enter();
  void leave() { --depth_; }

  const uint8_t* data_;
  size_t size_, pos_ = 0;
  std::string what_;
  int depth_ = 0;
};

}  // namespace verlpp::data::parquet
