// Reward managers: dapo's overlong penalty against a plain reimplementation and hand-worked
// cases of verl's formula, its extras and eos stripping; naive and prime; the pool (parallel
// equals serial, a slow function hits the per-item timeout and the others still finish); the
// batch manager with a registered function and the C symbol of a shared object; and the
// settings read from verl's keys, with the errors for values that cannot be used.
#include <verlpp/reward/reward_manager.hpp>
#include <verlpp/config/run_settings.hpp>
#include <verlpp/core/error.hpp>

#include <cctype>
#include <chrono>
#include <cmath>
#include <thread>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp::config;
using namespace verlpp::reward;
using Catch::Contains;

namespace {

// verl's DAPORewardManager penalty, written out as the Python reads.
double verl_penalty(int64_t valid_response_length, int64_t max_resp_len, int64_t buffer_len, double factor) {
  const int64_t expected_len = max_resp_len - buffer_len;
  const int64_t exceed_len = valid_response_length - expected_len;
  const double candidate = -double(exceed_len) / double(buffer_len) * factor;
  return candidate < 0 ? candidate : 0.0;
}

// Test functions, registered once: the score is the response's length; "mgr_extras" reports an
// extra; "mgr_throw" fails on "boom"; "mgr_slow" sleeps on "slow".
void register_test_functions() {
  static const bool done = [] {
    register_reward_function("mgr_len", [](const RewardInput& in) { return double(in.response.size()); });
    register_reward_function_with_extras("mgr_extras", [](const RewardInput& in) {
      RewardResult r{1.5};
      r.extra["seen"] = in.response;
      return r;
    });
    register_reward_function("mgr_throw", [](const RewardInput& in) {
      if (in.response == "boom") throw std::runtime_error("bad response");
      return 2.0;
    });
    register_reward_function("mgr_slow", [](const RewardInput& in) {
      if (in.response == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return double(in.response.size());
    });
    register_batch_reward_function("mgr_batch", [](const std::vector<RewardInput>& items, const nlohmann::json& kw) {
      std::vector<RewardResult> out;
      for (size_t i = 0; i < items.size(); ++i) {
        RewardResult r{double(i) * kw.value("step", 1.0)};
        r.extra["n"] = items.size();
        out.push_back(r);
      }
      return out;
    });
    // A manager of the program's own: the function sees the response upper-cased, and each
    // score is reported again as a metric of the batch.
    reward_managers().add(
        "mgr_shout",
        RewardManagerKind{false,
                          [](RewardInput& in, const std::string&) {
                            for (char& c : in.response) c = char(std::toupper(static_cast<unsigned char>(c)));
                          },
                          [](const RewardManagerSettings& s, const std::vector<RewardItem>&, ScoredBatch& out) {
                            double sum = 0;
                            for (const RewardResult& r : out.results) sum += r.score;
                            out.metrics["reward/shout_sum"] = sum * s.kwargs.value("scale", 1.0);
                          }});
    register_batch_reward_function("mgr_batch_short", [](const std::vector<RewardInput>& items, const nlohmann::json&) {
      return std::vector<RewardResult>(items.size() > 0 ? items.size() - 1 : 0);
    });
    return true;
  }();
  (void)done;
}

RewardItem item(const std::string& source, const std::string& response, int64_t length) {
  return RewardItem{RewardInput{source, response, "", nullptr}, length};
}

RewardManagerSettings manager(const std::string& name) {
  RewardManagerSettings s;
  s.name = name;
  return s;
}

Config small(const std::vector<std::string>& more = {}) {
  Config c = Config::defaults();
  c.apply_overrides({"data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                     "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.rollout.n=2",
                     "algorithm.adv_estimator=grpo", "data.max_response_length=100",
                     "actor_rollout_ref.rollout.tensor_model_parallel_size=1"});
  c.apply_overrides(more);
  c.resolve();
  return c;
}

std::string settings_error(const std::vector<std::string>& overrides) {
  try {
    parse_run_settings(small(overrides));
  } catch (const verlpp::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("dapo's overlong penalty: verl's formula on hand-worked cases and a grid", "[reward][manager]") {
  // verl's DAPO example: max_response_length 20480, buffer 4096, factor 1.
  OverlongBufferSettings b{true, 4096, 1.0, false};
  CHECK(overlong_penalty(16384, 20480, b) == 0.0);  // exactly the expected length
  CHECK(overlong_penalty(100, 20480, b) == 0.0);    // short: no bonus (min with 0)
  CHECK(overlong_penalty(16385, 20480, b) == Approx(-1.0 / 4096));
  CHECK(overlong_penalty(18432, 20480, b) == Approx(-0.5));
  CHECK(overlong_penalty(20480, 20480, b) == Approx(-1.0));
  // max 100, buffer 20, factor 0.5: 90 tokens exceed 80 by 10 -> -10/20*0.5.
  CHECK(overlong_penalty(90, 100, {true, 20, 0.5, false}) == Approx(-0.25));
  for (int64_t max_len : {8, 50, 333})
    for (int64_t len : {1, 3, 8})
      for (double factor : {0.0, 0.7, 1.0, 2.5})
        for (int64_t length = 0; length <= max_len; ++length) {
          INFO(max_len << " " << len << " " << factor << " " << length);
          CHECK(overlong_penalty(length, max_len, {true, len, factor, false}) ==
                Approx(verl_penalty(length, max_len, len, factor)).margin(1e-15));
        }
}

TEST_CASE("dapo manager: penalty on the score, verl's extras, eos stripped before scoring", "[reward][manager]") {
  register_test_functions();
  RewardManagerSettings s = manager("dapo");
  s.max_resp_len = 10;
  s.overlong = {true, 4, 1.0, true};
  const RewardManager m(s, RewardScorer(), "</s>");
  // Lengths 3 (no penalty), 8 (exceeds 6 by 2: -0.5), 10 (-1).
  const ScoredBatch out =
      m.score({item("mgr_len", "abc</s>", 3), item("mgr_len", "abcdefgh", 8), item("mgr_extras", "xyz</s>", 10)});
  REQUIRE(out.results.size() == 3);
  CHECK(out.results[0].score == Approx(3.0));  // the function saw "abc": eos stripped
  CHECK(out.results[0].extra["acc"] == 3.0);   // a plain score is also verl's extra "acc"
  CHECK(out.results[0].extra["overlong_reward"] == 0.0);
  CHECK(out.results[0].extra["overlong"] == false);
  CHECK(out.results[1].score == Approx(8.0 - 0.5));
  CHECK(out.results[1].extra["overlong_reward"].get<double>() == Approx(-0.5));
  CHECK(out.results[1].extra["overlong"] == true);
  CHECK(out.results[2].score == Approx(1.5 - 1.0));
  CHECK(out.results[2].extra["seen"] == "xyz");  // a dict result's extras stay, with no "acc" added
  CHECK_FALSE(out.results[2].extra.contains("acc"));
  CHECK(out.metrics["reward/overlong_reward/mean"].get<double>() == Approx((0.0 - 0.5 - 1.0) / 3));
  CHECK(out.metrics["reward/overlong_ratio"].get<double>() == Approx(2.0 / 3));

  // Without log: the penalty, no overlong extras or metrics; disabled: the plain score.
  s.overlong.log = false;
  const ScoredBatch quiet = RewardManager(s, RewardScorer(), "</s>").score({item("mgr_len", "abcdefgh", 8)});
  CHECK(quiet.results[0].score == Approx(7.5));
  CHECK_FALSE(quiet.results[0].extra.contains("overlong_reward"));
  CHECK(quiet.metrics.empty());
  s.overlong.enable = false;
  CHECK(RewardManager(s, RewardScorer(), "</s>").score({item("mgr_len", "abcdefgh", 8)}).results[0].score == 8.0);
}

TEST_CASE("naive and prime managers: plain scores; prime scores a failing function 0", "[reward][manager]") {
  register_test_functions();
  const RewardManager naive(manager("naive"), RewardScorer(), "</s>");
  const ScoredBatch n = naive.score({item("mgr_len", "abc</s>", 3), item("mgr_extras", "q", 1)});
  CHECK(n.results[0].score == 7.0);  // naive does not strip eos (verl's naive neither)
  CHECK(n.results[0].extra.empty());
  CHECK(n.results[1].extra["seen"] == "q");
  CHECK_THROWS_WITH(naive.score({item("mgr_throw", "ok", 2), item("mgr_throw", "boom", 4)}),
                    Contains("response 1 (data_source 'mgr_throw')") && Contains("bad response"));

  RewardManagerSettings p = manager("prime");
  p.num_workers = 4;
  p.timeout_s = 30.0;
  p.failure_scores = true;
  const ScoredBatch pr =
      RewardManager(p, RewardScorer())
          .score({item("mgr_throw", "ok", 2), item("mgr_throw", "boom", 4), item("mgr_extras", "e", 1)});
  CHECK(pr.results[0].score == 2.0);
  CHECK(pr.results[1].score == 0.0);
  CHECK(pr.results[2].extra.empty());  // verl's prime reports no extras
  CHECK(pr.metrics["reward/error_count"] == 1);
  CHECK(pr.metrics["reward/timeout_count"] == 0);
}

TEST_CASE("reward pool: the parallel result equals the serial one, in item order", "[reward][manager][pool]") {
  // Items take different times, so the threads finish out of order.
  auto fn = [](int64_t i) {
    std::this_thread::sleep_for(std::chrono::microseconds((i * 7919) % 2000));
    RewardResult r{std::sin(double(i)) * 10};
    r.extra["i"] = i;
    return r;
  };
  const std::vector<PoolOutcome> serial = run_reward_pool(200, fn, 1, std::nullopt);
  for (int64_t workers : {2, 8, 64}) {
    for (std::optional<double> timeout : {std::optional<double>(), std::optional<double>(60.0)}) {
      const std::vector<PoolOutcome> parallel = run_reward_pool(200, fn, workers, timeout);
      REQUIRE(parallel.size() == serial.size());
      for (size_t i = 0; i < serial.size(); ++i) {
        INFO(workers << " workers, item " << i);
        REQUIRE(parallel[i].result);
        CHECK(parallel[i].result->score == serial[i].result->score);
        CHECK(parallel[i].result->extra == serial[i].result->extra);
        CHECK_FALSE(parallel[i].timed_out);
      }
    }
  }
  // Through a manager: naive on 8 threads equals naive in the calling thread.
  register_test_functions();
  std::vector<RewardItem> items;
  for (int i = 0; i < 50; ++i) items.push_back(item(i % 2 ? "mgr_len" : "mgr_extras", std::string(size_t(i), 'a'), i));
  RewardManagerSettings threaded = manager("naive");
  threaded.num_workers = 8;
  const ScoredBatch a = RewardManager(manager("naive"), RewardScorer()).score(items);
  const ScoredBatch b = RewardManager(threaded, RewardScorer()).score(items);
  for (size_t i = 0; i < items.size(); ++i) {
    CHECK(a.results[i].score == b.results[i].score);
    CHECK(a.results[i].extra == b.results[i].extra);
  }
  CHECK_THROWS_WITH(run_reward_pool(3, fn, 0, std::nullopt), Contains("0 workers"));
}

TEST_CASE("reward pool: a slow function hits the per-item timeout, the others finish", "[reward][manager][pool]") {
  register_test_functions();
  // Two workers, both first items slow: replacements must take the rest.
  std::vector<RewardItem> items = {item("mgr_slow", "slow", 4), item("mgr_slow", "slow", 4)};
  for (int i = 0; i < 10; ++i) items.push_back(item("mgr_slow", std::string(size_t(i + 1), 'x'), i + 1));
  RewardManagerSettings s = manager("naive");
  s.num_workers = 2;
  s.timeout_s = 0.2;
  s.timeout_score = -1.0;
  const auto start = std::chrono::steady_clock::now();
  const ScoredBatch out = RewardManager(s, RewardScorer()).score(items);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 1.2);  // did not wait for the 1.5 s calls
  CHECK(out.results[0].score == -1.0);
  CHECK(out.results[1].score == -1.0);
  for (size_t i = 2; i < items.size(); ++i) CHECK(out.results[i].score == double(i - 1));
  CHECK(out.metrics["reward/timeout_count"] == 2);
  // timeout_score unset: a timeout is an error naming the response.
  s.timeout_score.reset();
  CHECK_THROWS_WITH(RewardManager(s, RewardScorer()).score({item("mgr_len", "a", 1), item("mgr_slow", "slow", 4)}),
                    Contains("response 1 (data_source 'mgr_slow')") && Contains("verlpp.reward.timeout_s = 0.2"));
}

TEST_CASE("batch manager: one call with the whole batch, registered or from a shared object", "[reward][manager]") {
  register_test_functions();
  RewardManagerSettings s = manager("batch");
  s.kwargs = {{"step", 0.5}};
  const ScoredBatch out = RewardManager(s, registered_batch_reward_function("mgr_batch"))
                              .score({item("x", "a", 1), item("y", "b", 1), item("z", "c", 1)});
  CHECK(out.results[2].score == 1.0);
  CHECK(out.results[1].extra["n"] == 3);  // one call saw all three
  CHECK_THROWS_WITH(RewardManager(s, registered_batch_reward_function("mgr_batch_short")).score({item("x", "a", 1)}),
                    Contains("returned 0 results for 1 responses"));
  CHECK_THROWS_WITH(registered_batch_reward_function("nope"),
                    Contains("no batch reward function 'nope'") && Contains("mgr_batch"));
  CHECK_THROWS_WITH(register_batch_reward_function("mgr_batch", registered_batch_reward_function("mgr_batch")),
                    Contains("already registered"));

  const BatchRewardFn c = batch_reward_function_from_library(VERLPP_TEST_CUSTOM_REWARD, "batch_length_score");
  s.kwargs = {{"double", true}};
  const ScoredBatch lib = RewardManager(s, c).score({item("bonus", "abcd", 4), item("plain", "xy", 2)});
  CHECK(lib.results[0].score == 108.0);
  CHECK(lib.results[1].score == 4.0);
  CHECK_THROWS_WITH(RewardManager(s, c).score({item("plain", "ok", 2), item("plain", "fail", 4)}),
                    Contains("returned 3: cannot score response 1"));
  CHECK_THROWS_WITH(batch_reward_function_from_library(VERLPP_TEST_CUSTOM_REWARD, "nope"),
                    Contains("has no symbol 'nope'"));
}

TEST_CASE("a registered reward manager: chosen by reward_model.reward_manager, its kwargs its own",
          "[reward][manager][registry]") {
  register_test_functions();
  RewardManagerSettings s = manager("mgr_shout");
  s.kwargs = {{"scale", 2.0}};
  // Registered item-by-item functions: "mgr_extras" reports what it saw (upper-cased by the manager).
  const ScoredBatch out =
      RewardManager(s, RewardScorer()).score({item("mgr_extras", "abc", 3), item("mgr_len", "xy", 2)});
  CHECK(out.results[0].extra["seen"] == "ABC");
  CHECK(out.results[1].score == 2.0);
  CHECK(out.metrics["reward/shout_sum"] == (1.5 + 2.0) * 2.0);
  CHECK_THROWS_WITH(RewardManager(s, registered_batch_reward_function("mgr_batch")),
                    Contains("'mgr_shout' scores item by item"));
  CHECK_THROWS_WITH(RewardManager(manager("nope"), RewardScorer()),
                    Contains("unknown reward manager 'nope'") && Contains("mgr_shout") && Contains("prime"));
  CHECK_THROWS_WITH(reward_managers().add("dapo", RewardManagerKind{}), Contains("'dapo' is already registered"));

  // From verl's keys: the name is accepted, the manager's keyword arguments reach it whole.
  const RunSettings settings =
      parse_run_settings(small({"reward_model.reward_manager=mgr_shout", "+reward_model.reward_kwargs.scale=3"}));
  CHECK(settings.reward_manager.name == "mgr_shout");
  CHECK(settings.reward_manager.kwargs == nlohmann::json{{"scale", 3}});
}

TEST_CASE("reward manager settings: verl's keys and the errors for values that cannot be used",
          "[reward][manager][settings]") {
  const RunSettings plain = parse_run_settings(small());
  CHECK(plain.reward_manager.name == "naive");
  CHECK(plain.reward_manager.num_workers == 1);
  CHECK_FALSE(plain.reward_manager.timeout_s);

  const RunSettings dapo = parse_run_settings(
      small({"reward_model.reward_manager=dapo", "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
             "+reward_model.reward_kwargs.overlong_buffer_cfg.len=40",
             "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=0.5",
             "+reward_model.reward_kwargs.overlong_buffer_cfg.log=True"}));
  CHECK(dapo.reward_manager.name == "dapo");
  CHECK(dapo.reward_manager.max_resp_len == 100);  // data.max_response_length
  CHECK(dapo.reward_manager.overlong.enable);
  CHECK(dapo.reward_manager.overlong.len == 40);
  CHECK(dapo.reward_manager.overlong.penalty_factor == 0.5);
  CHECK(dapo.reward_manager.overlong.log);
  CHECK(parse_run_settings(small({"reward_manager.name=dapo", "+reward_model.reward_kwargs.max_resp_len=64"}))
            .reward_manager.max_resp_len == 64);

  const RunSettings prime = parse_run_settings(small({"reward_model.reward_manager=prime"}));
  CHECK(prime.reward_manager.num_workers == 64);  // verl's prime
  CHECK(prime.reward_manager.timeout_s == 300.0);
  CHECK(prime.reward_manager.timeout_score == 0.0);
  CHECK(prime.reward_manager.failure_scores);

  const RunSettings batch = parse_run_settings(
      small({"reward_model.reward_manager=batch", "+reward_model.reward_kwargs.a=1", "+reward_model.reward_kwargs.b=2",
             "+custom_reward_function.reward_kwargs.b=3", "custom_reward_function.name=mine"}));
  CHECK(batch.reward_manager.kwargs == nlohmann::json{{"a", 1}, {"b", 3}});  // the function's own win
  CHECK(batch.custom_reward.name == "mine");

  CHECK_THAT(settings_error({"reward_model.reward_manager=fancy"}),
             Contains("reward_model.reward_manager") && Contains("'fancy'") &&
                 Contains("batch, dapo, mgr_shout, naive, prime"));
  CHECK_THAT(settings_error({"+reward_model.reward_kwargs.max_resp_len=5"}),
             Contains("reward_model.reward_kwargs.max_resp_len") && Contains("naive manager takes no keyword"));
  CHECK_THAT(settings_error({"reward_model.reward_manager=dapo", "+reward_model.reward_kwargs.overlong=1"}),
             Contains("reward_model.reward_kwargs.overlong = 1"));
  CHECK_THAT(settings_error(
                 {"reward_model.reward_manager=dapo", "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True"}),
             Contains("overlong_buffer_cfg.len") && Contains("not set"));
  CHECK_THAT(
      settings_error({"reward_model.reward_manager=dapo", "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
                      "+reward_model.reward_kwargs.overlong_buffer_cfg.len=101"}),
      Contains("101 exceeds max_resp_len 100"));
  CHECK_THAT(settings_error(
                 {"reward_model.reward_manager=dapo", "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=yes"}),
             Contains("overlong_buffer_cfg.enable") && Contains("not a boolean"));
  CHECK_THAT(
      settings_error({"reward_model.reward_manager=dapo", "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
                      "+reward_model.reward_kwargs.overlong_buffer_cfg.len=10",
                      "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=-1"}),
      Contains("penalty_factor") && Contains("negative"));
  CHECK_THAT(settings_error({"+custom_reward_function.reward_kwargs.x=1"}),
             Contains("custom_reward_function.reward_kwargs.x") && Contains("only with custom_reward_function.path"));
  CHECK_THAT(settings_error({"+custom_reward_function.reward_kwargs.x=1", "custom_reward_function.path=/r.so"}),
             Contains("batch manager's does"));
  CHECK_THAT(settings_error({"reward_model.reward_manager=batch", "verlpp.reward.num_workers=4"}),
             Contains("verlpp.reward.num_workers") && Contains("once per batch"));
  CHECK_THAT(settings_error({"verlpp.reward.num_workers=0"}),
             Contains("verlpp.reward.num_workers") && Contains("0: needs 1 to 4096"));
  CHECK_THAT(settings_error({"verlpp.reward.timeout_s=-2"}),
             Contains("verlpp.reward.timeout_s") && Contains("-2: needs a positive"));
}
