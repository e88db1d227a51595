// Masked statistics, group ids and every advantage estimator against plain fp64 loops written
// here from verl's definitions; random ragged batches (groups of 1, 2 and many rows, empty and
// full rows, masks with holes), fp64 and fp32, bool/int/float masks; hand-computed cases;
// registry and input errors.
#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <map>

#include <verlpp/algo/advantages.hpp>
#include <verlpp/algo/groups.hpp>
#include <verlpp/algo/masked.hpp>

#include "test_util.hpp"

using namespace algo_test;
namespace va = verlpp::algo;

namespace {

// ---- references (plain loops) ----------------------------------------------------------------

struct RefOut {
  Mat adv, ret;
};

Mat ref_whiten(const Mat& v, const Mat& m) {
  double s = 0, n = 0;
  for (size_t i = 0; i < v.size(); ++i)
    for (size_t t = 0; t < v[i].size(); ++t) {
      s += m[i][t] != 0 ? v[i][t] * m[i][t] : 0.0;
      n += m[i][t];
    }
  const double mean = s / (n + 1e-8);
  double ss = 0;
  for (size_t i = 0; i < v.size(); ++i)
    for (size_t t = 0; t < v[i].size(); ++t)
      if (m[i][t] != 0) ss += (v[i][t] - mean) * (v[i][t] - mean) * m[i][t];
  const double var = ss / (n + 1e-8) * (n / (n - 1));
  Mat out = v;
  for (auto& row : out)
    for (double& x : row) x = (x - mean) / std::sqrt(var + 1e-8);
  return out;
}

Mat times_mask(Mat v, const Mat& m) {
  for (size_t i = 0; i < v.size(); ++i)
    for (size_t t = 0; t < v[i].size(); ++t) v[i][t] *= m[i][t];
  return v;
}

Mat broadcast(const Vec& per_row, const Mat& m) {
  Mat out = m;
  for (size_t i = 0; i < m.size(); ++i)
    for (size_t t = 0; t < m[i].size(); ++t) out[i][t] = per_row[i] * m[i][t];
  return out;
}

Vec scores_of(const Batch& b) {
  Vec s;
  for (const Vec& r : b.rewards) s.push_back(row_sum(r));
  return s;
}

double mean_of(const Vec& s, const std::vector<int64_t>& rows) {
  double sum = 0;
  for (int64_t i : rows) sum += s[i];
  return sum / rows.size();
}

double std_of(const Vec& s, const std::vector<int64_t>& rows) {
  const double mu = mean_of(s, rows);
  double ss = 0;
  for (int64_t i : rows) ss += (s[i] - mu) * (s[i] - mu);
  return std::sqrt(ss / (rows.size() - 1));
}

RefOut ref_gae(const Batch& b, double gamma, double lam) {
  Mat adv = zeros_mat(b.rows, b.cols), ret = adv;
  for (int64_t i = 0; i < b.rows; ++i) {
    double nv = 0, lg = 0;
    for (int64_t t = b.cols - 1; t >= 0; --t) {
      const double m = b.mask[i][t];
      const double delta = b.rewards[i][t] + gamma * nv - b.values[i][t];
      const double g = delta + gamma * lam * lg;
      nv = b.values[i][t] * m + (1 - m) * nv;
      lg = g * m + (1 - m) * lg;
      adv[i][t] = lg;
      ret[i][t] = lg + b.values[i][t];
    }
  }
  return {ref_whiten(adv, b.mask), ret};
}

RefOut ref_rpp(const Batch& b, double gamma) {
  Mat ret = zeros_mat(b.rows, b.cols);
  for (int64_t i = 0; i < b.rows; ++i) {
    double g = 0;
    for (int64_t t = b.cols - 1; t >= 0; --t) {
      g = b.rewards[i][t] + gamma * g;
      ret[i][t] = g;
      g *= b.mask[i][t];
    }
  }
  return {times_mask(ref_whiten(ret, b.mask), b.mask), ret};
}

RefOut ref_remax(const Batch& b) {
  Mat ret = zeros_mat(b.rows, b.cols), adv = ret;
  for (int64_t i = 0; i < b.rows; ++i) {
    double g = 0;
    for (int64_t t = b.cols - 1; t >= 0; --t) {
      g += b.rewards[i][t] * b.mask[i][t];
      ret[i][t] = g;
      adv[i][t] = g - b.baselines[i] * b.mask[i][t];
    }
  }
  return {adv, ret};
}

RefOut ref_grpo(const Batch& b, double eps, bool norm) {
  const Vec s = scores_of(b);
  Vec a(b.rows);
  for (const auto& rows : group_rows(b.uids)) {
    const bool single = rows.size() == 1;
    const double mu = single ? 0.0 : mean_of(s, rows), sd = single ? 1.0 : std_of(s, rows);
    for (int64_t i : rows) a[i] = norm ? (s[i] - mu) / (sd + eps) : s[i] - mu;
  }
  Mat adv = broadcast(a, b.mask);
  return {adv, adv};
}

// verl's grpo_vectorized keeps its statistics in fp32 with a one-pass variance and a floor.
RefOut ref_grpo_vectorized(const Batch& b, double eps, bool norm) {
  const Vec s = scores_of(b);
  Vec a(b.rows);
  for (const auto& rows : group_rows(b.uids)) {
    float c = 0, s1 = 0, s2 = 0;
    for (int64_t i : rows) {
      const float x = static_cast<float>(s[i]);
      c += 1;
      s1 += x;
      s2 += x * x;
    }
    float mu = s1 / std::max(c, 1.0f);
    const float var = (s2 - s1 * s1 / std::max(c, 1.0f)) / std::max(c - 1.0f, 1.0f);
    float sd = std::sqrt(std::max(var, static_cast<float>(eps)));
    if (c <= 1) mu = 0, sd = 1;
    for (int64_t i : rows) a[i] = norm ? (s[i] - mu) / (static_cast<double>(sd) + eps) : s[i] - mu;
  }
  Mat adv = broadcast(a, b.mask);
  return {adv, adv};
}

RefOut ref_passk(const Batch& b, double eps, bool norm) {
  const Vec s = scores_of(b);
  Vec a(b.rows, 0.0);
  for (const auto& rows : group_rows(b.uids)) {
    std::vector<int64_t> order = rows;
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return s[x] > s[y]; });
    double gap = s[order[0]] - s[order[1]];
    if (norm) gap /= std_of(s, rows) + eps;
    a[order[0]] = gap;  // a tie gives gap 0, whichever row holds it
  }
  Mat adv = broadcast(a, b.mask);
  return {adv, adv};
}

