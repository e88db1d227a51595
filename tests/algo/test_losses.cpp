// agg_loss, every policy loss and the value loss against per-token fp64 loops written here from
// verl's definitions (values and metrics, every aggregation mode, with and without rollout IS
// weights, fp64 and fp32); gradients against finite differences, or against the analytic
// gradient where a loss detaches on purpose (gspo, cispo); hand-computed cases; errors.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/zeros.h>

#include <map>

#include <verlpp/algo/agg_loss.hpp>
#include <verlpp/algo/policy_loss.hpp>
#include <verlpp/algo/value_loss.hpp>

#include "test_util.hpp"

using namespace algo_test;
namespace va = verlpp::algo;

namespace {

const std::vector<std::string> kModes = {"token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                         "seq-mean-token-sum-norm"};

double ref_masked_mean(const Mat& v, const Mat& m) {
  double s = 0, n = 0;
  for (size_t i = 0; i < v.size(); ++i)
    for (size_t t = 0; t < v[i].size(); ++t) {
      if (m[i][t] != 0) s += v[i][t] * m[i][t];
      n += m[i][t];
    }
  return s / (n + 1e-8);
}

double ref_agg(const Mat& loss, const Mat& m, const std::string& mode, const va::AggLossOptions& opts = {}) {
  double total = 0, tokens = 0, seq_sum = 0, seq_mean = 0, rows = 0;
  for (size_t i = 0; i < loss.size(); ++i) {
    double row = 0, n = 0;
    for (size_t t = 0; t < loss[i].size(); ++t) {
      row += loss[i][t] * m[i][t];
      n += m[i][t];
    }
    total += row;
    tokens += n;
    if (n > 0) {
      seq_sum += row;
      seq_mean += row / (n + 1e-8);
      rows += 1;
    }
  }
  if (mode == "token-mean") return total / opts.batch_num_tokens.value_or(tokens) * opts.dp_size;
  if (mode == "seq-mean-token-sum") return seq_sum / opts.global_batch_size.value_or(rows) * opts.dp_size;
  if (mode == "seq-mean-token-mean") return seq_mean / opts.global_batch_size.value_or(rows) * opts.dp_size;
  return total / opts.loss_scale_factor.value_or(static_cast<double>(loss[0].size()));
}

// d agg / d loss[i][t] for the linear aggregation modes.
Mat agg_weights(const Mat& m, const std::string& mode) {
  double tokens = 0, rows = 0;
  for (const Vec& r : m) {
    tokens += row_sum(r);
    rows += row_sum(r) > 0;
  }
  Mat w = m;
  for (size_t i = 0; i < m.size(); ++i)
    for (size_t t = 0; t < m[i].size(); ++t) {
      const double n = row_sum(m[i]);
      if (mode == "token-mean")
        w[i][t] = m[i][t] / tokens;
      else if (mode == "seq-mean-token-sum")
        w[i][t] = m[i][t] / rows;
      else if (mode == "seq-mean-token-mean")
        w[i][t] = m[i][t] / (n + 1e-8) / rows;
      else
        w[i][t] = m[i][t] / m[i].size();
    }
  return w;
}

struct PolicyData {
  Mat old_lp, lp, adv, mask, weights;
};

PolicyData make_policy_data(uint64_t seed, int64_t rows, int64_t cols, bool token_adv = true) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  PolicyData d;
  d.old_lp = d.lp = d.adv = d.mask = d.weights = zeros_mat(rows, cols);
  for (int64_t i = 0; i < rows; ++i) {
    int64_t len = 1 + static_cast<int64_t>(rng() % cols);
    if (i == 0) len = cols;
    if (i == 1 && rows > 3) len = 0;  // an empty row
    const double row_adv = normal(rng);
    for (int64_t t = 0; t < cols; ++t) {
      d.old_lp[i][t] = -0.05 - 3.0 * uni(rng);
      d.lp[i][t] = d.old_lp[i][t] + 0.3 * normal(rng);
      if (rng() % 7 == 0) d.lp[i][t] += 1.5 * normal(rng);  // far off-policy: dual clip, tails
      d.adv[i][t] = token_adv ? normal(rng) : row_adv;
      if (rng() % 11 == 0) d.adv[i][t] = 0.0;  // sign 0 / "A <= 0" branches
      d.mask[i][t] = t < len && !(t > 0 && t + 1 < len && rng() % 5 == 0) ? 1.0 : 0.0;
      d.weights[i][t] = 0.5 + uni(rng);
    }
  }
  return d;
}

// Per-token loop references: the loss matrix, the aggregation used, and the metrics.
struct RefPolicy {
  double loss, clipfrac, ppo_kl, clipfrac_lower;
};

double clip(double x, double lo, double hi) { return std::min(std::max(x, lo), hi); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

RefPolicy ref_policy(const std::string& name, const PolicyData& d, const va::PolicyLossConfig& c, bool use_weights) {
  const int64_t rows = d.lp.size(), cols = d.lp[0].size();
  Mat loss = zeros_mat(rows, cols), clipped = loss, lower = loss, neg_kl = loss;
  std::string mode = c.loss_agg_mode;
  for (int64_t i = 0; i < rows; ++i) {
    double row_len = 0, row_kl = 0;
    for (int64_t t = 0; t < cols; ++t) {
      row_len += d.mask[i][t];
      row_kl += (d.lp[i][t] - d.old_lp[i][t]) * d.mask[i][t];
    }
    const double seq_kl = row_kl / std::max(row_len, 1.0);
    for (int64_t t = 0; t < cols; ++t) {
      const double a = d.adv[i][t], lp = d.lp[i][t], raw = lp - d.old_lp[i][t];
      const double nk = clip(raw, -20, 20), r = std::exp(nk);
      const double r_clip = clip(r, 1 - c.clip_ratio_low, 1 + c.clip_ratio_high);
      neg_kl[i][t] = -nk;
      if (name == "vanilla") {
        const double l1 = -a * r, l2 = -a * r_clip, cc = std::max(l1, l2), l3 = -a * c.clip_ratio_c;
        loss[i][t] = a < 0 ? std::min(l3, cc) : cc;
        clipped[i][t] = l2 > l1;
        lower[i][t] = cc > l3 && a < 0;
      } else if (name == "gspo") {
        const double s = std::exp(std::min(seq_kl, 10.0));
        const double l1 = -a * s, l2 = -a * clip(s, 1 - c.clip_ratio_low, 1 + c.clip_ratio_high);
        loss[i][t] = std::max(l1, l2);
        clipped[i][t] = l2 > l1;
        neg_kl[i][t] = -raw;
        mode = "seq-mean-token-mean";
      } else if (name == "sapo") {
        const double tau = a > 0 ? c.tau_pos : c.tau_neg;
        loss[i][t] = -sigmoid(tau * (r - 1)) * 4 / tau * a;
        mode = "seq-mean-token-mean";
      } else if (name == "cispo") {
        loss[i][t] = -r_clip * a * lp;
        clipped[i][t] = r != r_clip;
      } else if (name == "gpg" || name == "reinforce") {
        loss[i][t] = -lp * a;
        neg_kl[i][t] = -raw;
      }
      if (use_weights) loss[i][t] *= d.weights[i][t];
    }
  }
  return {ref_agg(loss, d.mask, mode, c.agg), ref_masked_mean(clipped, d.mask), ref_masked_mean(neg_kl, d.mask),
          ref_masked_mean(lower, d.mask)};
}

RefPolicy ref_geo_mean(const PolicyData& d, const va::PolicyLossConfig& c, bool use_weights) {
  const int64_t rows = d.lp.size(), cols = d.lp[0].size();
  Mat up = zeros_mat(rows, cols), down = up, neg_kl = up;
  double total = 0;
  for (int64_t i = 0; i < rows; ++i) {
    double len = 0, sum_kl = 0, sum_adv = 0, sum_logw = 0;
    for (int64_t t = 0; t < cols; ++t) {
      const double a = d.adv[i][t], nk = d.lp[i][t] - d.old_lp[i][t];
      const double s = a > 0 ? 1 : (a < 0 ? -1 : 0);
      const double nk_c = clip(nk, -c.clip_ratio_low, c.clip_ratio_high);
      const double nk_min = s * std::min(s * nk, s * nk_c);
      len += d.mask[i][t];
      sum_kl += nk_min * d.mask[i][t];
      sum_adv += a * d.mask[i][t];
      sum_logw += std::log(d.weights[i][t] + 1e-10) * d.mask[i][t];
      up[i][t] = nk != nk_c && a > 0;
      down[i][t] = nk != nk_c && a < 0;
      neg_kl[i][t] = -nk;
    }
    double pg = -(sum_adv / (len + 1e-8)) * std::exp(sum_kl / (len + 1e-8));
    if (use_weights) pg *= std::exp(sum_logw / (len + 1e-8));
    total += pg;
  }
  return {total / rows, ref_masked_mean(up, d.mask), ref_masked_mean(neg_kl, d.mask), ref_masked_mean(down, d.mask)};
}

double cov_mean(const PolicyData& d, bool adv) {
  double s = 0, n = 0;
  for (size_t i = 0; i < d.lp.size(); ++i)
    for (size_t t = 0; t < d.lp[i].size(); ++t)
      if (d.mask[i][t] > 0) s += adv ? d.adv[i][t] : d.lp[i][t], n += 1;
  return s / n;
}

// clip_cov with clip_num >= #candidates (every candidate is detached; no randomness involved).
RefPolicy ref_clip_cov_all(const PolicyData& d, const va::PolicyLossConfig& c, bool use_weights,
                           int64_t* num_candidates) {
  const double ma = ref_masked_mean(d.adv, d.mask), ml = ref_masked_mean(d.lp, d.mask);
  const int64_t rows = d.lp.size(), cols = d.lp[0].size();
  Mat loss = zeros_mat(rows, cols), zeroed = loss, neg_kl = loss;
  *num_candidates = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t t = 0; t < cols; ++t) {
      const double a = d.adv[i][t], nk = d.lp[i][t] - d.old_lp[i][t], r = std::exp(nk);
      const double l1 = -a * r, l2 = -a * clip(r, 1 - c.clip_ratio_low, 1 + c.clip_ratio_high);
      const double cov = (a - ma) * (d.lp[i][t] - ml);
      const bool candidate = d.mask[i][t] > 0 && !(l2 > l1) && cov > c.clip_cov_lb && cov < c.clip_cov_ub;
      *num_candidates += candidate;
      zeroed[i][t] = candidate;
      loss[i][t] = std::max(l1, l2) * (candidate ? 0.0 : 1.0) * (use_weights ? d.weights[i][t] : 1);
      neg_kl[i][t] = -nk;
    }
  return {ref_agg(loss, d.mask, c.loss_agg_mode, c.agg), ref_masked_mean(zeroed, d.mask),
          ref_masked_mean(neg_kl, d.mask), 0.0};
}

RefPolicy ref_kl_cov(const PolicyData& d, const va::PolicyLossConfig& c, bool use_weights) {
  const double ma = cov_mean(d, true), ml = cov_mean(d, false);
  const int64_t rows = d.lp.size(), cols = d.lp[0].size();
  std::vector<std::pair<double, int64_t>> covs;  // (cov, flat index) of response tokens
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t t = 0; t < cols; ++t)
      if (d.mask[i][t] > 0) covs.push_back({(d.adv[i][t] - ma) * (d.lp[i][t] - ml), i * cols + t});
  std::stable_sort(covs.begin(), covs.end(), [](auto& x, auto& y) { return x.first > y.first; });
  const size_t k = std::max<size_t>(1, static_cast<size_t>(covs.size() * c.kl_cov_ratio));
  std::vector<bool> chosen(rows * cols, false);
  for (size_t j = 0; j < k && j < covs.size(); ++j) chosen[covs[j].second] = true;
  Mat loss = zeros_mat(rows, cols), abs_kl = loss;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t t = 0; t < cols; ++t) {
      const double a = d.adv[i][t], nk = d.lp[i][t] - d.old_lp[i][t];
      loss[i][t] = -a * std::exp(nk) + (chosen[i * cols + t] ? c.ppo_kl_coef * std::fabs(nk) : 0);
      if (use_weights) loss[i][t] *= d.weights[i][t];
      abs_kl[i][t] = std::fabs(nk);
    }
  return {ref_agg(loss, d.mask, c.loss_agg_mode, c.agg), 0.0, ref_masked_mean(abs_kl, d.mask), 0.0};
}

