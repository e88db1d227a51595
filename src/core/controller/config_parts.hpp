// Internal pieces of Config shared by its source files (config.cpp, config_compose.cpp,
// config_resolve.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace verlpp::controller::detail {

// A config file with its Hydra composition taken out: the keys to merge, and whether verl's base
// config comes after them (`defaults: [_self_, ppo_trainer]`, so the base's values win).
struct ConfigFileParts {
  nlohmann::json body;
  bool base_after_self = false;
};
// Checks the `defaults:` list and the `hydra:` section of a parsed config file; errors name
// `origin` and the entry that verlpp does not support.
ConfigFileParts split_config_file(const nlohmann::json& given, const std::string& origin);

// The tree with every interpolation resolved (Config::resolve).
nlohmann::json resolve_config_tree(const nlohmann::json& tree);

}  // namespace verlpp::controller::detail
