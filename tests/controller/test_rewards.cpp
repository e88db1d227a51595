// Rewards: verl's gsm8k and math rules on hand-worked cases (including the reference's odd
// corners: clipping, commas kept in flexible mode, \fbox scoring 0, the plain-equality fallback),
// math_dapo and Search-R1 exact match, the demo task, the registry's dispatch (verl's source
// names, the aime prefix, refused sources, extras), and a custom function from a shared object.
// test_reward_corpus.cpp checks the same rules against verl's own scores on thousands of cases.
#include <verlpp/reward/reward.hpp>
#include <verlpp/tasks/arith_task.hpp>
#include <verlpp/core/error.hpp>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp::config;
using namespace verlpp::reward;
using namespace verlpp::tasks;
using Catch::Contains;

TEST_CASE("gsm8k strict and flexible", "[reward]") {
  CHECK(rules::gsm8k("so the total is\n#### 72", "72") == 1.0);
  CHECK(rules::gsm8k("#### 1,234", "1234") == 1.0);
  CHECK(rules::gsm8k("#### 5 and later #### 6", "6") == 1.0);
  CHECK(rules::gsm8k("#### 5 and later #### 6", "5") == 0.0);
  CHECK(rules::gsm8k("#### -3", "-3") == 1.0);
  CHECK(rules::gsm8k("#### $5", "5") == 0.0);  // '$' right after "#### " is no number
  CHECK(rules::gsm8k("the answer is 42", "42") == 0.0);
  CHECK(rules::gsm8k("the answer is 42", "42", true) == 1.0);
  CHECK(rules::gsm8k("#### 41", "42", false, 0.1) == 0.1);  // format score for a wrong answer
  CHECK(rules::gsm8k("no number at all", "42", false, 0.1) == 0.0);
  // Only the last 300 characters are searched.
  CHECK(rules::gsm8k("#### 7 " + std::string(300, 'x'), "7") == 0.0);
  CHECK(rules::gsm8k(std::string(300, 'x') + " #### 7", "7") == 1.0);
  bool found = false;
  CHECK(rules::gsm8k_extract("3, 4, and .", true, &found) == "4,");  // flexible keeps commas
  CHECK(found);
  CHECK(rules::gsm8k_extract("-5 apples", true, &found) == "-5");
  CHECK(rules::gsm8k_extract(". .", true, &found) == ".");  // nothing valid: the first stays
}

TEST_CASE("math: last boxed answer under the Hendrycks normalisation", "[reward]") {
  CHECK(rules::math("so \\boxed{\\frac{1}{2}}", "\\frac12") == 1.0);
  CHECK(rules::math("\\boxed{0.5}", "\\frac{1}{2}") == 1.0);
  CHECK(rules::math("\\boxed{1/2}", "\\frac{1}{2}") == 1.0);
  CHECK(rules::math("\\boxed{10\\%}", "10") == 1.0);
  CHECK(rules::math("\\boxed{x = 3}", "3") == 1.0);
  CHECK(rules::math("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}") == 1.0);
  CHECK(rules::math("\\boxed{\\dfrac{3}{4}}", "\\frac34") == 1.0);
  CHECK(rules::math("\\boxed{\\left(1,2\\right)}", "(1,2)") == 1.0);
  CHECK(rules::math("\\boxed{5\\text{ cm}}", "5") == 1.0);
  CHECK(rules::math("\\boxed{90^\\circ}", "90") == 1.0);
  CHECK(rules::math("first \\boxed{1} then \\boxed{2}", "2") == 1.0);
  CHECK(rules::math("first \\boxed{1} then \\boxed{2}", "1") == 0.0);
  CHECK(rules::math("\\boxed 7$ done", "7") == 1.0);
  CHECK(rules::math("\\fbox{2}", "2") == 0.0);  // remove_boxed rejects \fbox, as in verl
  CHECK(rules::math("no box, just 2", "2") == 0.0);
  CHECK(rules::math("\\boxed{3", "3") == 0.0);  // unbalanced
  CHECK(rules::math("\\boxed{4}", "5") == 0.0);
  bool found = false;
  CHECK(rules::last_boxed("a \\boxed{\\frac{1}{2}} b", &found) == "\\boxed{\\frac{1}{2}}");
  CHECK(found);
}