va::PolicyLossOutput run_policy(const std::string& name, const PolicyData& d, const va::PolicyLossConfig& c,
                                at::ScalarType dtype, bool use_weights) {
  return va::compute_policy_loss(name, from_mat(d.old_lp, dtype), from_mat(d.lp, dtype), from_mat(d.adv, dtype),
                                 from_mat(d.mask, dtype), c, use_weights ? from_mat(d.weights, dtype) : at::Tensor());
}

void check_policy(const va::PolicyLossOutput& got, const RefPolicy& want, at::ScalarType dtype,
                  const std::string& what) {
  const Tol tol = dtype == at::kDouble ? Tol{1e-10, 1e-12} : Tol{2e-5, 2e-6};
  check_scalar(got.loss, want.loss, tol.rtol, tol.atol, what + " loss");
  check_scalar(got.clipfrac, want.clipfrac, 1e-6, 1e-7, what + " clipfrac");
  check_scalar(got.ppo_kl, want.ppo_kl, tol.rtol, tol.atol, what + " ppo_kl");
  check_scalar(got.clipfrac_lower, want.clipfrac_lower, 1e-6, 1e-7, what + " clipfrac_lower");
  CHECK(got.loss.dim() == 0);
}

}  // namespace

// ---- agg_loss ---------------------------------------------------------------------------------

