// Rewards: verl's gsm8k and math rules on hand-worked cases (including the reference's odd
// corners: clipping, commas kept in flexible mode, \fbox scoring 0, the plain-equality fallback),
// the demo task, the registry, and a custom function loaded from a shared object.
#include <verlpp/controller/reward.hpp>
#include <verlpp/core/error.hpp>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp::controller;
using Catch::Contains;

TEST_CASE("gsm8k strict and flexible", "[reward]") {
  CHECK(rewards::gsm8k("so the total is\n#### 72", "72") == 1.0);
  CHECK(rewards::gsm8k("#### 1,234", "1234") == 1.0);
  CHECK(rewards::gsm8k("#### 5 and later #### 6", "6") == 1.0);
  CHECK(rewards::gsm8k("#### 5 and later #### 6", "5") == 0.0);
  CHECK(rewards::gsm8k("#### -3", "-3") == 1.0);
  CHECK(rewards::gsm8k("#### $5", "5") == 0.0);  // '$' right after "#### " is no number
  CHECK(rewards::gsm8k("the answer is 42", "42") == 0.0);
  CHECK(rewards::gsm8k("the answer is 42", "42", true) == 1.0);
  CHECK(rewards::gsm8k("#### 41", "42", false, 0.1) == 0.1);  // format score for a wrong answer
  CHECK(rewards::gsm8k("no number at all", "42", false, 0.1) == 0.0);
  // Only the last 300 characters are searched.
  CHECK(rewards::gsm8k("#### 7 " + std::string(300, 'x'), "7") == 0.0);
  CHECK(rewards::gsm8k(std::string(300, 'x') + " #### 7", "7") == 1.0);
  bool found = false;
  CHECK(rewards::gsm8k_extract("3, 4, and .", true, &found) == "4,");  // flexible keeps commas
  CHECK(found);
  CHECK(rewards::gsm8k_extract("-5 apples", true, &found) == "-5");
  CHECK(rewards::gsm8k_extract(". .", true, &found) == ".");  // nothing valid: the first stays
}

TEST_CASE("math: last boxed answer under the Hendrycks normalisation", "[reward]") {
  CHECK(rewards::math("so \\boxed{\\frac{1}{2}}", "\\frac12") == 1.0);
  CHECK(rewards::math("\\boxed{0.5}", "\\frac{1}{2}") == 1.0);
  CHECK(rewards::math("\\boxed{1/2}", "\\frac{1}{2}") == 1.0);
  CHECK(rewards::math("\\boxed{10\\%}", "10") == 1.0);
  CHECK(rewards::math("\\boxed{x = 3}", "3") == 1.0);
  CHECK(rewards::math("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}") == 1.0);
  CHECK(rewards::math("\\boxed{\\dfrac{3}{4}}", "\\frac34") == 1.0);
  CHECK(rewards::math("\\boxed{\\left(1,2\\right)}", "(1,2)") == 1.0);
  CHECK(rewards::math("\\boxed{5\\text{ cm}}", "5") == 1.0);
  CHECK(rewards::math("\\boxed{90^\\circ}", "90") == 1.0);
  CHECK(rewards::math("first \\boxed{1} then \\boxed{2}", "2") == 1.0);
  CHECK(rewards::math("first \\boxed{1} then \\boxed{2}", "1") == 0.0);
  CHECK(rewards::math("\\boxed 7$ done", "7") == 1.0);
  CHECK(rewards::math("\\fbox{2}", "2") == 0.0);  // remove_boxed rejects \fbox, as in verl
  CHECK(rewards::math("no box, just 2", "2") == 0.0);
  CHECK(rewards::math("\\boxed{3", "3") == 0.0);  // unbalanced
  CHECK(rewards::math("\\boxed{4}", "5") == 0.0);
  bool found = false;
  CHECK(rewards::last_boxed("a \\boxed{\\frac{1}{2}} b", &found) == "\\boxed{\\frac{1}{2}}");
  CHECK(found);
}

TEST_CASE("math equivalence falls back to plain equality where the reference raises", "[reward]") {
  CHECK(rewards::math_equivalent("x/2", "x/2"));  // int('x') raises: compared as written
  CHECK_FALSE(rewards::math_equivalent("x/2", "x/ 2"));
  CHECK(rewards::math_equivalent("3/4", " 3/4"));  // integers: normalised to \frac{3}{4}
  CHECK(rewards::math_equivalent("\\sqrt", "\\sqrt"));
  CHECK_FALSE(rewards::math_equivalent("\\sqrt", " \\sqrt"));
  CHECK(rewards::math_equivalent(".5", "0.5"));
  CHECK(rewards::math_equivalent("1\\text{ a}\\text{ b}", "1\\text{ a}\\text{ b}"));
}

TEST_CASE("arith: the last integer must equal the ground truth", "[reward]") {
  CHECK(rewards::arith("12+7=19", "19") == 1.0);
  CHECK(rewards::arith("answer -3", "-3") == 1.0);
  CHECK(rewards::arith("19 apples", " 19\n") == 1.0);
  CHECK(rewards::arith("18", "19") == 0.0);
  CHECK(rewards::arith("", "19") == 0.0);
  CHECK(rewards::arith("007", "7") == 0.0);
}

TEST_CASE("registry and scorer", "[reward]") {
  RewardScorer scorer;
  CHECK_NOTHROW(scorer.check_data_sources({"gsm8k", "math", "arith"}));
  CHECK_THROWS_WITH(
      scorer.check_data_sources({"gsm8k", "wordle"}),
      Contains("no reward function for data_source 'wordle'") && Contains("arith, ") && Contains("gsm8k"));
  register_reward_function("test_echo_length", [](const RewardInput& in) { return double(in.response.size()); });
  CHECK_THROWS_WITH(register_reward_function("test_echo_length", [](const RewardInput&) { return 0.0; }),
                    Contains("already registered"));
  CHECK(scorer.score({"test_echo_length", "abcd", "x", nullptr}) == 4.0);
  CHECK(scorer.score({"gsm8k", "#### 8", "8", nullptr}) == 1.0);
  register_reward_function("test_throws", [](const RewardInput&) -> double { throw std::runtime_error("boom"); });
  CHECK_THROWS_WITH(scorer.score({"test_throws", "", "", nullptr}), Contains("test_throws") && Contains("boom"));
}

TEST_CASE("custom reward function from a shared object", "[reward]") {
  RewardScorer custom = RewardScorer::from_library(VERLPP_TEST_CUSTOM_REWARD, "length_score");
  CHECK_NOTHROW(custom.check_data_sources({"anything", "at_all"}));
  CHECK(custom.score({"plain", "hello", "\"x\"", nullptr}) == 5.0);
  CHECK(custom.score({"bonus", "hi", 3, {{"k", 1}}}) == 102.0);
  CHECK_THROWS_WITH(RewardScorer::from_library(VERLPP_TEST_CUSTOM_REWARD, "nope"), Contains("has no symbol 'nope'"));
  CHECK_THROWS_WITH(RewardScorer::from_library("/nonexistent/reward.so", "f"), Contains("cannot be loaded"));
}
