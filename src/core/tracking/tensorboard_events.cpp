// TFRecord framing and the few Event fields the TensorBoard logger writes (see the header for
// why they are encoded by hand).
#include "tensorboard_events.hpp"

#include <array>
#include <cstring>

namespace verlpp::tracking::tensorboard {
namespace {

// The reflected CRC-32C table (polynomial 0x82F63B78), one entry per byte value.
std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(uint8_t(v)));
}

// Little-endian bytes of a trivially copyable value (the wire's fixed64/fixed32 and TFRecord's
// integers are little endian; so is every machine verlpp runs on, which this asserts).
template <class T>
void put_le(std::string& out, T v) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  uint8_t bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  const uint16_t probe = 1;
  if (*reinterpret_cast<const uint8_t*>(&probe) != 1)
    for (size_t i = 0; i < sizeof(T) / 2; ++i) std::swap(bytes[i], bytes[sizeof(T) - 1 - i]);
  out.append(reinterpret_cast<const char*>(bytes), sizeof(T));
}

void put_tag(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (field << 3) | wire_type); }

void put_bytes_field(std::string& out, uint32_t field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time) {
  std::string e;
  put_tag(e, 1, 1);  // wall_time: fixed64 (double)
  put_le(e, wall_time);
  return e;
}

uint64_t get_le64(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | uint8_t(s[at + size_t(i)]);
  return v;
}
uint32_t get_le32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | uint8_t(s[at + size_t(i)]);
  return v;
}

bool get_varint(const std::string& s, size_t& at, size_t end, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && at < end; shift += 7) {
    const uint8_t b = uint8_t(s[at++]);
    v |= uint64_t(b & 0x7F) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// Field 2 (step) of the Event in s[begin, end); 0 when absent or unreadable.
int64_t event_step(const std::string& s, size_t at, size_t end) {
  int64_t step = 0;
  while (at < end) {
    uint64_t key = 0, v = 0;
    if (!get_varint(s, at, end, key)) return step;
    switch (key & 7) {
      case 0:
        if (!get_varint(s, at, end, v)) return step;
        if ((key >> 3) == 2) step = int64_t(v);
        break;
      case 1:
        at += 8;
        break;
      case 2:
        if (!get_varint(s, at, end, v) || v > end - at) return step;
        at += size_t(v);
        break;
      case 5:
        at += 4;
        break;
      default:
        return step;
    }
  }
  return step;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string frame_record(const std::string& data) {
  std::string out, length;
  put_le(length, uint64_t(data.size()));
  out += length;
  put_le(out, masked_crc32c(length.data(), length.size()));
  out += data;
  put_le(out, masked_crc32c(data.data(), data.size()));
  return out;
}

std::string file_version_event(double wall_time) {
  std::string e = event_header(wall_time);
  put_bytes_field(e, 3, "brain.Event:2");
  return e;
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& values) {
  std::string e = event_header(wall_time);
  put_tag(e, 2, 0);
  put_varint(e, uint64_t(step));
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes_field(v, 1, tag);
    put_tag(v, 2, 5);  // simple_value: fixed32 (float)
    put_le(v, value);
    put_bytes_field(summary, 1, v);
  }
  put_bytes_field(e, 5, summary);
  return e;
}

RecordScan scan_records(const std::string& bytes) {
  RecordScan scan;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 16) {  // the framing of an empty record is 16 bytes
      scan.complete = false;
      break;
    }
    const uint64_t length = get_le64(bytes, at);
    if (get_le32(bytes, at + 8) != masked_crc32c(bytes.data() + at, 8) || length > bytes.size() - at - 16) {
      scan.complete = false;
      break;
    }
    const size_t data = at + 12, end = data + size_t(length) + 4;
    if (get_le32(bytes, data + size_t(length)) != masked_crc32c(bytes.data() + data, size_t(length))) {
      scan.complete = false;
      break;
    }
    scan.records.push_back({at, end, event_step(bytes, data, data + size_t(length))});
    at = end;
  }
  return scan;
}

}  // namespace verlpp::tracking::tensorboard
