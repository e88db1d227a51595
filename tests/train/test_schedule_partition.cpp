// LR schedules at hand-computed points, and balanced partitions against brute force.
#include <verlpp/core/error.hpp>
#include <verlpp/train/lr_schedule.hpp>
#include <verlpp/train/partition.hpp>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp::train;
using Catch::Contains;

TEST_CASE("lr schedule: warmup then constant or cosine", "[schedule]") {
  LrSchedule constant({2e-6, "constant", 10, 100, 0.0, 0.5});
  CHECK(constant.factor(0) == 0.0);
  CHECK(constant.factor(5) == Approx(0.5));
  CHECK(constant.factor(10) == 1.0);
  CHECK(constant.lr(50) == Approx(2e-6));
  LrSchedule cosine({1.0, "cosine", 10, 110, 0.1, 0.5});
  CHECK(cosine.factor(9) == Approx(0.9));
  CHECK(cosine.factor(10) == Approx(1.0));
  CHECK(cosine.factor(60) == Approx(0.55));  // halfway: cos(pi/2) = 0 -> 0.1 + 0.9 * 0.5
  CHECK(cosine.factor(110) == Approx(0.1));  // the floor
  LrSchedule no_warmup({1.0, "cosine", 0, 4, 0.0, 0.5});
  CHECK(no_warmup.factor(0) == Approx(1.0));
  CHECK(no_warmup.factor(2) == Approx(0.5));
  CHECK(resolve_warmup_steps(5, 0.5, 100) == 5);
  CHECK(resolve_warmup_steps(-1, 0.25, 10) == 2);  // int(2.5)
  CHECK(resolve_warmup_steps(-1, 0.0, 10) == 0);
  CHECK_THROWS_WITH(LrSchedule({1.0, "linear", 0, 1, 0.0, 0.5}), Contains("'linear'"));
  CHECK_THROWS_WITH(resolve_warmup_steps(-1, 1.5, 10), Contains("1.5"));
}

namespace {

int64_t group_sum(const std::vector<int64_t>& g, const std::vector<int64_t>& lens) {
  int64_t s = 0;
  for (int64_t i : g) s += lens[size_t(i)];
  return s;
}

void expect_exactly_once(const std::vector<std::vector<int64_t>>& groups, size_t n) {
  std::vector<int> count(n, 0);
  for (const auto& g : groups)
    for (int64_t i : g) count[size_t(i)]++;
  for (size_t i = 0; i < n; ++i) CHECK(count[i] == 1);
}

// The best possible largest group sum, by trying every assignment (small n only).
int64_t brute_force_max(const std::vector<int64_t>& lens, int64_t k, bool equal_size) {
  const size_t n = lens.size();
  int64_t best = INT64_MAX;
  std::vector<int64_t> sums(static_cast<size_t>(k)), counts(static_cast<size_t>(k));
  std::function<void(size_t)> go = [&](size_t i) {
    if (i == n) {
      if (equal_size && std::any_of(counts.begin(), counts.end(), [&](int64_t c) { return c != int64_t(n) / k; }))
        return;
      best = std::min(best, *std::max_element(sums.begin(), sums.end()));
      return;
    }
    for (int64_t g = 0; g < k; ++g) {
      sums[size_t(g)] += lens[i];
      counts[size_t(g)]++;
      go(i + 1);
      sums[size_t(g)] -= lens[i];
      counts[size_t(g)]--;
    }
  };
  go(0);
  return best;
}

}  // namespace

TEST_CASE("balanced partitions: exactly once, equal sizes, near the optimum", "[partition]") {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t k = 2 + trial % 2;
    const size_t n = size_t(k) * (2 + size_t(trial % 3));
    std::vector<int64_t> lens(n);
    for (auto& l : lens) l = 1 + int64_t(rng() % 500);
    for (bool equal : {false, true}) {
      auto groups = balanced_partitions(lens, k, equal);
      REQUIRE(groups.size() == size_t(k));
      expect_exactly_once(groups, n);
      if (equal)
        for (const auto& g : groups) CHECK(g.size() == n / size_t(k));
      int64_t largest = 0;
      for (const auto& g : groups) largest = std::max(largest, group_sum(g, lens));
      int64_t optimum = brute_force_max(lens, k, equal);
      int64_t max_item = *std::max_element(lens.begin(), lens.end());
      INFO("trial " << trial << " equal " << equal << ": largest " << largest << " optimum " << optimum);
      CHECK(largest >= optimum);
      CHECK(largest <= optimum + max_item);
    }
  }
  // The textbook case: differencing gives 16/14 where 15/15 exists; both groups used.
  auto g = balanced_partitions({8, 7, 6, 5, 4}, 2, false);
  CHECK(std::max(group_sum(g[0], {8, 7, 6, 5, 4}), group_sum(g[1], {8, 7, 6, 5, 4})) == 16);
  CHECK_THROWS_WITH(balanced_partitions({1, 2, 3}, 2, true), Contains("3 sequences do not split into 2 equal groups"));
  CHECK_THROWS_WITH(balanced_partitions({1}, 2, false), Contains("cannot fill 2 groups"));
}

TEST_CASE("dynamic micro-batches respect the token budget", "[partition]") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<int64_t> lens(5 + size_t(trial % 20));
    for (auto& l : lens) l = 1 + int64_t(rng() % 100);
    const int64_t budget = 100 + int64_t(rng() % 200);
    auto groups = dynamic_micro_batches(lens, budget);
    expect_exactly_once(groups, lens.size());
    int64_t total = std::accumulate(lens.begin(), lens.end(), int64_t(0));
    CHECK(int64_t(groups.size()) >= (total + budget - 1) / budget);
    for (const auto& g : groups) CHECK(group_sum(g, lens) <= budget);
  }
  CHECK(dynamic_micro_batches({10, 10, 10}, 100, 2).size() == 2);
  CHECK(dynamic_micro_batches({}, 10).empty());
  CHECK_THROWS_WITH(dynamic_micro_batches({5, 120, 5}, 100), Contains("sequence 1 has 120 tokens"));
}
