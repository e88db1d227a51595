// The error the parquet decoders raise: the message alone ("dictionary index 9 is out of range
// (the dictionary has 4 entries)"). The file reader catches it where it knows the file, row group
// and column and raises verlpp::Error naming them, so a message is never without its place.
// Internal to the data layer.
#pragma once

#include <stdexcept>
#include <string>

namespace verlpp::data::parquet {

struct ParquetFormatError : std::runtime_error {
  explicit ParquetFormatError(const std::string& message) : std::runtime_error(message) {}
};

[[noreturn]] inline void format_error(const std::string& message) { throw ParquetFormatError(message); }

}  // namespace verlpp::data::parquet