RefOut ref_rloo(const Batch& b) {
  const Vec s = scores_of(b);
  Vec a(b.rows);
  for (const auto& rows : group_rows(b.uids)) {
    const double n = rows.size(), mu = mean_of(s, rows);
    for (int64_t i : rows) a[i] = n > 1 ? s[i] * n / (n - 1) - mu * n / (n - 1) : s[i];
  }
  Mat adv = broadcast(a, b.mask);
  return {adv, adv};
}

RefOut ref_rloo_vectorized(const Batch& b) {
  const Vec s = scores_of(b);
  Vec a(b.rows);
  for (const auto& rows : group_rows(b.uids)) {
    const double n = rows.size();
    double sum = 0;
    for (int64_t i : rows) sum += s[i];
    for (int64_t i : rows) a[i] = n > 1 ? (n * s[i] - sum) / (n - 1) : 0.0;
  }
  Mat adv = broadcast(a, b.mask);
  return {adv, adv};
}

RefOut ref_rpp_baseline(const Batch& b) {
  const Vec s = scores_of(b);
  Vec a(b.rows);
  for (const auto& rows : group_rows(b.uids)) {
    const double mu = rows.size() == 1 ? 0.0 : mean_of(s, rows);
    for (int64_t i : rows) a[i] = s[i] - mu;
  }
  Mat adv = times_mask(ref_whiten(broadcast(a, b.mask), b.mask), b.mask);
  return {adv, adv};
}

