// Validation metrics against three independent references: numpy's published draws for the
// bootstrap's generator, a plain reimplementation in this file on fixed samples, and verl's own
// definitions (commit b178a3cd: metric_utils.process_validation_metrics, bootstrap_metric,
// calc_maj_val and ray_trainer._val_metrics_update) evaluated on a fixed input.
#include <verlpp/tracking/validation_metrics.hpp>
#include <verlpp/core/error.hpp>

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using Catch::Contains;
using nlohmann::json;
using namespace verlpp::tracking;

namespace {

double plain_mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / double(v.size());
}

double plain_std(const std::vector<double>& v) {
  const double m = plain_mean(v);
  double sum = 0;
  for (double x : v) sum += (x - m) * (x - m);
  return std::sqrt(sum / double(v.size()));
}

// The value of the most frequent vote's first response, ties to the vote seen first, by counting
// into a map and scanning the subset again.
double plain_majority(const std::vector<std::string>& votes, const std::vector<double>& values) {
  std::map<std::string, int> count;
  for (const auto& v : votes) ++count[v];
  int most = 0;
  for (const auto& [vote, c] : count) most = std::max(most, c);
  for (size_t k = 0; k < votes.size(); ++k)
    if (count[votes[k]] == most) return values[k];
  return 0;
}

}  // namespace

TEST_CASE("the bootstrap draws numpy's indices: RandomState seeded 42, randint's masked rejection", "[validation]") {
  // numpy's np.random.seed(42); np.random.randint(0, 10, 5) and randint(0, 100, 10), the values
  // numpy's users know by heart; choice(n, size) with replacement is randint(0, n, size).
  CHECK(numpy_choice_indices(10, 1, 5, 42) == std::vector<int64_t>{6, 3, 7, 4, 6});
  CHECK(numpy_choice_indices(100, 1, 10, 42) == std::vector<int64_t>{51, 92, 14, 71, 60, 20, 82, 86, 74, 74});
  // A matrix is filled row after row from the same stream.
  const std::vector<int64_t> matrix = numpy_choice_indices(10, 5, 2, 42);
  CHECK(std::vector<int64_t>(matrix.begin(), matrix.begin() + 5) == std::vector<int64_t>{6, 3, 7, 4, 6});
  // One response: every index is 0 (numpy draws nothing for an empty range).
  CHECK(numpy_choice_indices(1, 3, 2, 42) == std::vector<int64_t>(6, 0));
  CHECK_THROWS_WITH(numpy_choice_indices(0, 1, 1, 42), Contains("cannot draw from 0 responses"));
}

TEST_CASE("numpy_sum adds as a float64 sum should, and verl's subset sizes double up to N", "[validation]") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t count : {0, 1, 7, 8, 9, 127, 128, 129, 1000, 4099}) {
    std::vector<double> v(static_cast<size_t>(count));
    long double exact = 0;
    for (double& x : v) exact += (x = u(rng));
    CHECK(numpy_sum(v.data(), count) == Approx(double(exact)).margin(1e-12));
    std::vector<double> ints(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) ints[size_t(i)] = double(i % 3);
    double whole = 0;
    for (double x : ints) whole += x;
    CHECK(numpy_sum(ints.data(), count) == whole);  // integers: exact in any order
  }
  CHECK(bootstrap_subset_sizes(1).empty());
  CHECK(bootstrap_subset_sizes(2) == std::vector<int64_t>{2});
  CHECK(bootstrap_subset_sizes(3) == std::vector<int64_t>{2, 3});
  CHECK(bootstrap_subset_sizes(8) == std::vector<int64_t>{2, 4, 8});
  CHECK(bootstrap_subset_sizes(10) == std::vector<int64_t>{2, 4, 8, 10});
}

TEST_CASE("majority vote: the first value of the most frequent vote, ties to the vote seen first", "[validation]") {
  const json a = "A", b = "B", c = "C";
  CHECK(majority_value({&a, &b, &a}, {0.9, 0.8, 0.7}) == 0.9);  // verl's docstring example
  CHECK(majority_value({&b, &a, &a, &b}, {0.1, 0.2, 0.3, 0.4}) == 0.1);
  CHECK(majority_value({&c, &a, &b, &a}, {0.1, 0.2, 0.3, 0.4}) == 0.2);
  CHECK_THROWS_WITH(majority_value({&a}, {1.0, 2.0}), Contains("1 votes for 2 values"));
}

