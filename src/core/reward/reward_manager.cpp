// The reward managers (verl's verl/workers/reward_manager/{naive,dapo,prime,batch}.py at the
// pinned commit): item-by-item scoring, serial or on the pool, dapo's overlong penalty and
// extras, prime's "a slow or failing function scores 0", and the one-call batch manager.
#include <verlpp/reward/reward_manager.hpp>
#include <verlpp/core/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

namespace verlpp::reward {
namespace {

std::string item_name(const std::vector<RewardItem>& items, size_t i) {
  return fmt::format("response {} (data_source '{}')", i, items[i].input.data_source);
}

std::string exception_text(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

double overlong_penalty(int64_t response_length, int64_t max_resp_len, const OverlongBufferSettings& buffer) {
  const int64_t expected = max_resp_len - buffer.len;
  const double exceed = double(response_length - expected);
  return std::min(-exceed / double(buffer.len) * buffer.penalty_factor, 0.0);
}

RewardManager::RewardManager(RewardManagerSettings settings, RewardScorer scorer, std::string eos_token)
    : settings_(std::move(settings)),
      kind_(reward_managers().get(settings_.name, "RewardManager")),
      scorer_(std::move(scorer)),
      eos_token_(std::move(eos_token)) {
  if (kind_.batch)
    throw Error("RewardManager",
                fmt::format("'{}' needs a batch function (RewardManager(settings, BatchRewardFn))", settings_.name));
}

RewardManager::RewardManager(RewardManagerSettings settings, BatchRewardFn fn)
    : settings_(std::move(settings)),
      kind_(reward_managers().get(settings_.name, "RewardManager")),
      batch_(std::move(fn)) {
  if (!kind_.batch)
    throw Error("RewardManager", fmt::format("'{}' scores item by item, not with a batch function", settings_.name));
  if (!batch_) throw Error("RewardManager", fmt::format("{}: an empty batch function", settings_.name));
}

void RewardManager::check_data_sources(const std::vector<std::string>& data_sources) const {
  if (!batch_) scorer_.check_data_sources(data_sources);
}

std::vector<RewardResult> RewardManager::score_items(const std::vector<RewardItem>& items,
                                                     nlohmann::json& metrics) const {
  const RewardManagerSettings& s = settings_;
  // Copies the calls own: a timed-out call may outlive this function.
  auto inputs = std::make_shared<std::vector<RewardInput>>();
  inputs->reserve(items.size());
  for (const RewardItem& item : items) {
    inputs->push_back(item.input);
    if (kind_.prepare) kind_.prepare(inputs->back(), eos_token_);
  }
  const RewardScorer scorer = scorer_;
  std::vector<PoolOutcome> outcomes = run_reward_pool(
      int64_t(items.size()), [inputs, scorer](int64_t i) { return scorer.evaluate((*inputs)[size_t(i)]); },
      s.num_workers, s.timeout_s);

  std::vector<RewardResult> results(items.size());
  int64_t timeouts = 0, failures = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    PoolOutcome& o = outcomes[i];
    if (o.timed_out) {
      if (!s.timeout_score)
        throw Error("reward", fmt::format("the reward function for {} ran past verlpp.reward.timeout_s = {} s",
                                          item_name(items, i), *s.timeout_s));
      results[i].score = *s.timeout_score;
      ++timeouts;
    } else if (o.error) {
      if (!s.failure_scores || !s.timeout_score)
        throw Error("reward", fmt::format("{}: {}", item_name(items, i), exception_text(o.error)));
      results[i].score = *s.timeout_score;
      ++failures;
    } else {
      results[i] = std::move(*o.result);
    }
  }
  if (s.timeout_s) metrics["reward/timeout_count"] = timeouts;
  if (s.failure_scores) metrics["reward/error_count"] = failures;
  return results;
}

std::vector<RewardResult> RewardManager::score_batch(const std::vector<RewardItem>& items) const {
  std::vector<RewardInput> inputs;
  inputs.reserve(items.size());
  for (const RewardItem& item : items) inputs.push_back(item.input);
  std::vector<RewardResult> results;
  try {
    results = batch_(inputs, settings_.kwargs);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("reward_manager=batch", fmt::format("the batch reward function failed: {}", e.what()));
  }
  if (results.size() != items.size())
    throw Error("reward_manager=batch", fmt::format("the batch reward function returned {} results for {} responses",
                                                    results.size(), items.size()));
  return results;
}

ScoredBatch RewardManager::score(const std::vector<RewardItem>& items) const {
  ScoredBatch out;
  out.results = batch_ ? score_batch(items) : score_items(items, out.metrics);
  for (size_t i = 0; i < items.size(); ++i)
    if (!std::isfinite(out.results[i].score))
      throw Error("reward", fmt::format("the reward function gave {} a score of {} (not a finite number)",
                                        item_name(items, i), out.results[i].score));
  if (kind_.finish) kind_.finish(settings_, items, out);
  return out;
}

namespace {

// verl's dapo strips the tokenizer's eos text when decoding left it (a non-special eos).
void strip_eos_text(RewardInput& input, const std::string& eos_token) {
  std::string& text = input.response;
  if (!eos_token.empty() && text.size() >= eos_token.size() &&
      text.compare(text.size() - eos_token.size(), eos_token.size(), eos_token) == 0)
    text.resize(text.size() - eos_token.size());
}

// verl's dapo: a plain score is also reported as the extra "acc"; with the overlong buffer on,
// the penalty is added to the score (and reported, with log).
void dapo_finish(const RewardManagerSettings& s, const std::vector<RewardItem>& items, ScoredBatch& out) {
  double overlong_sum = 0;
  int64_t overlong_count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    RewardResult& r = out.results[i];
    if (r.extra.empty()) r.extra["acc"] = r.score;
    if (!s.overlong.enable) continue;
    const double penalty = overlong_penalty(items[i].response_length, s.max_resp_len, s.overlong);
    r.score += penalty;
    overlong_sum += penalty;
    overlong_count += penalty < 0 ? 1 : 0;
    if (s.overlong.log) {
      r.extra["overlong_reward"] = penalty;
      r.extra["overlong"] = penalty < 0;
    }
  }
  if (s.overlong.enable && s.overlong.log && !items.empty()) {
    out.metrics["reward/overlong_reward/mean"] = overlong_sum / double(items.size());
    out.metrics["reward/overlong_ratio"] = double(overlong_count) / double(items.size());
  }
}

void add_builtin_managers(Registry<RewardManagerKind>& r) {
  r.add("naive", RewardManagerKind{});
  r.add("dapo", RewardManagerKind{false, strip_eos_text, dapo_finish});
  r.add("prime", RewardManagerKind{
                     false, {}, [](const RewardManagerSettings&, const std::vector<RewardItem>&, ScoredBatch& out) {
                       for (RewardResult& r : out.results)
                         r.extra = nlohmann::json::object();  // verl's prime reports no extras
                     }});
  r.add("batch", RewardManagerKind{true, {}, {}});
}

}  // namespace

Registry<RewardManagerKind>& reward_managers() {
  static Registry<RewardManagerKind> registry("reward manager", &add_builtin_managers);
  return registry;
}

}  // namespace verlpp::reward
