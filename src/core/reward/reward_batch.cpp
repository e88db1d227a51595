// Batch reward functions (verl's batch manager): the registry a linking program fills, and the C
// symbol of a shared object (custom_reward_function.path / .name) called once per batch.
#include <verlpp/reward/reward_manager.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include "reward_library.hpp"

#include <fmt/format.h>

#include <memory>
#include <optional>

namespace verlpp::reward {

Registry<BatchRewardFn>& batch_reward_functions() {
  static Registry<BatchRewardFn> registry("batch reward function");
  return registry;
}

void register_batch_reward_function(const std::string& name, BatchRewardFn fn) {
  if (!fn) throw Error("register_batch_reward_function", fmt::format("empty function for '{}'", name));
  batch_reward_functions().add(name, std::move(fn));
}

std::vector<std::string> batch_reward_function_names() { return batch_reward_functions().names(); }

BatchRewardFn registered_batch_reward_function(const std::string& name) {
  if (std::optional<BatchRewardFn> fn = batch_reward_functions().find(name)) return std::move(*fn);
  const std::vector<std::string> names = batch_reward_function_names();
  throw Error(name,
              fmt::format("no batch reward function '{}' is registered (reward_manager = batch calls one function "
                          "with the whole batch); registered: {}; set custom_reward_function.path to a shared "
                          "object with that symbol, or register it (register_batch_reward_function)",
                          name, names.empty() ? "none" : join(names, ", ")));
}

BatchRewardFn batch_reward_function_from_library(const std::string& path, const std::string& symbol) {
  using CFn = int(int64_t, const char* const*, const char* const*, const char* const*, const char* const*, const char*,
                  double*, char*, size_t);
  std::shared_ptr<boost::dll::shared_library> lib = load_reward_library(path, symbol);
  CFn* fn = &lib->get<CFn>(symbol);
  const std::string where = path + ":" + symbol;
  return [lib, fn, where](const std::vector<RewardInput>& items, const nlohmann::json& kwargs) {
    const size_t n = items.size();
    // The strings the pointers point into, alive for the call.
    std::vector<std::string> truths(n), extras(n);
    std::vector<const char*> sources(n), responses(n), truth_ptrs(n), extra_ptrs(n);
    for (size_t i = 0; i < n; ++i) {
      truths[i] = items[i].ground_truth.dump();
      extras[i] = items[i].extra_info.dump();
      sources[i] = items[i].data_source.c_str();
      responses[i] = items[i].response.c_str();
      truth_ptrs[i] = truths[i].c_str();
      extra_ptrs[i] = extras[i].c_str();
    }
    const std::string kwargs_text = kwargs.dump();
    std::vector<double> scores(n, 0.0);
    char error[1024] = {0};
    const int rc = fn(int64_t(n), sources.data(), responses.data(), truth_ptrs.data(), extra_ptrs.data(),
                      kwargs_text.c_str(), scores.data(), error, sizeof(error));
    error[sizeof(error) - 1] = '\0';
    if (rc != 0)
      throw Error("reward " + where,
                  fmt::format("the batch function returned {}: {}", rc, error[0] ? error : "(no message)"));
    std::vector<RewardResult> out(n);
    for (size_t i = 0; i < n; ++i) out[i].score = scores[i];
    return out;
  };
}

}  // namespace verlpp::reward