TEST_CASE("process_validation_metrics equals a plain reimplementation on fixed samples", "[validation]") {
  // Two sources; 6 prompts of 5 responses with 0/1 accuracies, graded rewards and votes from a
  // small alphabet, rows shuffled so that a prompt's responses are not adjacent.
  std::mt19937 rng(11);
  ValidationSamples s;
  std::vector<size_t> order(30);
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::map<std::string, std::vector<std::vector<double>>> acc, reward;
  std::map<std::string, std::vector<std::vector<std::string>>> pred;
  std::vector<std::vector<size_t>> rows_of(6);
  for (size_t r : order) rows_of[r / 5].push_back(r);
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t prompt = order[i] / 5;
    const std::string source = prompt < 4 ? "alpha" : "beta";
    const bool right = rng() % 3 != 0;
    const double score = right ? 1.0 : double(rng() % 4) / 8.0;
    const std::string vote = std::string(1, char('a' + rng() % 3));
    s.data_sources.push_back(source);
    s.uids.push_back("p" + std::to_string(prompt));
    s.vars["acc"].push_back(right);
    s.vars["reward"].push_back(score);
    s.vars["pred"].push_back(vote);
  }
  BootstrapOptions options;
  options.n_bootstrap = 300;
  const ValidationTable table = process_validation_metrics(s, options);

  // The plain version: per prompt, its values in row order; subsets from the same draws.
  std::map<std::string, std::map<std::string, std::map<std::string, std::vector<double>>>> per_prompt;
  std::map<std::string, std::vector<size_t>> prompt_rows;
  for (size_t i = 0; i < s.uids.size(); ++i) prompt_rows[s.uids[i]].push_back(i);
  for (const auto& [uid, rows] : prompt_rows) {
    const std::string source = s.data_sources[rows[0]];
    std::vector<std::string> votes;
    for (size_t r : rows) votes.push_back(s.vars["pred"][r].get<std::string>());
    for (const std::string var : {"acc", "reward"}) {
      std::vector<double> v;
      for (size_t r : rows)
        v.push_back(s.vars[var][r].is_boolean() ? double(s.vars[var][r].get<bool>()) : s.vars[var][r].get<double>());
      auto& m = per_prompt[source][var];
      m["mean@5"].push_back(plain_mean(v));
      m["std@5"].push_back(plain_std(v));
      for (int64_t k : {2, 4, 5}) {
        const std::vector<int64_t> idx = numpy_choice_indices(5, options.n_bootstrap, k, 42);
        std::vector<double> best, worst, maj;
        for (int64_t b = 0; b < options.n_bootstrap; ++b) {
          std::vector<double> sub;
          std::vector<std::string> sub_votes;
          for (int64_t j = 0; j < k; ++j) {
            sub.push_back(v[size_t(idx[size_t(b * k + j)])]);
            sub_votes.push_back(votes[size_t(idx[size_t(b * k + j)])]);
          }
          best.push_back(*std::max_element(sub.begin(), sub.end()));
          worst.push_back(*std::min_element(sub.begin(), sub.end()));
          maj.push_back(plain_majority(sub_votes, sub));
        }
        m[fmt::format("best@{}/mean", k)].push_back(plain_mean(best));
        m[fmt::format("best@{}/std", k)].push_back(plain_std(best));
        m[fmt::format("worst@{}/mean", k)].push_back(plain_mean(worst));
        m[fmt::format("worst@{}/std", k)].push_back(plain_std(worst));
        m[fmt::format("maj@{}/mean", k)].push_back(plain_mean(maj));
        m[fmt::format("maj@{}/std", k)].push_back(plain_std(maj));
      }
    }
  }
  REQUIRE(table.size() == 2);
  size_t compared = 0;
  for (const auto& [source, vars] : per_prompt) {
    REQUIRE(table.count(source));
    REQUIRE(table.at(source).size() == 2);  // acc and reward; pred is a string variable
    for (const auto& [var, metrics] : vars) {
      REQUIRE(table.at(source).at(var).size() == metrics.size());
      for (const auto& [metric, values] : metrics) {
        INFO(source << "/" << var << "/" << metric);
        CHECK(table.at(source).at(var).at(metric) == Approx(plain_mean(values)).margin(1e-12));
        ++compared;
      }
    }
  }
  CHECK(compared == 2 * 2 * 20);
}