RefOut ref_opo(const Batch& b) {
  const Vec s = scores_of(b);
  Vec a(b.rows);
  for (const auto& rows : group_rows(b.uids)) {
    double num = 0, den = 0;
    for (int64_t i : rows) {
      num += row_sum(b.mask[i]) * s[i];
      den += row_sum(b.mask[i]);
    }
    const double base = rows.size() == 1 ? 0.0 : num / den;
    for (int64_t i : rows) a[i] = s[i] - base;
  }
  Mat adv = broadcast(a, b.mask);
  return {adv, adv};
}

RefOut ref_gpg(const Batch& b) {
  const Vec s = scores_of(b);
  int64_t nonzero = 0;
  for (double x : s) nonzero += x != 0;
  // verl: bsz / count_nonzero(...).clamp(min=1), i.e. reciprocal of the count in fp32 times B.
  const float alpha = (1.0f / static_cast<float>(std::max<int64_t>(nonzero, 1))) * static_cast<float>(b.rows);
  Vec a(b.rows);
  for (const auto& rows : group_rows(b.uids)) {
    const double mu = rows.size() == 1 ? 0.0 : mean_of(s, rows);
    for (int64_t i : rows) a[i] = static_cast<double>(alpha) * (s[i] - mu);
  }
  Mat adv = broadcast(a, b.mask);
  return {adv, adv};
}

va::AdvantageInputs inputs_of(const Batch& b, at::ScalarType dtype, at::ScalarType mask_dtype) {
  va::AdvantageInputs in;
  in.token_level_rewards = from_mat(b.rewards, dtype);
  in.values = from_mat(b.values, dtype);
  in.response_mask = from_mat(b.mask, mask_dtype);
  in.reward_baselines = from_vec(b.baselines, dtype);
  in.index = b.uids;
  return in;
}

std::string dtype_name(at::ScalarType t) { return c10::toString(t); }

}  // namespace

// ---- masked statistics ------------------------------------------------------------------------

TEST_CASE("masked_sum/mean/var/whiten match loops; padding NaN does not leak", "[masked]") {
  const Batch b = make_batch(11, {3, 4, 5}, 9, /*outcome_only=*/false, /*holes=*/true);
  for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    for (at::ScalarType mask_dtype : {dtype, at::kBool, at::kLong}) {
      INFO("dtype " << dtype_name(dtype) << " mask " << dtype_name(mask_dtype));
      Mat v = b.values;
      for (int64_t i = 0; i < b.rows; ++i)
        for (int64_t t = 0; t < b.cols; ++t)
          if (b.mask[i][t] == 0) v[i][t] = NAN;  // padding garbage must not matter
      const at::Tensor vt = from_mat(v, dtype), mt = from_mat(b.mask, mask_dtype);
      double s = 0, n = 0;
      Vec row_s(b.rows, 0.0), row_n(b.rows, 0.0);
      for (int64_t i = 0; i < b.rows; ++i)
        for (int64_t t = 0; t < b.cols; ++t)
          if (b.mask[i][t] != 0) {
            s += v[i][t], n += 1, row_s[i] += v[i][t], row_n[i] += 1;
          }
      // An int/bool mask makes verl's N/(N-1) and Σm + 1e-8 fp32 values: fp32-level agreement.
      const Tol tol = mask_dtype == dtype ? tol_for(dtype) : Tol{1e-6, 1e-6};
      check_scalar(va::masked_sum(vt, mt), s, tol.rtol, tol.atol, "masked_sum");
      check_scalar(va::masked_mean(vt, mt), s / (n + 1e-8), tol.rtol, tol.atol, "masked_mean");
      Vec row_mean(b.rows);
      for (int64_t i = 0; i < b.rows; ++i) row_mean[i] = row_s[i] / (row_n[i] + 1e-8);
      check_close(va::masked_sum(vt, mt, -1), row_s, tol.rtol, tol.atol, "masked_sum dim -1");
      check_close(va::masked_mean(vt, mt, -1), row_mean, tol.rtol, tol.atol, "masked_mean dim -1");
      const double mu = s / (n + 1e-8);
      double ss = 0;
      for (int64_t i = 0; i < b.rows; ++i)
        for (int64_t t = 0; t < b.cols; ++t)
          if (b.mask[i][t] != 0) ss += (v[i][t] - mu) * (v[i][t] - mu);
      check_scalar(va::masked_var(vt, mt, false), ss / (n + 1e-8), tol.rtol, tol.atol, "masked_var biased");
      check_scalar(va::masked_var(vt, mt), ss / (n + 1e-8) * n / (n - 1), tol.rtol, tol.atol, "masked_var unbiased");
      // Whitening transforms every element; NaN padding stays NaN, the rest must be exact.
      Mat masked_v = v;
      const Mat expected = ref_whiten(masked_v, b.mask);
      check_close(va::masked_whiten(vt, mt), expected, tol.rtol, tol.atol, "masked_whiten");
      Mat shifted = expected;
      for (auto& row : shifted)
        for (double& x : row) x += mu;
      check_close(va::masked_whiten(vt, mt, false), shifted, tol.rtol, tol.atol, "masked_whiten shift_mean=false");
    }
  }
}

