// Reward managers (verl's reward_model.reward_manager): how a step's responses reach the reward
// functions and how their results become the sequence rewards. naive scores each response with
// the RewardScorer; dapo adds DAPO's overlong-buffer penalty; prime scores on a thread pool with a
// per-item timeout (timed-out and failing items score timeout_score, as verl's PrimeRewardManager
// gives them 0); batch calls one user function with the whole batch. Every manager that scores
// item by item can use the pool (num_workers, timeout_s). docs/training.md describes the keys.
// The managers are entries of reward_managers(): verl's four are registered there, and a
// program registers its own in one line (the key reward_model.reward_manager then names it).
#pragma once

#include <verlpp/core/registry.hpp>
#include <verlpp/reward/reward.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace verlpp::reward {

// reward_model.reward_kwargs.overlong_buffer_cfg (the dapo manager).
struct OverlongBufferSettings {
  bool enable = false;          // enable
  int64_t len = 0;              // len: the buffer's tokens before max_resp_len
  double penalty_factor = 1.0;  // penalty_factor: the penalty at max_resp_len
  bool log = false;             // log: report the extras overlong_reward and overlong
};

// The reward manager's settings: reward_manager.name (which follows reward_model.reward_manager),
// reward_model.reward_kwargs, custom_reward_function.reward_kwargs and verlpp.reward.*.
struct RewardManagerSettings {
  std::string name = "naive";  // naive | dapo | prime | batch | a registered manager
  // dapo: reward_kwargs.max_resp_len (unset: data.max_response_length) and overlong_buffer_cfg.
  int64_t max_resp_len = 0;
  OverlongBufferSettings overlong;
  // batch: the keyword arguments of the user function, reward_model.reward_kwargs updated by
  // custom_reward_function.reward_kwargs (verl's precedence); a registered manager: its
  // reward_model.reward_kwargs. A JSON object.
  nlohmann::json kwargs = nlohmann::json::object();
  // The pool for item-by-item scoring: 1 worker and no timeout score in the calling thread.
  int64_t num_workers = 1;          // verlpp.reward.num_workers (prime: 64, verl's)
  std::optional<double> timeout_s;  // verlpp.reward.timeout_s (prime: 300, verl's)
  // The score of an item whose function runs past timeout_s (or, with prime, throws); nullopt:
  // a timeout is an Error naming the item.
  std::optional<double> timeout_score = 0.0;  // verlpp.reward.timeout_score
  bool failure_scores = false;                // prime: a throwing function scores timeout_score too
};

// What a batch function returns for the items, one result each, in order.
using BatchRewardFn =
    std::function<std::vector<RewardResult>(const std::vector<RewardInput>& items, const nlohmann::json& kwargs)>;

// The batch functions by name (`reward::batch_reward_functions().add("mine", fn)` registers one).
Registry<BatchRewardFn>& batch_reward_functions();
// Registers a batch function under `name` (custom_reward_function.name with the batch manager and
// no custom_reward_function.path); a name already registered, or an empty function, is an Error.
void register_batch_reward_function(const std::string& name, BatchRewardFn fn);
// Names with a registered batch function, sorted.
std::vector<std::string> batch_reward_function_names();
// The batch function registered as `name`; an Error at `name` listing the registered ones otherwise
// (the controller names the key it came from).
BatchRewardFn registered_batch_reward_function(const std::string& name);
// `symbol` from the shared object at `path` with the C signature
//   int symbol(int64_t n, const char* const* data_sources, const char* const* responses,
//              const char* const* ground_truths_json, const char* const* extra_infos_json,
//              const char* kwargs_json, double* scores, char* error, size_t error_size);
// which writes n scores and returns 0, or returns non-zero with a NUL-terminated message in
// error (at most error_size bytes). Errors name the file and the symbol.
BatchRewardFn batch_reward_function_from_library(const std::string& path, const std::string& symbol);

// One response for a manager: what the function sees, and its valid token count (the length
// the overlong penalty measures; the reward sits at its last token).
struct RewardItem {
  RewardInput input;
  int64_t response_length = 0;
};

// A scored batch: one result per item in item order, whatever the pool's timing, and the
// manager's metrics (reward/overlong_reward/mean, reward/timeout_count, ...; see docs).
struct ScoredBatch {
  std::vector<RewardResult> results;
  nlohmann::json metrics = nlohmann::json::object();
};

// What a reward manager does around the reward function. verl's naive, dapo, prime and batch are
// registered as these; a program adds its own with `reward::reward_managers().add("mine", kind)`.
struct RewardManagerKind {
  // Scores with one call of a batch function (custom_reward_function.path or .name names it);
  // false: item by item with the reward scorer, on the pool.
  bool batch = false;
  // Edits what the function sees of one response before it is scored (dapo strips the
  // tokenizer's eos text); may be empty.
  std::function<void(RewardInput& input, const std::string& eos_token)> prepare;
  // Edits the scored results and adds metrics (dapo's "acc" extra and overlong penalty, prime's
  // empty extras); called after every score was checked finite; may be empty.
  std::function<void(const RewardManagerSettings& settings, const std::vector<RewardItem>& items, ScoredBatch& scored)>
      finish;
};

// The reward managers by name (reward_model.reward_manager): naive, dapo, prime, batch and any
// a program registers.
Registry<RewardManagerKind>& reward_managers();

class RewardManager {
 public:
  // An item-by-item manager (naive, dapo, prime, or a registered one) scoring with `scorer`;
  // `eos_token` is the text dapo strips from the end of a decoded response (verl's
  // tokenizer.eos_token). An unknown name is an Error listing the registered managers.
  RewardManager(RewardManagerSettings settings, RewardScorer scorer, std::string eos_token = {});
  // A batch manager (batch, or a registered one) calling `fn`.
  RewardManager(RewardManagerSettings settings, BatchRewardFn fn);

  const RewardManagerSettings& settings() const { return settings_; }
  // Errors at start-up for a data source no function scores (the batch function takes all).
  void check_data_sources(const std::vector<std::string>& data_sources) const;
  // Scores `items`. Errors name the item (its index and data source).
  ScoredBatch score(const std::vector<RewardItem>& items) const;

 private:
  std::vector<RewardResult> score_items(const std::vector<RewardItem>& items, nlohmann::json& metrics) const;
  std::vector<RewardResult> score_batch(const std::vector<RewardItem>& items) const;

  RewardManagerSettings settings_;
  RewardManagerKind kind_;
  RewardScorer scorer_;
  BatchRewardFn batch_;
  std::string eos_token_;
};

// How one call of the pool ended: its result, a timeout, or the exception it threw.
struct PoolOutcome {
  std::optional<RewardResult> result;
  bool timed_out = false;
  std::exception_ptr error;
};

// The pool alone: evaluates fn(i) for i in [0, n) on `workers` threads (one worker and no
// timeout: in the calling thread), a call running past `timeout_s` from its own start ending as
// timed out. Outcomes sit at their index, whatever the timing. A timed-out call cannot be stopped
// (C++ has no thread cancellation): its thread is left to finish in the background and a fresh
// worker takes its place, so `fn` must own what it uses (it is copied into the pool).
std::vector<PoolOutcome> run_reward_pool(int64_t n, std::function<RewardResult(int64_t)> fn, int64_t workers,
                                         std::optional<double> timeout_s);

// The dapo manager's penalty (verl's DAPORewardManager): min(-(length - (max_resp_len - len)) /
// len * penalty_factor, 0).
double overlong_penalty(int64_t response_length, int64_t max_resp_len, const OverlongBufferSettings& buffer);

}  // namespace verlpp::reward