TEST_CASE("agg_loss: every mode, with and without global-batch numbers", "[agg]") {
  const PolicyData d = make_policy_data(3, 7, 11);
  for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    const Tol tol = tol_for(dtype);
    for (const std::string& mode : kModes) {
      INFO(mode << " " << c10::toString(dtype));
      check_scalar(va::agg_loss(from_mat(d.adv, dtype), from_mat(d.mask, dtype), mode), ref_agg(d.adv, d.mask, mode),
                   tol.rtol, tol.atol, mode);
      va::AggLossOptions opts;
      opts.dp_size = 4;
      opts.batch_num_tokens = 123;
      opts.global_batch_size = 17;
      opts.loss_scale_factor = 4096;
      check_scalar(va::agg_loss(from_mat(d.adv, dtype), from_mat(d.mask, dtype), mode, opts),
                   ref_agg(d.adv, d.mask, mode, opts), tol.rtol, tol.atol, mode + " options");
      // A bool mask counts tokens in int64, and int64 + 1e-8 is fp32 (as in verl): fp32-level.
      check_scalar(va::agg_loss(from_mat(d.adv, dtype), from_mat(d.mask, at::kBool), mode, opts),
                   ref_agg(d.adv, d.mask, mode, opts), 1e-6, 1e-7, mode + " bool mask");
    }
  }
  REQUIRE_THROWS_WITH(
      va::agg_loss(from_mat(d.adv, at::kFloat), from_mat(d.mask, at::kFloat), "seq-mean"),
      Catch::Contains("unknown loss_agg_mode 'seq-mean'") && Catch::Contains("seq-mean-token-sum-norm"));
  REQUIRE_THROWS_WITH(va::agg_loss(from_mat(d.adv, at::kFloat), from_mat({{1.0}}, at::kFloat), "token-mean"),
                      Catch::Contains("mask has shape [1, 1]"));
}

