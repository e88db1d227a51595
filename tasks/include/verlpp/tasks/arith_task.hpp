// The demo task of the main job (tasks/: a static library of the programs, not part of
// libverlpp): integer arithmetic problems ("37+58=") written as dataset rows
// in verl's schema (data_source "arith", prompt as chat messages, reward_model.ground_truth),
// with the answer also in "response" so the same rows serve the SFT warm start. Every problem
// of the operand range is enumerated and shuffled once by the seed, then cut into disjoint
// splits, so validation problems are never seen in SFT or RL training.
#pragma once

#include <verlpp/config/run_settings.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace verlpp::tasks {

struct ArithTaskOptions {
  int64_t max_operand = 99;     // operands are 0..max_operand
  std::string operators = "+";  // any of "+-*"; one problem per (a, op, b)
  uint64_t seed = 1;            // the shuffle that assigns problems to splits
  int64_t sft_count = 2000;     // rows in each split, taken in this order from the shuffle
  int64_t train_count = 2000;
  int64_t val_count = 200;
  // The SFT split's teacher is sloppy: in this fraction of its '+' problems whose ones digits
  // carry, the response forgets the carry (37+58 -> "85"), as distilled data from a weak model
  // would. Ground truths stay exact; RL with the exact reward is what can correct it.
  double sft_carry_error = 0.0;
  uint64_t teacher_seed = 7;  // which carry problems the teacher gets wrong
};

// The task's options from the run's verlpp.demo.* settings (teacher_seed keeps its default).
ArithTaskOptions arith_task_options(const config::DemoSettings& demo);

// Registers the task's reward source "arith" (arith_reward below) in reward::reward_sources();
// idempotent, so every program that runs the demo's data calls it at start.
void register_arith_reward();
// The task's rule: 1 if the last integer in the response (a '-' directly before it included)
// equals the ground truth written canonically ("007" is not "7"), else 0.
double arith_reward(const std::string& response, const std::string& ground_truth);

// Rows of the three splits; Error when the range holds fewer problems than asked for.
struct ArithSplits {
  std::vector<nlohmann::json> sft, train, val;
};
ArithSplits make_arith_splits(const ArithTaskOptions& options);

// One row: {"data_source": "arith", "prompt": [{"role": "user", "content": "<a><op><b>="}],
// "ability": "arithmetic", "reward_model": {"style": "rule", "ground_truth": "<answer>"},
// "extra_info": {"split": split, "index": index}, "response": "<answer>"}.
nlohmann::json arith_row(int64_t a, char op, int64_t b, const std::string& split, int64_t index);

// The answer with the carry out of the ones digit dropped (a + b - 10 when the ones digits sum
// to 10 or more; a + b otherwise).
int64_t sum_without_carry(int64_t a, int64_t b);

// Preference pairs for reward-model training from `rows` (arith_row's; a row's ground truth is
// the exact answer even where its SFT response is the teacher's mistake): for each problem, the
// exact answer chosen over each plausible wrong one that applies — for a '+' problem whose ones
// digits carry, the sum without the carry (the sloppy teacher's mistake, the one the SFT policy
// learns); the answer off by one and off by ten (up or down, drawn); its last two digits swapped.
// Rows {"data_source", "prompt", "chosen", "rejected", "extra_info": {"split", "index",
// "mistake"}}; `seed` draws the signs.
std::vector<nlohmann::json> make_arith_preference_pairs(const std::vector<nlohmann::json>& rows, uint64_t seed);

}  // namespace verlpp::tasks