TEST_CASE("math equivalence: the reference's failure paths", "[reward]") {
  // int('x') raises inside fix_a_slash_b, which then keeps the cleaned string (spaces gone).
  CHECK(rules::math_equivalent("x/2", "x/ 2"));
  CHECK_FALSE(rules::math_equivalent("x/2", "x/3"));
  CHECK(rules::math_equivalent("3/4", " 3/4"));  // integers: normalised to \frac{3}{4}
  CHECK(rules::math_equivalent("\\sqrt", "\\sqrt"));
  CHECK_FALSE(rules::math_equivalent("\\sqrt", " \\sqrt"));
  CHECK(rules::math_equivalent(".5", "0.5"));
  CHECK(rules::math_equivalent("1\\text{ a}\\text{ b}", "1\\text{ a}\\text{ b}"));
}

TEST_CASE("math: code points, any-size integers and verl's percent removal", "[reward]") {
  CHECK(rules::math("\\boxed{\\pi / 2}", "\\pi/2") == 1.0);        // not two integers: the cleaned string stays
  CHECK(rules::math("\\boxed{\\fracπ2}", "\\frac{π}{2}") == 1.0);  // π is one character
  CHECK(rules::math("\\boxed{x²=4}", "4") == 1.0);                 // "x²" is two characters
  CHECK(rules::math("\\boxed{50\\\\\\%}", "50") ==
        1.0);  // two backslashes fold to one, then backslash-backslash-% goes
  CHECK(rules::math_equivalent("123456789012345678901234567890/3", "\\frac{123456789012345678901234567890}{3}"));
  CHECK_FALSE(rules::math_equivalent("01/2", "\\frac{1}{2}"));  // str(int("01")) is "1": kept as written
}

TEST_CASE("math_dapo: the last Answer line, +1/-1 with acc and pred", "[reward]") {
  RewardResult r = rules::math_dapo("work...\nAnswer: 1,000 dollars", "1000");
  CHECK(r.score == 1.0);
  CHECK(r.extra == nlohmann::json({{"acc", true}, {"pred", "1000"}}));
  r = rules::math_dapo("Answer: 5\nanswer : \\frac12", "\\frac{1}{2}");
  CHECK(r.score == 1.0);
  CHECK(r.extra["pred"] == "\\frac{1}{2}");
  r = rules::math_dapo("no answer line", "5");
  CHECK(r.score == -1.0);
  CHECK(r.extra == nlohmann::json({{"acc", false}, {"pred", "[INVALID]"}}));
  // Only the last 300 characters count, and they are characters, not bytes.
  CHECK(rules::math_dapo("Answer: 5\n" + std::string(290, 'x'), "5").score == 1.0);
  CHECK(rules::math_dapo("Answer: 5\n" + std::string(291, 'x'), "5").score == -1.0);
  std::string pis;
  for (int i = 0; i < 290; ++i) pis += "π";
  CHECK(rules::math_dapo("Answer: 5\n" + pis, "5").score == 1.0);
  CHECK(rules::math_dapo_normalize("x = \\text{5} units") == "5");
}

TEST_CASE("qa_em: Search-R1 exact match", "[reward]") {
  const nlohmann::json beatles = {{"target", {"The Beatles", "Beatles"}}};
  CHECK(rules::qa_em("<answer> the beatles! </answer>", beatles) == 1.0);
  CHECK(rules::qa_em("<answer>Beatles</answer><answer>Stones</answer>", beatles) == 0.0);  // the last counts
  CHECK(rules::qa_em("Beatles", beatles) == 0.0);
  std::string flood = "<answer>Beatles</answer>";
  for (int i = 0; i < 10; ++i) flood += "</answer>";
  CHECK(rules::qa_em(flood, beatles) == 0.25);  // more than ten closing tags: a quarter
  CHECK(rules::qa_em("<answer>İSTANBUL</answer>", {{"target", "i\u0307stanbul"}}) == 1.0);  // Unicode lowercase
  CHECK(rules::qa_normalize("An  Apple,\u00a0the Pie") == "apple pie");
  CHECK_THROWS_WITH(rules::qa_em("<answer>x</answer>", "Paris"), Contains("\"target\""));
  CHECK_THROWS_WITH(rules::qa_em("<answer>x</answer>", {{"target", {1}}}), Contains("not a string"));
}