// ---- policy losses ----------------------------------------------------------------------------

TEST_CASE("policy losses match per-token loop references", "[policy]") {
  va::PolicyLossConfig cfg;
  cfg.clip_ratio_high = 0.28;  // asymmetric (DAPO clip-higher)
  uint64_t seed = 40;
  for (const char* name : {"vanilla", "gspo", "sapo", "cispo", "gpg", "reinforce", "geo_mean"}) {
    for (const std::string& mode : kModes) {
      for (bool token_adv : {true, false}) {
        for (bool use_weights : {false, true}) {
          const PolicyData d = make_policy_data(++seed, 9, 13, token_adv);
          cfg.loss_agg_mode = mode;
          const RefPolicy want = std::string(name) == "geo_mean" ? ref_geo_mean(d, cfg, use_weights)
                                                                 : ref_policy(name, d, cfg, use_weights);
          for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
            INFO(name << " mode " << mode << " token_adv " << token_adv << " weights " << use_weights << " "
                      << c10::toString(dtype));
            check_policy(run_policy(name, d, cfg, dtype, use_weights), want, dtype, name);
          }
        }
      }
    }
  }
}

// A multi-turn response: tool tokens inside it carry mask 0 (verl's agent loop). Every row of
// length >= 4 gets a hole at [1, len / 2).
PolicyData with_tool_holes(PolicyData d) {
  for (Vec& row : d.mask) {
    const int64_t len = int64_t(row_sum(row));
    for (int64_t t = 1; t < len / 2; ++t) row[size_t(t)] = 0.0;
  }
  return d;
}

