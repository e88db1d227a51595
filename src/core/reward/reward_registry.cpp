// The reward sources (data_source -> function, a Registry holding the built-ins) and RewardScorer, which
// checks every data source up front and can route everything to a user's shared object.
#include <verlpp/reward/reward.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include "reward_library.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>

namespace verlpp::reward {
namespace {

// A row without reward_model.ground_truth (null) is scored against an empty answer.
std::string ground_truth_text(const nlohmann::json& g) {
  if (g.is_null()) return {};
  return g.is_string() ? g.get<std::string>() : g.dump();
}

// ground_truth as the string the string-based rules compare with.
RewardFnWithExtras plain(double (*rule)(const std::string&, const std::string&)) {
  return [rule](const RewardInput& in) { return RewardResult{rule(in.response, ground_truth_text(in.ground_truth))}; };
}

// Sources verl's default_compute_score scores with a sympy-based grader or by running code;
// verlpp carries neither, so they need a registered function or custom_reward_function.
const std::map<std::string, std::string>& refused_sources() {
  static const std::map<std::string, std::string> refused = [] {
    std::map<std::string, std::string> r;
    for (const char* name : {"numina_aops_forum", "numina_synthetic_math", "numina_amc_aime", "numina_synthetic_amc",
                             "numina_cn_k12", "numina_olympiads"})
      r[name] = "verl scores it with prime_math, a sympy-based grader";
    for (const char* name : {"codecontests", "apps", "codeforces", "taco"})
      r[name] = "verl scores it by running the code against test cases (sandbox_fusion or prime_code)";
    r["hiyouga/geometry3k"] = "verl scores it with geo3k, which grades through mathruler (sympy)";
    return r;
  }();
  return refused;
}

// The sources verl's default_compute_score scores, under its names.
void add_builtin_sources(Registry<RewardFnWithExtras>& r) {
  // verl's default_compute_score names the source "openai/gsm8k"; "gsm8k" is verlpp's short form.
  for (const char* name : {"gsm8k", "openai/gsm8k"})
    r.add(name, [](const RewardInput& in) {
      return RewardResult{rules::gsm8k(in.response, ground_truth_text(in.ground_truth))};
    });
  for (const char* name : {"lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"})
    r.add(name, plain(&rules::math));
  // verl sends these, and every source starting with "aime" (see find_source), to math_dapo.
  for (const char* name : {"math", "math_dapo", "math_dapo_reasoning"})
    r.add(name,
          [](const RewardInput& in) { return rules::math_dapo(in.response, ground_truth_text(in.ground_truth)); });
  for (const char* name : {"searchR1_nq", "searchR1_triviaqa", "searchR1_popqa", "searchR1_hotpotqa",
                           "searchR1_2wikimultihopqa", "searchR1_musique", "searchR1_bamboogle"})
    r.add(name, [](const RewardInput& in) { return RewardResult{rules::qa_em(in.response, in.ground_truth)}; });
}

// The function for `source`: a registered name, else verl's "aime" prefix rule.
std::optional<RewardFnWithExtras> find_source(const std::string& source) {
  if (std::optional<RewardFnWithExtras> fn = reward_sources().find(source)) return fn;
  if (source.rfind("aime", 0) == 0) return reward_sources().find("math_dapo");
  return std::nullopt;
}

// The error for a source without a function: why verl's scorer is not carried, or the known names.
Error missing_source(const std::string& source, bool at_start) {
  auto refused = refused_sources().find(source);
  if (refused != refused_sources().end())
    return Error("reward", fmt::format("data_source '{}' is not scored by verlpp: {}; register a reward function "
                                       "for it (register_reward_function) or set custom_reward_function.path",
                                       source, refused->second));
  return Error("reward", fmt::format("no reward function for data_source '{}'{}; known: {} (or set "
                                     "custom_reward_function.path)",
                                     source, at_start ? "" : " at scoring time", join(reward_function_names(), ", ")));
}

}  // namespace

Registry<RewardFnWithExtras>& reward_sources() {
  static Registry<RewardFnWithExtras>* registry = [] {
    auto* r = new Registry<RewardFnWithExtras>("reward source");  // never destroyed: scorers may outlive statics
    add_builtin_sources(*r);
    return r;
  }();
  return *registry;
}

void register_reward_function(const std::string& data_source, RewardFn fn) {
  if (!fn) throw Error("register_reward_function", fmt::format("empty function for '{}'", data_source));
  register_reward_function_with_extras(data_source,
                                       [fn = std::move(fn)](const RewardInput& in) { return RewardResult{fn(in)}; });
}

void register_reward_function_with_extras(const std::string& data_source, RewardFnWithExtras fn) {
  if (!fn) throw Error("register_reward_function", fmt::format("empty function for '{}'", data_source));
  reward_sources().add(data_source, std::move(fn));
}

std::vector<std::string> reward_function_names() {
  std::vector<std::string> names = reward_sources().names();
  names.push_back("aime*");
  std::sort(names.begin(), names.end());
  return names;
}

RewardScorer RewardScorer::from_library(const std::string& path, const std::string& symbol) {
  using CFn = double(const char*, const char*, const char*, const char*);
  std::shared_ptr<boost::dll::shared_library> lib = load_reward_library(path, symbol);
  CFn* fn = &lib->get<CFn>(symbol);
  RewardScorer s;
  s.custom_where_ = path + ":" + symbol;
  s.custom_ = [lib, fn](const RewardInput& in) {
    std::string truth = in.ground_truth.dump(), extra = in.extra_info.dump();
    return RewardResult{fn(in.data_source.c_str(), in.response.c_str(), truth.c_str(), extra.c_str())};
  };
  return s;
}

void RewardScorer::check_data_sources(const std::vector<std::string>& data_sources) const {
  if (custom_) return;
  for (const auto& source : data_sources) {
    if (!find_source(source)) throw missing_source(source, true);
  }
}

RewardResult RewardScorer::evaluate(const RewardInput& input) const {
  RewardFnWithExtras fn = custom_;
  if (!fn) {
    std::optional<RewardFnWithExtras> found = find_source(input.data_source);
    if (!found) throw missing_source(input.data_source, false);
    fn = std::move(*found);
  }
  try {
    return fn(input);
  } catch (const std::exception& e) {
    throw Error("reward " + (custom_ ? custom_where_ : input.data_source),
                fmt::format("the reward function failed: {}", e.what()));
  }
}

}  // namespace verlpp::reward
