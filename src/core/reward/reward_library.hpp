// Loading a reward function's shared object (custom_reward_function.path) for the per-item
// scorer and the batch manager alike, with one set of errors.
#pragma once

#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include <boost/dll/shared_library.hpp>
#include <fmt/format.h>

#include <memory>
#include <string>

namespace verlpp::reward {

// The library at `path`, which must export `symbol`; errors are at `path` (the controller adds the
// key it came from).
inline std::shared_ptr<boost::dll::shared_library> load_reward_library(const std::string& path,
                                                                       const std::string& symbol) {
  const std::string& where = path;
  // verl's scripts name a Python file here; say what verlpp takes instead of the loader's
  // "invalid ELF header".
  if (ends_with(path, ".py"))
    throw Error(where,
                "is a Python file, and verlpp runs no Python: build the reward function as a C symbol in a shared "
                "library and name that library here (docs/training.md, Rewards), or register the function from "
                "C++ (register_reward_function)");
  std::shared_ptr<boost::dll::shared_library> lib;
  try {
    lib = std::make_shared<boost::dll::shared_library>(
        path, boost::dll::load_mode::rtld_lazy | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    throw Error(where, fmt::format("cannot be loaded: {}", e.what()));
  }
  if (!lib->has(symbol)) throw Error(where, fmt::format("has no symbol '{}' (custom_reward_function.name)", symbol));
  return lib;
}

}  // namespace verlpp::reward
