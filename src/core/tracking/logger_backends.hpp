// What the backends behind make_loggers share (internal). Each is one file that registers itself
// in logger_factories(): logger_console.cpp, logger_file.cpp, logger_tensorboard.cpp,
// logger_mlflow.cpp.
#pragma once

#include <verlpp/tracking/loggers.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace verlpp::tracking {

// The numbers of a metrics object in its order, "step" and non-numbers left out (what verl's
// scalar backends can take).
std::vector<std::pair<std::string, double>> numeric_metrics(const nlohmann::json& metrics);

// The environment variable `name`, or `fallback` when it is unset or empty.
std::string env_or(const char* name, const std::string& fallback);

}  // namespace verlpp::tracking
