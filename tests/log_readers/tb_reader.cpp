// See tb_reader.hpp.
#include "tb_reader.hpp"

#include "event.pb.h"

#include <algorithm>
#include <dirent.h>
#include <fstream>
#include <stdexcept>

namespace verlpp_test {
namespace {

// CRC-32C one bit at a time (the polynomial 0x82F63B78, reflected), then TFRecord's mask.
uint32_t masked_crc(const std::string& bytes, size_t begin, size_t size) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = begin; i < begin + size; ++i) {
    crc ^= static_cast<unsigned char>(bytes[i]);
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  crc = ~crc;
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

uint64_t little_endian(const std::string& bytes, size_t at, int size) {
  uint64_t v = 0;
  for (int i = size - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + size_t(i)]);
  return v;
}

}  // namespace

TbFile read_event_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  TbFile out;
  size_t at = 0;
  for (size_t record = 0; at < bytes.size(); ++record) {
    const std::string where = path + " record " + std::to_string(record);
    if (bytes.size() - at < 12) throw std::runtime_error(where + ": header cut short");
    const uint64_t length = little_endian(bytes, at, 8);
    if (uint32_t(little_endian(bytes, at + 8, 4)) != masked_crc(bytes, at, 8))
      throw std::runtime_error(where + ": length checksum mismatch");
    if (bytes.size() - at - 12 < length + 4) throw std::runtime_error(where + ": data cut short");
    if (uint32_t(little_endian(bytes, at + 12 + length, 4)) != masked_crc(bytes, at + 12, size_t(length)))
      throw std::runtime_error(where + ": data checksum mismatch");
    verlpp_test::tb::Event event;
    if (!event.ParseFromString(bytes.substr(at + 12, size_t(length))))
      throw std::runtime_error(where + ": not an Event protobuf");
    if (record == 0 && event.what_case() == verlpp_test::tb::Event::kFileVersion)
      out.file_version = event.file_version();
    if (event.has_summary())
      for (const auto& v : event.summary().value())
        if (v.value_case() == verlpp_test::tb::Summary::Value::kSimpleValue)
          out.scalars.push_back({event.step(), event.wall_time(), v.tag(), v.simple_value()});
    ++out.events;
    at += 12 + size_t(length) + 4;
  }
  return out;
}

std::vector<TbScalar> read_event_dir(const std::string& dir, size_t* files) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("events.out.tfevents.", 0) == 0) names.push_back(name);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  std::vector<TbScalar> all;
  for (const std::string& name : names) {
    const TbFile f = read_event_file(dir + "/" + name);
    if (f.file_version != "brain.Event:2")
      throw std::runtime_error(dir + "/" + name + ": first event has file_version '" + f.file_version + "'");
    all.insert(all.end(), f.scalars.begin(), f.scalars.end());
  }
  if (files != nullptr) *files = names.size();
  return all;
}

}  // namespace verlpp_test