TEST_CASE("masked_var rejects masks selecting 0 or 1 element", "[masked]") {
  const at::Tensor v = from_mat({{1.0, 2.0, 3.0}}, at::kFloat);
  REQUIRE_THROWS_WITH(va::masked_var(v, from_mat({{0.0, 0.0, 0.0}}, at::kFloat)),
                      Catch::Contains("selects no element"));
  REQUIRE_THROWS_WITH(va::masked_var(v, from_mat({{0.0, 1.0, 0.0}}, at::kFloat)),
                      Catch::Contains("exactly one element"));
  CHECK_NOTHROW(va::masked_var(v, from_mat({{0.0, 1.0, 0.0}}, at::kFloat), false));
  check_scalar(va::masked_var(v, from_mat({{0.0, 1.0, 1.0}}, at::kFloat)), 0.5, 1e-6, 1e-7, "var of {2, 3}");
}

TEST_CASE("make_groups numbers uids by first appearance; integer ids are checked", "[groups]") {
  const va::Groups g = va::make_groups({"b", "a", "b", "c", "a"}, at::kCPU);
  CHECK(g.num_groups == 3);
  check_close(g.ids, Vec{0, 1, 0, 2, 1}, 0, 0, "ids");
  const va::Groups h = va::make_groups(from_vec({4, 0, 4}, at::kLong));
  CHECK(h.num_groups == 5);
  REQUIRE_THROWS_WITH(va::make_groups(from_vec({1, -2}, at::kLong)), Catch::Contains("-2"));
  REQUIRE_THROWS_WITH(va::make_groups(from_vec({1.0}, at::kFloat)), Catch::Contains("integer dtype"));
  const va::Groups empty = va::make_groups(std::vector<std::string>{}, at::kCPU);
  CHECK(empty.num_groups == 0);
  CHECK(empty.ids.numel() == 0);
}

// ---- estimators vs references -----------------------------------------------------------------