TEST_CASE("multi-turn masks: 0s inside a response match the loop references and change nothing", "[policy]") {
  va::PolicyLossConfig cfg;
  uint64_t seed = 140;
  for (const char* name : {"vanilla", "gspo", "sapo", "cispo", "gpg", "reinforce", "geo_mean"}) {
    for (const std::string& mode : kModes) {
      const PolicyData d = with_tool_holes(make_policy_data(++seed, 9, 13));
      double holes = 0;
      for (size_t i = 0; i < d.mask.size(); ++i)
        for (size_t t = 0; t + 1 < d.mask[i].size(); ++t) holes += d.mask[i][t] == 0.0 && d.mask[i][t + 1] == 1.0;
      REQUIRE(holes >= 2);
      cfg.loss_agg_mode = mode;
      INFO(name << " mode " << mode);
      const RefPolicy want =
          std::string(name) == "geo_mean" ? ref_geo_mean(d, cfg, true) : ref_policy(name, d, cfg, true);
      check_policy(run_policy(name, d, cfg, at::kDouble, true), want, at::kDouble, name);
      // Other log-probs, advantages and weights under the 0s: the same loss and metrics, and no
      // gradient reaches a masked token.
      PolicyData moved = d;
      for (size_t i = 0; i < d.mask.size(); ++i)
        for (size_t t = 0; t < d.mask[i].size(); ++t)
          if (d.mask[i][t] == 0.0) {
            moved.lp[i][t] += 2.5;
            moved.old_lp[i][t] -= 1.5;
            moved.adv[i][t] = -3.0 * moved.adv[i][t] + 1.0;
            moved.weights[i][t] = 7.0;
          }
      check_policy(run_policy(name, moved, cfg, at::kDouble, true), want, at::kDouble, std::string(name) + " moved");
      auto loss_of = [&](const at::Tensor& lp) {
        return va::compute_policy_loss(name, from_mat(moved.old_lp, at::kDouble), lp, from_mat(moved.adv, at::kDouble),
                                       from_mat(moved.mask, at::kDouble), cfg, from_mat(moved.weights, at::kDouble))
            .loss;
      };
      const Mat grad = to_mat(autograd_grad(loss_of, from_mat(moved.lp, at::kDouble)));
      for (size_t i = 0; i < d.mask.size(); ++i)
        for (size_t t = 0; t < d.mask[i].size(); ++t)
          if (d.mask[i][t] == 0.0) CHECK(grad[i][t] == 0.0);
    }
  }
}

TEST_CASE("value loss with 0s inside a response: the loop reference, no gradient under the 0s", "[value]") {
  const PolicyData d = with_tool_holes(make_policy_data(23, 8, 9));  // lp: vpreds, old_lp: values, adv: returns
  const double c = 0.4;
  for (const std::string& mode : kModes) {
    Mat losses = zeros_mat(8, 9);
    for (int i = 0; i < 8; ++i)
      for (int t = 0; t < 9; ++t) {
        const double v = d.lp[i][t], V = d.old_lp[i][t], R = d.adv[i][t];
        const double vc = std::max(std::min(v, V + c), V - c);
        losses[i][t] = std::max((v - R) * (v - R), (vc - R) * (vc - R));
      }
    INFO(mode);
    auto loss_of = [&](const at::Tensor& v) {
      return va::compute_value_loss(v, from_mat(d.adv, at::kDouble), from_mat(d.old_lp, at::kDouble),
                                    from_mat(d.mask, at::kDouble), c, mode)
          .loss;
    };
    const at::Tensor vp = from_mat(d.lp, at::kDouble);
    check_scalar(loss_of(vp), 0.5 * ref_agg(losses, d.mask, mode), 1e-10, 1e-12, "vf_loss");
    const Mat grad = to_mat(autograd_grad(loss_of, vp));
    for (int i = 0; i < 8; ++i)
      for (int t = 0; t < 9; ++t)
        if (d.mask[i][t] == 0.0) CHECK(grad[i][t] == 0.0);
  }
}

