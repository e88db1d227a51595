// Thrift compact protocol reading (see parquet_thrift.hpp).
#include "parquet_thrift.hpp"

#include <fmt/format.h>

#include <cstring>

namespace verlpp::data::parquet {
namespace {
// Far deeper than FileMetaData nests (about 6); a corrupt file could claim any depth.
constexpr int kMaxDepth = 64;
}  // namespace

ThriftReader::ThriftReader(const uint8_t* data, size_t size, std::string what)
    : data_(data), size_(size), what_(std::move(what)) {}

void ThriftReader::fail(const std::string& detail) const {
  format_error(fmt::format("{} is malformed at byte {} of {}: {}", what_, pos_, size_, detail));
}

uint8_t ThriftReader::byte_at() {
  if (pos_ >= size_) fail("it ends in the middle of a value (cut short)");
  return data_[pos_++];
}

uint64_t ThriftReader::varint() {
  uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    const uint8_t b = byte_at();
    value |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return value;
  }
  fail("a variable-length integer is longer than 10 bytes");
}

int64_t ThriftReader::zigzag() {
  const uint64_t v = varint();
  return int64_t(v >> 1) ^ -int64_t(v & 1);
}

void ThriftReader::check_type(ThriftType type) const {
  if (uint8_t(type) > uint8_t(ThriftType::structure)) fail(fmt::format("unknown wire type {}", int(type)));
}

void ThriftReader::enter() {
  if (++depth_ > kMaxDepth) fail(fmt::format("structures nest deeper than {}", kMaxDepth));
}

std::pair<ThriftType, size_t> ThriftReader::list_header() {
  const uint8_t header = byte_at();
  const auto type = ThriftType(header & 0x0f);
  check_type(type);
  uint64_t count = header >> 4;
  if (count == 15) count = varint();
  // Every element takes at least one byte, so a count past the bytes left is a lie.
  if (count > size_ - pos_)
    fail(fmt::format("a list claims {} elements but {} bytes are left (cut short)", count, size_ - pos_));
  return {type, size_t(count)};
}

bool ThriftReader::boolean(ThriftType field_type) {
  if (field_type == ThriftType::bool_true) return true;
  if (field_type == ThriftType::bool_false) return false;
  fail(fmt::format("expected a bool field, found wire type {}", int(field_type)));
}

bool ThriftReader::list_boolean() { return byte_at() == 1; }

int32_t ThriftReader::i32() {
  const int64_t v = zigzag();
  if (v < INT32_MIN || v > INT32_MAX) fail(fmt::format("{} does not fit a 32-bit field", v));
  return int32_t(v);
}

int64_t ThriftReader::i64() { return zigzag(); }

double ThriftReader::dbl() {
  if (size_ - pos_ < 8) fail("a double is cut short");
  double v;
  std::memcpy(&v, data_ + pos_, 8);
  pos_ += 8;
  return v;
}

std::string ThriftReader::binary() {
  const uint64_t length = varint();
  if (length > size_ - pos_)
    fail(fmt::format("a string of {} bytes is declared but {} bytes are left (cut short)", length, size_ - pos_));
  std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(length));
  pos_ += size_t(length);
  return s;
}

void ThriftReader::skip(ThriftType type) {
  switch (type) {
    case ThriftType::bool_true:
    case ThriftType::bool_false:
      return;  // the value is the type itself
    case ThriftType::byte:
      byte_at();
      return;
    case ThriftType::i16:
    case ThriftType::i32:
    case ThriftType::i64:
      varint();
      return;
    case ThriftType::dbl:
      dbl();
      return;
    case ThriftType::binary:
      binary();
      return;
    case ThriftType::list:
    case ThriftType::set: {
      enter();
      auto [element, count] = list_header();
      for (size_t i = 0; i < count; ++i) {
        if (element == ThriftType::bool_true || element == ThriftType::bool_false)
          byte_at();
        else
          skip(element);
      }
      leave();
      return;
    }
    case ThriftType::map: {
      enter();
      const uint64_t count = varint();
      if (count > 0) {
        const uint8_t kinds = byte_at();
        const auto key = ThriftType(kinds >> 4), value = ThriftType(kinds & 0x0f);
        check_type(key);
        check_type(value);
        if (count > size_ - pos_)
          fail(fmt::format("a map claims {} entries but {} bytes are left (cut short)", count, size_ - pos_));
        for (uint64_t i = 0; i < count; ++i) {
          for (ThriftType t : {key, value}) {
            if (t == ThriftType::bool_true || t == ThriftType::bool_false)
              byte_at();
            else
              skip(t);
          }
        }
      }
      leave();
      return;
    }
    case ThriftType::structure:
      read_struct([this](int16_t, ThriftType t) { skip(t); });
      return;
    case ThriftType::stop:
      break;
  }
  fail(fmt::format("cannot skip a value of wire type {}", int(type)));
}

}  // namespace verlpp::data::parquet