TEST_CASE("every estimator matches its loop reference on random ragged batches", "[advantage]") {
  const std::vector<int> sizes = {1, 2, 7, 1, 3, 2, 16, 1};  // groups of one, two and many
  const std::vector<int> passk_sizes = {2, 3, 7, 2, 16};     // pass@k needs >= 2 per group
  va::AdvantageConfig cfg;
  cfg.gamma = 0.97;
  cfg.lam = 0.9;
  struct Estimator {
    std::string name;
    std::function<RefOut(const Batch&, const va::AdvantageConfig&)> ref;
    bool returns_checked;
  };
  const std::vector<Estimator> estimators = {
      {"gae", [](const Batch& b, const va::AdvantageConfig& c) { return ref_gae(b, c.gamma, c.lam); }, true},
      {"reinforce_plus_plus", [](const Batch& b, const va::AdvantageConfig& c) { return ref_rpp(b, c.gamma); }, true},
      {"remax", [](const Batch& b, const va::AdvantageConfig&) { return ref_remax(b); }, true},
      {"grpo",
       [](const Batch& b, const va::AdvantageConfig& c) { return ref_grpo(b, c.epsilon, c.norm_adv_by_std_in_grpo); },
       true},
      {"grpo_vectorized",
       [](const Batch& b, const va::AdvantageConfig& c) {
         return ref_grpo_vectorized(b, c.epsilon, c.norm_adv_by_std_in_grpo);
       },
       true},
      {"grpo_passk",
       [](const Batch& b, const va::AdvantageConfig& c) { return ref_passk(b, c.epsilon, c.norm_adv_by_std_in_grpo); },
       true},
      {"rloo", [](const Batch& b, const va::AdvantageConfig&) { return ref_rloo(b); }, true},
      {"rloo_vectorized", [](const Batch& b, const va::AdvantageConfig&) { return ref_rloo_vectorized(b); }, true},
      {"reinforce_plus_plus_baseline", [](const Batch& b, const va::AdvantageConfig&) { return ref_rpp_baseline(b); },
       true},
      {"opo", [](const Batch& b, const va::AdvantageConfig&) { return ref_opo(b); }, true},
      {"gpg", [](const Batch& b, const va::AdvantageConfig&) { return ref_gpg(b); }, true},
  };
  uint64_t seed = 100;
  for (const Estimator& est : estimators) {
    for (bool norm : {true, false}) {
      if (!norm && est.name.rfind("grpo", 0) != 0) continue;  // only the grpo family reads it
      cfg.norm_adv_by_std_in_grpo = norm;
      for (bool outcome_only : {true, false}) {
        for (bool holes : {false, true}) {
          const Batch b = make_batch(++seed, est.name == "grpo_passk" ? passk_sizes : sizes, 13, outcome_only, holes);
          const RefOut want = est.ref(b, cfg);
          for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
            for (at::ScalarType mask_dtype : {dtype, at::kLong}) {
              INFO(est.name << " norm " << norm << " outcome_only " << outcome_only << " holes " << holes << " dtype "
                            << dtype_name(dtype) << " mask " << dtype_name(mask_dtype));
              const va::AdvantageOutputs got = va::compute_advantage(est.name, inputs_of(b, dtype, mask_dtype), cfg);
              Tol tol = tol_for(dtype);
              if (mask_dtype != dtype || est.name == "grpo_vectorized") tol = {1e-6, 1e-6};
              if (dtype == at::kFloat) tol = {5e-5, 5e-5};
              CHECK(got.advantages.scalar_type() == dtype);
              check_close(got.advantages, want.adv, tol.rtol, tol.atol, est.name + " advantages");
              if (est.returns_checked) check_close(got.returns, want.ret, tol.rtol, tol.atol, est.name + " returns");
            }
          }
        }
      }
    }
  }
}

TEST_CASE("gae and reinforce_plus_plus, stepwise and scan, lengths around the chunk sizes", "[advantage]") {
  // T = 1, 2, 3 (no chunk body), perfect squares, tails of every length, a long row.
  for (va::Recurrence how : {va::Recurrence::stepwise, va::Recurrence::scan}) {
    for (int64_t cols : {1, 2, 3, 4, 8, 9, 10, 15, 16, 17, 50, 97, 300}) {
      const Batch b = make_batch(900 + cols, {3, 1, 2}, cols, /*outcome_only=*/false, true);
      for (double lam : {0.9, 1.0}) {
        INFO("T " << cols << " lam " << lam << " scan " << (how == va::Recurrence::scan));
        const va::AdvantageInputs in = inputs_of(b, at::kDouble, at::kDouble);
        const auto got =
            va::compute_gae_advantage_return(in.token_level_rewards, in.values, in.response_mask, 0.99, lam, how);
        const RefOut want = ref_gae(b, 0.99, lam);
        check_close(got.advantages, want.adv, 1e-9, 1e-10, "gae advantages");
        check_close(got.returns, want.ret, 1e-10, 1e-10, "gae returns");
        const auto rpp =
            va::compute_reinforce_plus_plus_outcome_advantage(in.token_level_rewards, in.response_mask, 0.99, how);
        const RefOut want_rpp = ref_rpp(b, 0.99);
        check_close(rpp.returns, want_rpp.ret, 1e-10, 1e-10, "reinforce_plus_plus returns");
        check_close(rpp.advantages, want_rpp.adv, 1e-9, 1e-10, "reinforce_plus_plus advantages");
        check_close(in.token_level_rewards, b.rewards, 0, 0, "inputs are left untouched");
        check_close(in.values, b.values, 0, 0, "inputs are left untouched");
      }
    }
    // A fractional mask weights the carried values, exactly as verl's update formula does.
    Batch b = make_batch(5, {2, 2}, 11, false, false);
    for (auto& row : b.mask)
      for (size_t t = 0; t < row.size(); ++t) row[t] *= 0.25 + 0.25 * (t % 3);
    const va::AdvantageInputs in = inputs_of(b, at::kFloat, at::kFloat);
    const auto got =
        va::compute_gae_advantage_return(in.token_level_rewards, in.values, in.response_mask, 1.0, 1.0, how);
    check_close(got.returns, ref_gae(b, 1.0, 1.0).ret, 1e-5, 1e-5, "gae, fractional mask, fp32");
  }
}