TEST_CASE("clip_cov detaches the chosen high-covariance tokens", "[policy]") {
  va::PolicyLossConfig cfg;
  cfg.clip_cov_lb = 0.3;     // a wider window than the default, so several tokens qualify
  cfg.clip_cov_ratio = 1.0;  // clip_num >= #candidates: all candidates, no randomness
  for (const std::string& mode : kModes) {
    for (bool use_weights : {false, true}) {
      const PolicyData d = make_policy_data(77, 12, 10);
      cfg.loss_agg_mode = mode;
      int64_t num_candidates = 0;
      const RefPolicy want = ref_clip_cov_all(d, cfg, use_weights, &num_candidates);
      REQUIRE(num_candidates >= 3);
      for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
        INFO(mode << " weights " << use_weights << " " << c10::toString(dtype));
        check_policy(run_policy("clip_cov", d, cfg, dtype, use_weights), want, dtype, "clip_cov");
      }
    }
  }
  SECTION("a small ratio picks exactly max(int(ratio * tokens), 1) candidates, reproducibly") {
    const PolicyData d = make_policy_data(78, 12, 10);
    int64_t num_candidates = 0;
    cfg.clip_cov_ratio = 1.0;
    ref_clip_cov_all(d, cfg, false, &num_candidates);
    double tokens = 0;
    for (const Vec& r : d.mask) tokens += row_sum(r);
    cfg.clip_cov_ratio = 2.5 / tokens;  // int(2.5) = 2 tokens
    REQUIRE(num_candidates > 2);
    cfg.generator = at::detail::createCPUGenerator(1234);
    const auto first = run_policy("clip_cov", d, cfg, at::kDouble, false);
    check_scalar(first.clipfrac, 2.0 / (tokens + 1e-8), 1e-12, 1e-12, "clipfrac = 2 tokens");
    cfg.generator = at::detail::createCPUGenerator(1234);
    const auto again = run_policy("clip_cov", d, cfg, at::kDouble, false);
    check_scalar(again.loss, to_double(first.loss), 0, 0, "same seed, same tokens");
  }
}

TEST_CASE("kl_cov penalises the top-covariance tokens", "[policy]") {
  va::PolicyLossConfig cfg;
  cfg.kl_cov_ratio = 0.1;
  cfg.ppo_kl_coef = 0.7;
  for (const std::string& mode : kModes) {
    for (bool use_weights : {false, true}) {
      const PolicyData d = make_policy_data(91, 10, 12);
      cfg.loss_agg_mode = mode;
      const RefPolicy want = ref_kl_cov(d, cfg, use_weights);
      for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
        INFO(mode << " weights " << use_weights << " " << c10::toString(dtype));
        check_policy(run_policy("kl_cov", d, cfg, dtype, use_weights), want, dtype, "kl_cov");
      }
    }
  }
  cfg.kl_cov_ratio = 0.0002;  // verl's default: k = max(1, int(N * ratio)) = 1
  const PolicyData d = make_policy_data(92, 6, 7);
  check_policy(run_policy("kl_cov", d, cfg, at::kDouble, false), ref_kl_cov(d, cfg, false), at::kDouble, "kl_cov k=1");
}

TEST_CASE("vanilla PPO, hand-computed dual clip", "[policy]") {
  // A = 1, r = 1.5: clipped to 1.2. A = -1, r = 0.5: clipped to 0.8. A = -1, r = 4: dual clip 3.
  const at::Tensor old_lp = from_mat({{0.0, 0.0, 0.0}}, at::kDouble);
  const at::Tensor lp = from_mat({{std::log(1.5), std::log(0.5), std::log(4.0)}}, at::kDouble);
  const at::Tensor adv = from_mat({{1.0, -1.0, -1.0}}, at::kDouble);
  const at::Tensor mask = from_mat({{1.0, 1.0, 1.0}}, at::kDouble);
  const auto out = va::compute_policy_loss("vanilla", old_lp, lp, adv, mask, {});
  check_scalar(out.loss, (-1.2 + 0.8 + 3.0) / 3.0, 1e-12, 1e-12, "loss");
  check_scalar(out.clipfrac, 2.0 / 3.0, 1e-8, 1e-8, "clipfrac");
  check_scalar(out.clipfrac_lower, 1.0 / 3.0, 1e-8, 1e-8, "clipfrac_lower");
  check_scalar(out.ppo_kl, -std::log(3.0) / 3.0, 1e-8, 1e-8, "ppo_kl");
}

