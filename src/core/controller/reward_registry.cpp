// The reward registry (data_source -> function, with the built-ins) and RewardScorer, which
// checks every data source up front and can route everything to a user's shared object.
#include <verlpp/controller/reward.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include <boost/dll/shared_library.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

namespace verlpp::controller {
namespace {

// A row without reward_model.ground_truth (null) is scored against an empty answer.
std::string ground_truth_text(const nlohmann::json& g) {
  if (g.is_null()) return {};
  return g.is_string() ? g.get<std::string>() : g.dump();
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, RewardFn> functions;
  Registry() {
    // verl's default_compute_score names the source "openai/gsm8k"; "gsm8k" is the short form.
    for (const char* name : {"gsm8k", "openai/gsm8k"})
      functions[name] = [](const RewardInput& in) {
        return rewards::gsm8k(in.response, ground_truth_text(in.ground_truth));
      };
    // verl routes these MATH-style sources to the same rule.
    for (const char* name : {"math", "lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"})
      functions[name] = [](const RewardInput& in) {
        return rewards::math(in.response, ground_truth_text(in.ground_truth));
      };
    functions["arith"] = [](const RewardInput& in) {
      return rewards::arith(in.response, ground_truth_text(in.ground_truth));
    };
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_reward_function(const std::string& data_source, RewardFn fn) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!fn) throw Error("register_reward_function", fmt::format("empty function for '{}'", data_source));
  if (!r.functions.emplace(data_source, std::move(fn)).second)
    throw Error("register_reward_function",
                fmt::format("a reward function for '{}' is already registered", data_source));
}

std::vector<std::string> reward_function_names() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, fn] : r.functions) names.push_back(name);
  return names;
}

RewardScorer RewardScorer::from_library(const std::string& path, const std::string& symbol) {
  using CFn = double(const char*, const char*, const char*, const char*);
  std::shared_ptr<boost::dll::shared_library> lib;
  try {
    lib = std::make_shared<boost::dll::shared_library>(
        path, boost::dll::load_mode::rtld_lazy | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    throw Error("custom_reward_function.path=" + path, fmt::format("cannot be loaded: {}", e.what()));
  }
  if (!lib->has(symbol))
    throw Error("custom_reward_function.path=" + path,
                fmt::format("has no symbol '{}' (custom_reward_function.name)", symbol));
  CFn* fn = &lib->get<CFn>(symbol);
  RewardScorer s;
  s.custom_where_ = path + ":" + symbol;
  s.custom_ = [lib, fn](const RewardInput& in) {
    std::string truth = in.ground_truth.dump(), extra = in.extra_info.dump();
    return fn(in.data_source.c_str(), in.response.c_str(), truth.c_str(), extra.c_str());
  };
  return s;
}

void RewardScorer::check_data_sources(const std::vector<std::string>& data_sources) const {
  if (custom_) return;
  auto names = reward_function_names();
  for (const auto& source : data_sources)
    if (std::find(names.begin(), names.end(), source) == names.end())
      throw Error("reward",
                  fmt::format("no reward function for data_source '{}'; known: {} (or set custom_reward_function.path)",
                              source, join(names, ", ")));
}

double RewardScorer::score(const RewardInput& input) const {
  RewardFn fn = custom_;
  if (!fn) {
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.functions.find(input.data_source);
    if (it == r.functions.end())
      throw Error("reward", fmt::format("no reward function for data_source '{}'", input.data_source));
    fn = it->second;
  }
  try {
    return fn(input);
  } catch (const std::exception& e) {
    throw Error("reward " + (custom_ ? custom_where_ : input.data_source),
                fmt::format("the reward function failed: {}", e.what()));
  }
}

}  // namespace verlpp::controller