TEST_CASE("group_ids given as a tensor equal the string index path", "[advantage]") {
  const Batch b = make_batch(7, {1, 2, 5, 3}, 6, true);
  va::AdvantageInputs in = inputs_of(b, at::kDouble, at::kDouble);
  const at::Tensor from_strings = va::compute_advantage("grpo", in).advantages;
  const auto rows = group_rows(b.uids);
  Vec ids(b.rows);
  for (size_t g = 0; g < rows.size(); ++g)
    for (int64_t i : rows[g]) ids[i] = 3.0 * g + 1;  // sparse ids: unused groups in between
  in.group_ids = from_vec(ids, at::kLong);
  in.index.clear();
  check_close(va::compute_advantage("grpo", in).advantages, to_mat(from_strings), 0, 0, "grpo via group_ids");
}

// ---- hand-computed cases ----------------------------------------------------------------------

TEST_CASE("hand-computed small cases", "[advantage]") {
  const auto dt = at::kDouble;
  SECTION("gae") {
    va::AdvantageInputs in;
    in.token_level_rewards = from_mat({{0, 0, 1}, {1, 0, 0}}, dt);
    in.values = from_mat({{0.5, 0.5, 0.5}, {0, 1, 9}}, dt);
    in.response_mask = from_mat({{1, 1, 1}, {1, 1, 0}}, dt);
    const auto out = va::compute_advantage("gae", in);  // gamma = lam = 1
    // raw A: row 0 = 0.5 everywhere; row 1: t2 masked (A = 0), t1 = -1, t0 = 2 - 1 = 1.
    check_close(out.returns, Mat{{1, 1, 1}, {1, 0, 9}}, 1e-12, 1e-12, "gae returns");
    // whiten over {0.5, 0.5, 0.5, 1, -1}: mean 0.3, unbiased var 2.3/4 = 0.575.
    const double sd = std::sqrt(0.575);
    check_close(out.advantages, Mat{{0.2 / sd, 0.2 / sd, 0.2 / sd}, {0.7 / sd, -1.3 / sd, -0.3 / sd}}, 1e-7, 1e-7,
                "gae advantages");
  }
  SECTION("grpo, a group of three and a singleton") {
    va::AdvantageInputs in;
    in.token_level_rewards = from_mat({{0, 1}, {0, 0}, {0.5, 0}, {1, 0}}, dt);
    in.response_mask = from_mat({{1, 1}, {1, 1}, {1, 0}, {1, 1}}, dt);
    in.index = {"a", "a", "b", "a"};
    const auto out = va::compute_advantage("grpo", in);
    const double sd = std::sqrt(1.0 / 3.0), e = 1e-6;  // scores {1, 0, 1}: mean 2/3
    check_close(out.advantages,
                Mat{{(1 / 3.0) / (sd + e), (1 / 3.0) / (sd + e)},
                    {(-2 / 3.0) / (sd + e), (-2 / 3.0) / (sd + e)},
                    {0.5 / (1 + e), 0},
                    {(1 / 3.0) / (sd + e), (1 / 3.0) / (sd + e)}},
                1e-12, 1e-12, "grpo");
    va::AdvantageConfig dr;
    dr.norm_adv_by_std_in_grpo = false;
    check_close(va::compute_advantage("grpo", in, dr).advantages,
                Mat{{1 / 3.0, 1 / 3.0}, {-2 / 3.0, -2 / 3.0}, {0.5, 0}, {1 / 3.0, 1 / 3.0}}, 1e-12, 1e-12, "dr.grpo");
  }
  SECTION("rloo, grpo_passk, opo, gpg, remax, reinforce_plus_plus") {
    va::AdvantageInputs in;
    in.token_level_rewards = from_mat({{1, 0}, {0, 0}, {0.5, 0}, {1, 0}}, dt);
    in.response_mask = from_mat({{1, 1}, {1, 0}, {1, 1}, {1, 1}}, dt);
    in.index = {"a", "a", "a", "b"};
    check_close(va::compute_advantage("rloo", in).advantages, Mat{{0.75, 0.75}, {-0.75, 0}, {0, 0}, {1, 1}}, 1e-12,
                1e-12, "rloo");
    // opo group a: lengths {2, 1, 2}, scores {1, 0, 0.5}: b = (2 + 0 + 1)/5 = 0.6.
    check_close(va::compute_advantage("opo", in).advantages, Mat{{0.4, 0.4}, {-0.6, 0}, {-0.1, -0.1}, {1, 1}}, 1e-12,
                1e-12, "opo");
    // gpg: 3 of 4 scores non-zero -> alpha = 4/3 (fp32); means a: 0.5, b: singleton 0.
    const double alpha = static_cast<double>((1.0f / 3.0f) * 4.0f);
    check_close(va::compute_advantage("gpg", in).advantages,
                Mat{{alpha * 0.5, alpha * 0.5}, {-alpha * 0.5, 0}, {0, 0}, {alpha, alpha}}, 1e-12, 1e-12, "gpg");
    in.index = {"a", "a", "a", "a"};
    in.token_level_rewards = from_mat({{1, 0}, {0, 0}, {0.5, 0}, {0.5, 0}}, dt);
    // best 1, second 0.5; std of {1, 0, .5, .5} = sqrt(0.5/3).
    const double gap = 0.5 / (std::sqrt(0.5 / 3.0) + 1e-6);
    check_close(va::compute_advantage("grpo_passk", in).advantages, Mat{{gap, gap}, {0, 0}, {0, 0}, {0, 0}}, 1e-12,
                1e-12, "grpo_passk");
    in.token_level_rewards = from_mat({{1, 0}, {0, 0}, {1, 0}, {0.5, 0}}, dt);  // tied best
    check_close(va::compute_advantage("grpo_passk", in).advantages, zeros_mat(4, 2), 0, 0, "grpo_passk tie");
    va::AdvantageInputs r;
    r.token_level_rewards = from_mat({{1, 0, 2}}, dt);
    r.response_mask = from_mat({{1, 1, 0}}, dt);
    r.reward_baselines = from_vec({0.5}, dt);
    const auto remax = va::compute_advantage("remax", r);
    check_close(remax.returns, Mat{{1, 0, 0}}, 0, 0, "remax returns");
    check_close(remax.advantages, Mat{{0.5, -0.5, 0}}, 0, 0, "remax advantages");
    va::AdvantageConfig half;
    half.gamma = 0.5;
    r.response_mask = from_mat({{1, 1, 1}}, dt);
    check_close(va::compute_advantage("reinforce_plus_plus", r, half).returns, Mat{{1.5, 1, 2}}, 0, 0,
                "reinforce_plus_plus returns");
  }
}

