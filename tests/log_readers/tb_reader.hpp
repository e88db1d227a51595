// The tests' reader of TensorBoard event files, independent of verlpp's writer: TFRecord
// framing checked with a bit-at-a-time CRC-32C (not the writer's table), each record parsed by
// the protobuf library from event.proto.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace verlpp_test {

struct TbScalar {
  int64_t step = 0;
  double wall_time = 0;
  std::string tag;
  float value = 0;
};

struct TbFile {
  std::string file_version;       // the first event's (empty if the first event has none)
  std::vector<TbScalar> scalars;  // every simple_value, in file order
  size_t events = 0;
};

// Reads one event file; throws std::runtime_error naming the file and the record on a bad
// length, a checksum mismatch, a cut record or an Event protobuf cannot parse.
TbFile read_event_file(const std::string& path);

// Every events.out.tfevents.* file of `dir`, in name order (as TensorBoard reads them), merged.
std::vector<TbScalar> read_event_dir(const std::string& dir, size_t* files = nullptr);

}  // namespace verlpp_test