TEST_CASE("policy-loss gradients: finite differences, or analytic where verl detaches", "[policy]") {
  const PolicyData d = make_policy_data(5, 4, 6);
  const at::Tensor old_lp = from_mat(d.old_lp, at::kDouble), adv = from_mat(d.adv, at::kDouble);
  const at::Tensor mask = from_mat(d.mask, at::kDouble), w = from_mat(d.weights, at::kDouble);
  const at::Tensor lp = from_mat(d.lp, at::kDouble);
  va::PolicyLossConfig cfg;
  cfg.clip_cov_lb = 0.3;
  cfg.clip_cov_ratio = 1.0;
  cfg.kl_cov_ratio = 0.2;
  for (const char* name : {"vanilla", "sapo", "gpg", "reinforce", "geo_mean", "clip_cov", "kl_cov"}) {
    for (const std::string& mode : {std::string("token-mean"), std::string("seq-mean-token-mean")}) {
      cfg.loss_agg_mode = mode;
      INFO(name << " " << mode);
      auto loss_of = [&](const at::Tensor& x) {
        return va::compute_policy_loss(name, old_lp, x, adv, mask, cfg, w).loss;
      };
      const at::Tensor analytic = autograd_grad(loss_of, lp);
      {  // metrics come back detached even when log_prob requires grad
        const at::Tensor leaf = lp.clone().requires_grad_(true);
        const auto out = va::compute_policy_loss(name, old_lp, leaf, adv, mask, cfg, w);
        CHECK(out.loss.requires_grad());
        CHECK_FALSE(out.clipfrac.requires_grad());
        CHECK_FALSE(out.ppo_kl.requires_grad());
        CHECK_FALSE(out.clipfrac_lower.requires_grad());
      }
      const at::Tensor numeric = finite_diff([&](const at::Tensor& x) { return to_double(loss_of(x)); }, lp);
      check_close(analytic, to_mat(numeric), 1e-5, 1e-7, std::string(name) + " gradient");
    }
  }
  SECTION("gspo: token gradient -A*s of the sequence ratio, where not clipped") {
    cfg.loss_agg_mode = "token-mean";  // ignored: gspo aggregates seq-mean-token-mean
    const at::Tensor g = autograd_grad(
        [&](const at::Tensor& x) { return va::compute_policy_loss("gspo", old_lp, x, adv, mask, cfg).loss; }, lp);
    const Mat wts = agg_weights(d.mask, "seq-mean-token-mean");
    Mat want = zeros_mat(4, 6);
    for (int i = 0; i < 4; ++i) {
      double len = 0, kl = 0;
      for (int t = 0; t < 6; ++t) len += d.mask[i][t], kl += (d.lp[i][t] - d.old_lp[i][t]) * d.mask[i][t];
      const double s = std::exp(kl / std::max(len, 1.0));
      for (int t = 0; t < 6; ++t) {
        const double a = d.adv[i][t];
        const bool clipped = -a * clip(s, 0.8, 1.2) > -a * s;
        want[i][t] = wts[i][t] * (clipped ? 0.0 : -a * s);
      }
    }
    check_close(g, want, 1e-9, 1e-12, "gspo gradient");
  }
  SECTION("cispo: -sg(clip(r))*A per token") {
    const at::Tensor g = autograd_grad(
        [&](const at::Tensor& x) { return va::compute_policy_loss("cispo", old_lp, x, adv, mask, cfg).loss; }, lp);
    const Mat wts = agg_weights(d.mask, cfg.loss_agg_mode);
    Mat want = zeros_mat(4, 6);
    for (int i = 0; i < 4; ++i)
      for (int t = 0; t < 6; ++t)
        want[i][t] = wts[i][t] * -clip(std::exp(d.lp[i][t] - d.old_lp[i][t]), 0.8, 1.2) * d.adv[i][t];
    check_close(g, want, 1e-9, 1e-12, "cispo gradient");
  }
}

