// "[2, 3]" for a tensor shape, for error messages (fmt cannot format IntArrayRef without
// fmt/ranges.h, which verlpp never includes). Internal to the model layer.
#pragma once

#include <verlpp/core/strings.hpp>

#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <string>
#include <vector>

namespace verlpp::model {

inline std::string shape_string(c10::IntArrayRef shape) {
  std::vector<std::string> parts;
  for (int64_t d : shape) parts.push_back(std::to_string(d));
  return "[" + join(parts, ", ") + "]";
}

}  // namespace verlpp::model