TEST_CASE("arith (the demo task's source): the last integer must equal the ground truth", "[reward]") {
  CHECK(arith_reward("12+7=19", "19") == 1.0);
  CHECK(arith_reward("answer -3", "-3") == 1.0);
  CHECK(arith_reward("19 apples", " 19\n") == 1.0);
  CHECK(arith_reward("18", "19") == 0.0);
  CHECK(arith_reward("", "19") == 0.0);
  CHECK(arith_reward("007", "7") == 0.0);
}

TEST_CASE("registry and scorer", "[reward]") {
  RewardScorer scorer;
  // "arith" is the demo task's, registered by the programs that run it (tasks/), twice harmlessly.
  register_arith_reward();
  register_arith_reward();
  CHECK_NOTHROW(scorer.check_data_sources({"gsm8k", "math", "arith"}));
  CHECK(scorer.score({"arith", "12+7=19", "19", nullptr}) == 1.0);
  CHECK_THROWS_WITH(
      scorer.check_data_sources({"gsm8k", "wordle"}),
      Contains("no reward function for data_source 'wordle'") && Contains("arith, ") && Contains("gsm8k"));
  register_reward_function("test_echo_length", [](const RewardInput& in) { return double(in.response.size()); });
  CHECK_THROWS_WITH(register_reward_function("test_echo_length", [](const RewardInput&) { return 0.0; }),
                    Contains("already registered"));
  CHECK(scorer.score({"test_echo_length", "abcd", "x", nullptr}) == 4.0);
  CHECK(scorer.score({"gsm8k", "#### 8", "8", nullptr}) == 1.0);
  // verl's dispatch: "math" and every "aime..." source go to math_dapo, with its extras.
  CHECK_NOTHROW(scorer.check_data_sources({"math", "math_dapo", "aime2024", "searchR1_nq", "HuggingFaceH4/MATH-500"}));
  RewardResult dapo = scorer.evaluate({"aime_2025", "Answer: 7", "7", nullptr});
  CHECK(dapo.score == 1.0);
  CHECK(dapo.extra == nlohmann::json({{"acc", true}, {"pred", "7"}}));
  CHECK(scorer.evaluate({"math", "\\boxed{7}", "7", nullptr}).score == -1.0);  // no Answer: line
  CHECK(scorer.evaluate({"lighteval/MATH", "\\boxed{7}", "7", nullptr}).score == 1.0);
  CHECK(scorer.evaluate({"openai/gsm8k", "#### 7", "7", nullptr}).extra.empty());
  // Sources verl scores with sympy or by running code are refused, saying why.
  CHECK_THROWS_WITH(scorer.check_data_sources({"numina_olympiads"}), Contains("prime_math") && Contains("sympy"));
  CHECK_THROWS_WITH(scorer.check_data_sources({"codecontests"}), Contains("running the code"));
  CHECK_THROWS_WITH(scorer.check_data_sources({"hiyouga/geometry3k"}), Contains("geo3k"));
  // ... unless the user registers a scorer for them.
  register_reward_function_with_extras("apps", [](const RewardInput& in) {
    return RewardResult{double(in.response.size()), {{"length", in.response.size()}}};
  });
  CHECK_NOTHROW(scorer.check_data_sources({"apps"}));
  CHECK(scorer.evaluate({"apps", "abc", "", nullptr}).extra == nlohmann::json({{"length", 3}}));
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
  // verl's scripts name a Python file; the error says what is taken instead.
  CHECK_THROWS_WITH(RewardScorer::from_library("/work/reward.py", "compute_score"),
                    Contains("/work/reward.py: is a Python file") && Contains("C symbol in a shared library"));
}