TEST_CASE("policy-loss registry and config errors", "[policy]") {
  const PolicyData d = make_policy_data(8, 3, 4);
  const at::Tensor t = from_mat(d.lp, at::kFloat), m = from_mat(d.mask, at::kFloat);
  REQUIRE_THROWS_WITH(va::compute_policy_loss("ppo", t, t, t, m), Catch::Contains("unknown policy loss 'ppo'") &&
                                                                      Catch::Contains("vanilla") &&
                                                                      Catch::Contains("geo_mean"));
  REQUIRE_THROWS_WITH(va::register_policy_loss("vanilla", va::compute_policy_loss_gpg),
                      Catch::Contains("'vanilla' is already registered"));
  va::register_policy_loss("test_double_gpg", [](const va::PolicyLossInputs& in, const va::PolicyLossConfig& c) {
    va::PolicyLossOutput out = va::compute_policy_loss_gpg(in, c);
    out.loss = out.loss * 2;
    return out;
  });
  check_scalar(va::compute_policy_loss("test_double_gpg", t, t, t, m).loss,
               2 * to_double(va::compute_policy_loss("gpg", t, t, t, m).loss), 1e-6, 0, "user policy loss");
  va::PolicyLossConfig bad;
  bad.clip_ratio_c = 1.0;
  REQUIRE_THROWS_WITH(va::compute_policy_loss("vanilla", t, t, t, m, bad),
                      Catch::Contains("clip_ratio_c") && Catch::Contains("got 1"));
  bad = {};
  bad.clip_cov_ratio = 0;
  REQUIRE_THROWS_WITH(va::compute_policy_loss("clip_cov", t, t, t, m, bad),
                      Catch::Contains("clip_cov_ratio must be > 0"));
  bad = {};
  bad.kl_cov_ratio = -1;
  REQUIRE_THROWS_WITH(va::compute_policy_loss("kl_cov", t, t, t, m, bad),
                      Catch::Contains("kl_cov_ratio must be > 0; got -1"));
  REQUIRE_THROWS_WITH(va::compute_policy_loss("gspo", t, t, t.narrow(1, 0, 2), m),
                      Catch::Contains("advantages has shape [3, 2]") && Catch::Contains("'gspo'"));
  REQUIRE_THROWS_WITH(va::compute_policy_loss("sapo", t, t, t, m, {}, t.narrow(0, 0, 1)),
                      Catch::Contains("rollout_is_weights has shape [1, 4]"));
}

// ---- value loss -------------------------------------------------------------------------------

TEST_CASE("value loss matches the loop reference; gradient; hand-computed", "[value]") {
  const PolicyData d = make_policy_data(21, 8, 9);  // lp: vpreds, old_lp: values, adv: returns
  const double c = 0.4;
  for (const std::string& mode : kModes) {
    Mat losses = zeros_mat(8, 9), clipped = losses;
    for (int i = 0; i < 8; ++i)
      for (int t = 0; t < 9; ++t) {
        const double v = d.lp[i][t], V = d.old_lp[i][t], R = d.adv[i][t];
        const double vc = std::max(std::min(v, V + c), V - c);
        const double l1 = (v - R) * (v - R), l2 = (vc - R) * (vc - R);
        losses[i][t] = std::max(l1, l2);
        clipped[i][t] = l2 > l1;
      }
    for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
      INFO(mode << " " << c10::toString(dtype));
      const Tol tol = tol_for(dtype);
      const auto out = va::compute_value_loss(from_mat(d.lp, dtype), from_mat(d.adv, dtype), from_mat(d.old_lp, dtype),
                                              from_mat(d.mask, dtype), c, mode);
      check_scalar(out.loss, 0.5 * ref_agg(losses, d.mask, mode), tol.rtol, tol.atol, "vf_loss");
      check_scalar(out.clipfrac, ref_masked_mean(clipped, d.mask), 1e-6, 1e-7, "vf_clipfrac");
    }
    auto loss_of = [&](const at::Tensor& v) {
      return va::compute_value_loss(v, from_mat(d.adv, at::kDouble), from_mat(d.old_lp, at::kDouble),
                                    from_mat(d.mask, at::kDouble), c, mode)
          .loss;
    };
    const at::Tensor vp = from_mat(d.lp, at::kDouble);
    check_close(autograd_grad(loss_of, vp),
                to_mat(finite_diff([&](const at::Tensor& x) { return to_double(loss_of(x)); }, vp)), 1e-6, 1e-8,
                "vf gradient " + mode);
  }
  // v = [1, 3], V = [2, 1.5], R = [0, 0], c = 0.5: v_c = [1.5, 2]; max sq. errors [2.25, 9].
  const auto out = va::compute_value_loss(from_mat({{1, 3}}, at::kDouble), from_mat({{0, 0}}, at::kDouble),
                                          from_mat({{2, 1.5}}, at::kDouble), from_mat({{1, 1}}, at::kDouble), 0.5);
  check_scalar(out.loss, 0.5 * (2.25 + 9) / 2, 1e-12, 0, "hand vf_loss");
  check_scalar(out.clipfrac, 0.5, 1e-8, 0, "hand vf_clipfrac");
  REQUIRE_THROWS_WITH(va::compute_value_loss(from_mat({{1, 3}}, at::kDouble), from_mat({{0}}, at::kDouble),
                                             from_mat({{2, 1.5}}, at::kDouble), from_mat({{1, 1}}, at::kDouble), 0.5),
                      Catch::Contains("returns has shape [1, 1]"));
}
