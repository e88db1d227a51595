// Environment switches: the VERLPP_* variables that turn a path on or off for side-by-side
// timing and tests (e.g. VERLPP_KERNEL_STREAMS=0). Read at each call, not cached, because tests set
// and unset them between cases.
#pragma once

#include <cstdlib>
#include <cstring>

namespace verlpp {

// Whether environment variable `name` is set to exactly `value`.
inline bool env_equals(const char* name, const char* value) {
  const char* set = std::getenv(name);
  return set != nullptr && std::strcmp(set, value) == 0;
}

}  // namespace verlpp
