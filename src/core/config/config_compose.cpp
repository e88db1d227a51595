// Hydra composition in a config file, as far as verlpp carries it: a `defaults:` list may name
// verl's base trainer config (ppo_trainer, which is verlpp's built-in tree) and `_self_`; the
// `hydra:` section may hold `searchpath` (where Hydra would look for ppo_trainer). Anything else
// selects files or Hydra features verlpp does not have, and is refused by name.
#include "config_parts.hpp"

#include <verlpp/core/error.hpp>

#include <fmt/format.h>

namespace verlpp::config::detail {

namespace {

using json = nlohmann::json;

constexpr const char* kBaseConfig = "ppo_trainer";

}  // namespace

ConfigFileParts split_config_file(const json& given, const std::string& origin) {
  ConfigFileParts parts;
  parts.body = given;
  if (given.contains("defaults")) {
    const json& list = given.at("defaults");
    if (!list.is_array())
      throw Error(origin, fmt::format("'defaults' must be Hydra's defaults list, e.g. [{}, _self_]; got {}",
                                      kBaseConfig, list.dump()));
    int base_at = -1, self_at = -1;
    for (size_t i = 0; i < list.size(); ++i) {
      const json& entry = list[i];
      const std::string name = entry.is_string() ? entry.get<std::string>() : std::string();
      int* slot = name == kBaseConfig ? &base_at : name == "_self_" ? &self_at : nullptr;
      if (slot == nullptr)
        throw Error(origin,
                    fmt::format("the defaults entry {} is not supported: verlpp composes only verl's base trainer "
                                "config ({}, built in) and _self_; other configs and config groups (group: option, "
                                "group@package, override ...) select YAML files verlpp does not read: write their "
                                "keys into this file instead",
                                entry.dump(), kBaseConfig));
      if (*slot >= 0) throw Error(origin, fmt::format("the defaults list names {} twice", entry.dump()));
      *slot = int(i);
    }
    // Hydra appends _self_ when it is not listed: the file's own keys win.
    parts.base_after_self = base_at >= 0 && self_at >= 0 && self_at < base_at;
    parts.body.erase("defaults");
  }
  if (given.contains("hydra")) {
    const json& hydra = given.at("hydra");
    if (!hydra.is_object())
      throw Error(origin, fmt::format("'hydra' must be a section (hydra.searchpath), got {}", hydra.dump()));
    for (auto it = hydra.begin(); it != hydra.end(); ++it) {
      if (it.key() == "searchpath") {
        bool strings = it.value().is_array();
        for (const auto& p : it.value()) strings = strings && p.is_string();
        if (!strings)
          throw Error(origin, fmt::format("'hydra.searchpath' must be a list of paths, got {}", it.value().dump()));
        continue;  // where Hydra finds ppo_trainer.yaml; verlpp has it built in
      }
      throw Error(origin, fmt::format("'hydra.{}' is not supported: verlpp has no Hydra runtime (run folders, job "
                                      "logging, launchers, sweepers); only hydra.searchpath is accepted",
                                      it.key()));
    }
    parts.body.erase("hydra");
  }
  return parts;
}

}  // namespace verlpp::config::detail
