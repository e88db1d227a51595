// Logger backends by name: the registry, the names verl accepts, and the backends opened for a run.
#include <verlpp/tracking/loggers.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include "logger_backends.hpp"

#include <algorithm>
#include <cstdlib>

namespace verlpp::tracking {
namespace {

using json = nlohmann::json;

// verl's Tracking backends that report to a service over the network (and "tracking", its old
// name for wandb): refused, since a run here must not depend on one or pretend to log to it.
const std::vector<std::string>& network_backends() {
  static const std::vector<std::string> names = {"wandb", "swanlab", "vemlp_wandb", "clearml", "trackio", "tracking"};
  return names;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

Registry<LoggerFactory>& logger_factories() {
  static Registry<LoggerFactory> registry("logger backend");
  return registry;
}

std::vector<std::string> local_logger_backends() { return logger_factories().names(); }

std::vector<std::string> logger_backends(const json& value, const std::string& key) {
  std::vector<std::string> given;
  if (value.is_null()) return {};
  if (value.is_string()) {
    given.push_back(value.get<std::string>());
  } else if (value.is_array()) {
    for (const json& v : value) {
      if (!v.is_string()) throw Error(key, fmt::format("every entry must be a backend name, got {}", v.dump()));
      given.push_back(v.get<std::string>());
    }
  } else {
    throw Error(key, fmt::format("must be a backend name or a list of them, got {}", value.dump()));
  }
  const std::vector<std::string> registered = local_logger_backends();
  const std::string local = join(registered, ", ");
  std::vector<std::string> out;
  for (const std::string& name : given) {
    if (contains(network_backends(), name))
      throw Error(key, fmt::format("'{}' reports to a network service, which verlpp does not do; the local "
                                   "backends are {} (tensorboard and mlflow write files their UIs read)",
                                   name, local));
    if (!contains(registered, name))
      throw Error(key, fmt::format("'{}' is not a logger backend; the valid ones are {}", name, local));
    if (!contains(out, name)) out.push_back(name);
  }
  return out;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

std::vector<std::pair<std::string, double>> numeric_metrics(const json& metrics) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [name, value] : metrics.items())
    if (name != "step" && value.is_number()) out.emplace_back(name, value.get<double>());
  return out;
}

std::vector<std::unique_ptr<MetricsLogger>> make_loggers(const std::vector<std::string>& names, const LoggerRun& run) {
  std::vector<std::unique_ptr<MetricsLogger>> out;
  for (const std::string& name : names) {
    if (contains(network_backends(), name)) logger_backends(json(name), "logger");  // the refusal, with its reason
    out.push_back(logger_factories().get(name, "logger")(run));
  }
  return out;
}

}  // namespace verlpp::tracking
