// Rule-based rewards keyed by data_source (verl's default_compute_score dispatch): gsm8k,
// math (the last \boxed{} with Hendrycks normalisation), arith (the demo task), plus functions
// a linking program registers and a custom function loaded from a user's shared object.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace verlpp::controller {

// What a reward function sees for one response.
struct RewardInput {
  std::string data_source;
  std::string response;         // the decoded response text (no prompt)
  nlohmann::json ground_truth;  // reward_model.ground_truth from the dataset row
  nlohmann::json extra_info;    // extra_info from the dataset row (may be null)
};

// A scoring function: returns the scalar reward of one response.
using RewardFn = std::function<double(const RewardInput&)>;

// Registers `fn` for `data_source`; a name already registered is an Error.
void register_reward_function(const std::string& data_source, RewardFn fn);
// Names with a registered function (built-ins included), sorted.
std::vector<std::string> reward_function_names();

// Scores responses: a custom function (when configured) for every data source, else the
// function registered for each row's data_source.
class RewardScorer {
 public:
  // Uses the registry.
  RewardScorer() = default;
  // Uses `symbol` from the shared object at `path`, with the C signature
  //   double symbol(const char* data_source, const char* response,
  //                 const char* ground_truth_json, const char* extra_info_json);
  // (verl's custom_reward_function.path / .name). Errors name the file and the symbol.
  static RewardScorer from_library(const std::string& path, const std::string& symbol);

  // Errors at start-up (naming the source and the known ones) if any data source has no function.
  void check_data_sources(const std::vector<std::string>& data_sources) const;
  // The reward of one response; an exception from the function is an Error naming the source.
  double score(const RewardInput& input) const;

 private:
  RewardFn custom_;
  std::string custom_where_;
};

// The built-in scoring rules, exposed for tests and for reuse in custom functions.
namespace rewards {
// verl's gsm8k: the last "#### <number>" (strict) or the last number (flexible), commas and $
// removed, compared as strings with the ground truth; score on a match, format_score otherwise.
double gsm8k(const std::string& response, const std::string& ground_truth, bool flexible = false,
             double format_score = 0.0, double score = 1.0);
// The answer gsm8k extracts, or "" when there is none (a "none" answer scores 0).
std::string gsm8k_extract(const std::string& response, bool flexible, bool* found);
// verl's math: 1 if the content of the last \boxed{...} (or \fbox) is equivalent to the ground
// truth under the Hendrycks MATH normalisation (strip_string), else 0.
double math(const std::string& response, const std::string& ground_truth);
// The last \boxed{...} / \boxed ... / \fbox{...} substring, or "" with *found = false.
std::string last_boxed(const std::string& text, bool* found);
// Hendrycks MATH equivalence: strip_string on both, or plain equality when stripping fails.
bool math_equivalent(const std::string& a, const std::string& b);
// The demo task: 1 if the last integer in the response equals the ground truth, else 0.
double arith(const std::string& response, const std::string& ground_truth);
}  // namespace rewards

}  // namespace verlpp::controller
