// TensorBoard's event files (internal): TFRecord framing of Event protocol buffers, written and
// read here without the protobuf library. The writer needs four fields of three messages and
// the reader only the step of each record, so a hand encoding of the wire format is smaller
// than a protobuf dependency (and the generated code) in the library; the tests read the files
// with the protobuf library and TensorBoard itself.
//   TFRecord: uint64 length (little endian), uint32 masked CRC-32C of those 8 bytes, the data,
//             uint32 masked CRC-32C of the data.
//   Event:    1 wall_time (double), 2 step (int64), 3 file_version (string), 5 summary (Summary)
//   Summary:  1 value (repeated Value);  Value: 1 tag (string), 2 simple_value (float)
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace verlpp::tracking::tensorboard {

// CRC-32C (Castagnoli) of `size` bytes, and TFRecord's masking of it.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

// One record: the framing around `data`.
std::string frame_record(const std::string& data);

// The first Event of a file: wall_time and file_version "brain.Event:2".
std::string file_version_event(double wall_time);
// An Event at `step` with one simple_value per (tag, value).
std::string scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& values);

// The records of an event file's bytes: each record's [begin, end) in `bytes` and its Event's
// step (0 when the Event has none). Reading stops at the first record that is cut short or whose
// checksums do not match (a kill mid-write); `complete` says whether the whole file was read.
struct RecordSpan {
  size_t begin = 0, end = 0;
  int64_t step = 0;
};
struct RecordScan {
  std::vector<RecordSpan> records;
  bool complete = true;
};
RecordScan scan_records(const std::string& bytes);

}  // namespace verlpp::tracking::tensorboard