TEST_CASE("best@k and worst@k approach their closed forms 1 - (1 - p)^k and p^k", "[validation]") {
  // One prompt of 8 responses, 3 correct: with many subsets drawn with replacement the bootstrap
  // mean tends to the probability that a k-subset holds a correct (or only correct) response.
  ValidationSamples s;
  for (int i = 0; i < 8; ++i) {
    s.data_sources.push_back("d");
    s.uids.push_back("u");
    s.vars["acc"].push_back(i % 3 == 1);  // rows 1, 4, 7
  }
  BootstrapOptions many;
  many.n_bootstrap = 200000;
  const auto& acc = process_validation_metrics(s, many).at("d").at("acc");
  const double p = 3.0 / 8.0;
  for (int k : {2, 4, 8}) {
    INFO("k = " << k);
    CHECK(acc.at(fmt::format("best@{}/mean", k)) == Approx(1 - std::pow(1 - p, k)).margin(0.005));
    CHECK(acc.at(fmt::format("worst@{}/mean", k)) == Approx(std::pow(p, k)).margin(0.005));
  }
  CHECK(acc.at("mean@8") == p);
  CHECK(acc.at("std@8") == Approx(std::sqrt(p * (1 - p))).margin(1e-15));
}

TEST_CASE("validation metrics equal verl's definitions on a fixed input", "[validation]") {
  // Rows (source, uid, reward, acc, pred) in a mixed order; "math" reports acc and pred (as verl's
  // math_dapo does), "arith" only the reward (its acc and pred are null here). Expected: verl
  // b178a3cd's process_validation_metrics and _val_metrics_update transcribed to plain Python
  // (numpy's RandomState replaced by Python's MT19937 in the init_genrand(42) state, checked
  // against the draws above) and run on each source's rows, which is what verl computes for
  // them: its sources share nothing but the seed, and every bootstrap call re-seeds.
  struct Row {
    const char* source;
    const char* uid;
    double reward;
    json acc, pred;
  };
  const std::vector<Row> rows = {
      {"math", "m0", 1.0, true, "4"},   {"arith", "a0", 0.5, nullptr, nullptr}, {"math", "m1", -1.0, false, "7"},
      {"math", "m0", 1.0, true, "4"},   {"math", "m2", -1.0, false, "x"},       {"arith", "a1", 0.25, nullptr, nullptr},
      {"math", "m1", 1.0, true, "3"},   {"math", "m0", -1.0, false, "5"},       {"arith", "a0", 0.0, nullptr, nullptr},
      {"math", "m2", -1.0, false, "y"}, {"math", "m1", 1.0, true, "3"},         {"arith", "a1", 0.75, nullptr, nullptr},
      {"math", "m0", 1.0, true, "4"},   {"math", "m2", -1.0, false, "z"},       {"arith", "a0", 1.0, nullptr, nullptr},
      {"math", "m1", -1.0, false, "7"}, {"math", "m2", 1.0, true, "w"},         {"arith", "a1", 0.1, nullptr, nullptr}};
  const std::map<std::string, double> verl = {{"val-aux/arith/reward/best@2/mean", 0.6106500000000005},
                                              {"val-aux/arith/reward/best@2/std", 0.3070392573789234},
                                              {"val-aux/arith/reward/std@3", 0.34306857856970707},
                                              {"val-aux/arith/reward/worst@2/mean", 0.25344999999999895},
                                              {"val-aux/arith/reward/worst@2/std", 0.2701005637732081},
                                              {"val-aux/arith/reward/worst@3/mean", 0.16772499999999885},
                                              {"val-aux/arith/reward/worst@3/std", 0.2052417084841821},
                                              {"val-aux/math/acc/best@2/mean", 0.6953333333333332},
                                              {"val-aux/math/acc/best@2/std", 0.4007961291069157},
                                              {"val-aux/math/acc/maj@2/mean", 0.4956666666666667},
                                              {"val-aux/math/acc/maj@2/std", 0.4534062586423073},
                                              {"val-aux/math/acc/std@4", 0.45534180126147955},
                                              {"val-aux/math/acc/worst@2/mean", 0.29933333333333334},
                                              {"val-aux/math/acc/worst@2/std", 0.38703276037952167},
                                              {"val-aux/math/acc/worst@4/mean", 0.139},
                                              {"val-aux/math/acc/worst@4/std", 0.26608655393984476},
                                              {"val-aux/math/reward/best@2/mean", 0.3906666666666667},
                                              {"val-aux/math/reward/best@2/std", 0.8015922582138314},
                                              {"val-aux/math/reward/best@4/mean", 0.734},
                                              {"val-aux/math/reward/best@4/std", 0.5223714757250674},
                                              {"val-aux/math/reward/maj@2/mean", -0.008666666666666656},
                                              {"val-aux/math/reward/maj@2/std", 0.9068125172846146},
                                              {"val-aux/math/reward/maj@4/mean", 0.05066666666666664},
                                              {"val-aux/math/reward/maj@4/std", 0.8461986211014675},
                                              {"val-aux/math/reward/mean@4", 0.0},
                                              {"val-aux/math/reward/std@4", 0.9106836025229591},
                                              {"val-aux/math/reward/worst@2/mean", -0.4013333333333333},
                                              {"val-aux/math/reward/worst@2/std", 0.7740655207590433},
                                              {"val-aux/math/reward/worst@4/mean", -0.722},
                                              {"val-aux/math/reward/worst@4/std", 0.5321731078796895},
                                              {"val-core/arith/reward/best@3/mean", 0.7081000000000002},
                                              {"val-core/arith/reward/best@3/std", 0.26069697509415024},
                                              {"val-core/arith/reward/mean@3", 0.43333333333333335},
                                              {"val-core/math/acc/best@4/mean", 0.867},
                                              {"val-core/math/acc/best@4/std", 0.2611857378625337},
                                              {"val-core/math/acc/maj@4/mean", 0.5253333333333333},
                                              {"val-core/math/acc/maj@4/std", 0.42309931055073374},
                                              {"val-core/math/acc/mean@4", 0.5}};
  ValidationSamples s;
  for (const Row& r : rows) {
    s.data_sources.push_back(r.source);
    s.uids.push_back(r.uid);
    s.vars["reward"].push_back(r.reward);
    s.vars["acc"].push_back(r.acc);
    s.vars["pred"].push_back(r.pred);
  }
  const json ours = validation_metric_names(process_validation_metrics(s));
  std::set<std::string> our_keys, verl_keys;
  for (const auto& [key, value] : ours.items()) our_keys.insert(key);
  for (const auto& [key, value] : verl) verl_keys.insert(key);
  CHECK(our_keys == verl_keys);
  for (const auto& [key, value] : verl) {
    INFO(key);
    REQUIRE(ours.contains(key));
    // These add integers (any order is exact) or fewer than 8 terms (in order, as Python does).
    if (key.find("/mean@") != std::string::npos || key.find("math/acc/best@4/mean") != std::string::npos)
      CHECK(ours[key].get<double>() == value);
    else
      CHECK(ours[key].get<double>() == Approx(value).margin(1e-12));
  }
}

TEST_CASE("validation metric names: one response per prompt, and bad input", "[validation]") {
  // Greedy validation (N = 1): mean@1 alone, in val-core for the core variable.
  ValidationSamples s;
  s.data_sources = {"x", "x", "y"};
  s.uids = {"u0", "u1", "u2"};
  s.vars["reward"] = {1.0, 0.0, -1.0};
  s.vars["acc"] = {true, false, nullptr};  // source y's scorer reports no acc
  s.vars["pred"] = {"1", "2", nullptr};
  const json names = validation_metric_names(process_validation_metrics(s));
  CHECK(names ==
        json{{"val-core/x/acc/mean@1", 0.5}, {"val-aux/x/reward/mean@1", 0.5}, {"val-core/y/reward/mean@1", -1.0}});
  ValidationSamples bad = s;
  bad.vars["acc"].pop_back();
  CHECK_THROWS_WITH(process_validation_metrics(bad), Contains("the variable 'acc' has 2 values for 3 responses"));
  bad = s;
  bad.uids.pop_back();
  CHECK_THROWS_WITH(process_validation_metrics(bad), Contains("2 uids for 3 responses"));
}