TEST_CASE("grpo_vectorized floors the variance at epsilon; grpo does not", "[advantage]") {
  va::AdvantageInputs in;
  in.token_level_rewards = from_mat({{1.0, 0}, {1.0001, 0}}, at::kDouble);
  in.response_mask = from_mat({{1, 1}, {1, 1}}, at::kDouble);
  in.index = {"a", "a"};
  // Spread 1e-4: unbiased var 5e-9 < 1e-6, so grpo_vectorized uses std = sqrt(1e-6) = 1e-3.
  const double a0 = to_double(va::compute_advantage("grpo_vectorized", in).advantages[0][0]);
  CHECK(a0 == Approx(-0.5e-4 / (1e-3 + 1e-6)).epsilon(1e-2));
  const double g0 = to_double(va::compute_advantage("grpo", in).advantages[0][0]);
  CHECK(g0 == Approx(-0.5e-4 / (std::sqrt(0.5e-8) + 1e-6)).epsilon(1e-6));
}

// ---- registry and errors ----------------------------------------------------------------------

TEST_CASE("estimator registry: names, user estimators, duplicates, unknown names", "[advantage]") {
  const auto names = va::advantage_estimator_names();
  for (const char* n : {"gae", "grpo", "grpo_passk", "grpo_vectorized", "rloo", "rloo_vectorized",
                        "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "opo", "gpg"})
    CHECK(std::find(names.begin(), names.end(), n) != names.end());
  REQUIRE_THROWS_WITH(va::compute_advantage("grpoo", {}), Catch::Contains("unknown advantage estimator 'grpoo'") &&
                                                              Catch::Contains("gae") &&
                                                              Catch::Contains("reinforce_plus_plus_baseline"));
  REQUIRE_THROWS_WITH(
      va::register_advantage_estimator(
          "grpo", [](const va::AdvantageInputs&, const va::AdvantageConfig&) { return va::AdvantageOutputs{}; }),
      Catch::Contains("'grpo' is already registered"));
  va::register_advantage_estimator("test_zero", [](const va::AdvantageInputs& in, const va::AdvantageConfig& cfg) {
    const at::Tensor z = in.token_level_rewards * cfg.gamma;
    return va::AdvantageOutputs{z, z};
  });
  va::AdvantageInputs in;
  in.token_level_rewards = from_mat({{1, 2}}, at::kDouble);
  va::AdvantageConfig cfg;
  cfg.gamma = 3;
  check_close(va::compute_advantage("test_zero", in, cfg).advantages, Mat{{3, 6}}, 0, 0, "user estimator");
  REQUIRE_THROWS_WITH(va::register_advantage_estimator("test_zero", nullptr), Catch::Contains("function is empty"));
}

TEST_CASE("estimator input errors name the input, the shape and the estimator", "[advantage]") {
  const Batch b = make_batch(5, {2, 2}, 4, true);
  va::AdvantageInputs in = inputs_of(b, at::kFloat, at::kFloat);
  va::AdvantageInputs no_values = in;
  no_values.values = at::Tensor();
  REQUIRE_THROWS_WITH(va::compute_advantage("gae", no_values), Catch::Contains("gae") && Catch::Contains("values"));
  va::AdvantageInputs short_index = in;
  short_index.index.pop_back();
  REQUIRE_THROWS_WITH(va::compute_advantage("grpo", short_index),
                      Catch::Contains("index has 3 uids but the batch has 4 rows"));
  va::AdvantageInputs bad_mask = in;
  bad_mask.response_mask = from_mat({{1, 1}}, at::kFloat);
  REQUIRE_THROWS_WITH(va::compute_advantage("rloo", bad_mask),
                      Catch::Contains("response_mask has shape [1, 2]") && Catch::Contains("[4, 4]"));
  va::AdvantageInputs no_baseline = in;
  no_baseline.reward_baselines = at::Tensor();
  REQUIRE_THROWS_WITH(va::compute_advantage("remax", no_baseline),
                      Catch::Contains("reward_baselines has shape undefined"));
  va::AdvantageInputs int_rewards = in;
  int_rewards.token_level_rewards = int_rewards.token_level_rewards.to(at::kLong);
  REQUIRE_THROWS_WITH(va::compute_advantage("opo", int_rewards), Catch::Contains("float dtype"));
  va::AdvantageInputs singleton = in;
  singleton.index = {"p", "q", "q", "r"};
  REQUIRE_THROWS_WITH(va::compute_advantage("grpo_passk", singleton), Catch::Contains("group 'p' has 1 sample(s)"));
}
