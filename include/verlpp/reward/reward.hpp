// Rule-based rewards keyed by data_source, following verl's default_compute_score dispatch
// (docs/training.md lists the table and the verl commit): gsm8k, the Hendrycks MATH rule,
// math_dapo (with acc and pred extras), Search-R1 exact match, functions a linking program (or
// the demo task, tasks/) registers and a custom function from a shared object. The
// sources verl scores with sympy or a code sandbox are refused unless a function is registered.
// How a step's responses reach these functions (one by one, on a timed pool, or all at once) is
// the reward manager's (reward_manager.hpp).
#pragma once

#include <verlpp/core/registry.hpp>

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace verlpp::reward {

// What a reward function sees for one response.
struct RewardInput {
  std::string data_source;
  std::string response;         // the decoded response text (no prompt)
  nlohmann::json ground_truth;  // reward_model.ground_truth from the dataset row
  nlohmann::json extra_info;    // extra_info from the dataset row (may be null)
};

// A score with verl's reward extra info: the other keys of the dict a verl scorer returns
// (math_dapo: acc, pred), one JSON value each; an empty object for a plain score.
struct RewardResult {
  double score = 0.0;
  nlohmann::json extra = nlohmann::json::object();
};

// A scoring function: returns the scalar reward of one response.
using RewardFn = std::function<double(const RewardInput&)>;
// A scoring function that also reports extras.
using RewardFnWithExtras = std::function<RewardResult(const RewardInput&)>;

// The reward sources: data_source -> function, verl's built-ins included. Register a source in
// one line (`reward::reward_sources().add("my_source", fn)`) or through the functions below.
Registry<RewardFnWithExtras>& reward_sources();
// Registers `fn` for `data_source`; a name already registered is an Error. A registered name
// takes precedence over the prefix rule (aime*) and over a refused verl source.
void register_reward_function(const std::string& data_source, RewardFn fn);
void register_reward_function_with_extras(const std::string& data_source, RewardFnWithExtras fn);
// Names with a registered function (built-ins included), sorted; "aime*" stands for the prefix.
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

  // Errors at start-up if any data source has no function: for a source verl scores with sympy or a
  // code sandbox, saying so; otherwise naming the source and the known ones.
  void check_data_sources(const std::vector<std::string>& data_sources) const;
  // The reward of one response with its extras; an exception from the function is an Error
  // naming the source.
  RewardResult evaluate(const RewardInput& input) const;
  // evaluate(input).score.
  double score(const RewardInput& input) const { return evaluate(input).score; }

 private:
  RewardFnWithExtras custom_;
  std::string custom_where_;
};

// The built-in scoring rules, exposed for tests and for reuse in custom functions.
namespace rules {
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
// verl's math_dapo: the last "Answer: ..." in the final 300 characters, normalised, against the
// normalised ground truth: score +1 or -1, extras {"acc": bool, "pred": normalised answer}.
RewardResult math_dapo(const std::string& response, const std::string& ground_truth);
// math_dapo's normalize_final_answer.
std::string math_dapo_normalize(const std::string& answer);
// verl's Search-R1 exact match: ground_truth {"target": string or list of strings}; 1 when the
// last <answer>...</answer> normalises to a target (0.25 with more than ten tags), else 0.
double qa_em(const std::string& response, const nlohmann::json& ground_truth);
// The SQuAD normalisation qa_em compares under.
std::string qa_normalize(const std::string& answer);
}  // namespace rules

}  // namespace verlpp::reward
