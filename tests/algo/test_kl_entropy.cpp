// KL penalties (every type, clamps, the straight-through '+' form and its gradient, the
// registry), the KL controllers and apply_kl_penalty, and entropy (plain and chunked, bf16,
// extreme logits, gradient) against fp64 loops written here.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randn.h>

#include <verlpp/algo/entropy.hpp>
#include <verlpp/algo/kl.hpp>

#include "test_util.hpp"

using namespace algo_test;
namespace va = verlpp::algo;

namespace {

double ref_kl(const std::string& type, double lp, double ref) {
  const double x = lp - ref;
  if (type == "kl" || type == "k1") return x;
  if (type == "abs") return std::fabs(x);
  if (type == "mse" || type == "k2") return 0.5 * x * x;
  const double d = std::min(std::max(-x, -20.0), 20.0);  // low_var_kl / k3
  return std::min(std::max(std::exp(d) - d - 1, -10.0), 10.0);
}

// log-probs with differences spanning the clamps (|x| up to 25).
void make_logprobs(uint64_t seed, int64_t rows, int64_t cols, Mat& lp, Mat& ref) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  lp = ref = zeros_mat(rows, cols);
  const double spans[] = {0.05, 0.5, 3, 25};
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t t = 0; t < cols; ++t) {
      lp[i][t] = -std::fabs(normal(rng)) * 2;
      ref[i][t] = lp[i][t] + spans[(i + t) % 4] * normal(rng);
    }
}

const std::vector<std::string> kTypes = {"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"};

}  // namespace

TEST_CASE("kl_penalty: every type and its clamps match the loop reference", "[kl]") {
  Mat lp, ref;
  make_logprobs(1, 6, 9, lp, ref);
  for (const std::string& type : kTypes) {
    Mat want = lp;
    for (size_t i = 0; i < lp.size(); ++i)
      for (size_t t = 0; t < lp[i].size(); ++t) want[i][t] = ref_kl(type, lp[i][t], ref[i][t]);
    for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
      INFO(type << " " << c10::toString(dtype));
      const Tol tol = tol_for(dtype);
      const at::Tensor got = va::kl_penalty(from_mat(lp, dtype), from_mat(ref, dtype), type);
      check_close(got, want, tol.rtol, tol.atol, "kl_penalty " + type);
      const at::Tensor plus = va::kl_penalty(from_mat(lp, dtype), from_mat(ref, dtype), type + "+");
      check_close(plus, to_mat(got), 0, 0, "value of " + type + "+ equals " + type);
    }
  }
  // k3 hand values: x = 0 -> 0; d = 1 -> e - 2; d = 5 -> clamped to 10; d = -30 -> d = -20 -> 10.
  const at::Tensor k3 = va::kl_penalty(from_mat({{0.0, -1.0, -5.0, 30.0}}, at::kDouble),
                                       from_mat({{0.0, 0.0, 0.0, 0.0}}, at::kDouble), "k3");
  check_close(k3, Mat{{0.0, std::exp(1.0) - 2, 10.0, 10.0}}, 1e-15, 1e-15, "k3 hand values");
}

TEST_CASE("kl_penalty '+' is straight-through: value of the type, gradient of k2", "[kl]") {
  Mat lp, ref;
  make_logprobs(2, 4, 7, lp, ref);
  const at::Tensor lp_t = from_mat(lp, at::kDouble), ref_t = from_mat(ref, at::kDouble);
  Mat k2_grad = lp;  // d(0.5 x^2)/d lp = x
  for (size_t i = 0; i < lp.size(); ++i)
    for (size_t t = 0; t < lp[i].size(); ++t) k2_grad[i][t] = lp[i][t] - ref[i][t];
  for (const std::string& type : kTypes) {
    const at::Tensor g =
        autograd_grad([&](const at::Tensor& x) { return va::kl_penalty(x, ref_t, type + "+").sum(); }, lp_t);
    check_close(g, k2_grad, 1e-12, 1e-12, type + "+ gradient");
  }
  // Without '+', k3's own gradient (checked against finite differences, clamps away).
  Mat small_lp, small_ref;
  make_logprobs(3, 2, 2, small_lp, small_ref);  // spans 0.05..3 here: inside the clamps
  const at::Tensor a = from_mat(small_lp, at::kDouble), b = from_mat(small_ref, at::kDouble);
  auto k3_sum = [&](const at::Tensor& x) { return va::kl_penalty(x, b, "k3").sum(); };
  check_close(autograd_grad(k3_sum, a),
              to_mat(finite_diff([&](const at::Tensor& x) { return to_double(k3_sum(x)); }, a)), 1e-6, 1e-8,
              "k3 gradient");
}

TEST_CASE("kl_penalty registry: unknown, duplicate, reserved '+', user types", "[kl]") {
  const at::Tensor x = from_mat({{-1.0, -2.0}}, at::kDouble), y = from_mat({{-1.5, -1.0}}, at::kDouble);
  REQUIRE_THROWS_WITH(va::kl_penalty(x, y, "k4"),
                      Catch::Contains("unknown KL penalty type 'k4'") && Catch::Contains("low_var_kl"));
  REQUIRE_THROWS_WITH(va::kl_penalty(x, y, "full"), Catch::Contains("'full'"));
  REQUIRE_THROWS_WITH(va::kl_penalty(x, y, "k4+"), Catch::Contains("'k4'"));
  REQUIRE_THROWS_WITH(va::register_kl_penalty("k1", va::detail::kl_k1), Catch::Contains("'k1' is already registered"));
  REQUIRE_THROWS_WITH(va::register_kl_penalty("mine+", va::detail::kl_k1), Catch::Contains("reserved"));
  va::register_kl_penalty("test_sq", [](const at::Tensor& lp, const at::Tensor& ref) { return (lp - ref).square(); });
  check_close(va::kl_penalty(x, y, "test_sq"), Mat{{0.25, 1.0}}, 1e-15, 0, "user type");
  const at::Tensor g = autograd_grad([&](const at::Tensor& v) { return va::kl_penalty(v, y, "test_sq+").sum(); }, x);
  check_close(g, Mat{{0.5, -1.0}}, 1e-15, 0, "user type '+' gradient = x");
  REQUIRE_THROWS_WITH(va::kl_penalty(x, from_mat({{1.0}}, at::kDouble), "kl"), Catch::Contains("same shape"));
}

TEST_CASE("KL controllers follow verl's update rule", "[kl]") {
  va::AdaptiveKLController c(0.1, 6.0, 10000.0);
  c.update(9.0, 256);  // error 0.5 clipped to 0.2
  CHECK(c.value() == Approx(0.1 * (1 + 0.2 * 256 / 10000.0)).epsilon(1e-14));
  const double before = c.value();
  c.update(5.4, 100);  // error -0.1
  CHECK(c.value() == Approx(before * (1 - 0.1 * 100 / 10000.0)).epsilon(1e-14));
  const double before2 = c.value();
  c.update(0.0, 10000);  // error -1 clipped to -0.2: x 0.8
  CHECK(c.value() == Approx(before2 * 0.8).epsilon(1e-14));
  va::FixedKLController f(0.05);
  f.update(100.0, 1000);
  CHECK(f.value() == 0.05);
  auto made = va::make_kl_controller("adaptive", 0.2, 1.0, 10.0);
  made->update(2.0, 5);  // error 1 -> 0.2: 0.2 * (1 + 0.2 * 5 / 10)
  CHECK(made->value() == Approx(0.2 * 1.1).epsilon(1e-14));
  CHECK(va::make_kl_controller("fixed", 0.3)->value() == 0.3);
  REQUIRE_THROWS_WITH(va::make_kl_controller("pid", 0.1), Catch::Contains("unknown KL controller type 'pid'"));
  REQUIRE_THROWS_WITH(va::AdaptiveKLController(0.1, 6.0, 0.0), Catch::Contains("horizon must be > 0; got 0"));
}

TEST_CASE("apply_kl_penalty matches the loop reference and updates the controller", "[kl]") {
  Mat lp, ref;
  make_logprobs(4, 5, 8, lp, ref);
  const Batch b = make_batch(4, {1, 4}, 8, false, true);  // mask with holes and an empty row
  for (const std::string& type : {std::string("kl"), std::string("low_var_kl")}) {
    for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
      INFO(type << " " << c10::toString(dtype));
      va::AdaptiveKLController ctrl(0.2, 0.5, 100.0), expected_ctrl(0.2, 0.5, 100.0);
      Mat rewards = b.rewards;
      double kl_sum = 0;
      for (int64_t i = 0; i < b.rows; ++i) {
        double row = 0, n = 0;
        for (int64_t t = 0; t < b.cols; ++t) {
          const double kld = ref_kl(type, lp[i][t], ref[i][t]) * b.mask[i][t];
          rewards[i][t] -= 0.2 * kld;
          row += kld * b.mask[i][t];
          n += b.mask[i][t];
        }
        kl_sum += row / (n + 1e-8);
      }
      const double current_kl = kl_sum / b.rows;
      expected_ctrl.update(current_kl, b.rows);
      const auto out = va::apply_kl_penalty(from_mat(b.rewards, dtype), from_mat(lp, dtype), from_mat(ref, dtype),
                                            from_mat(b.mask, dtype), ctrl, type);
      const Tol tol = tol_for(dtype);
      check_close(out.token_level_rewards, rewards, tol.rtol, tol.atol, "rewards");
      CHECK(out.current_kl == Approx(current_kl).epsilon(dtype == at::kDouble ? 1e-12 : 1e-5));
      CHECK(out.kl_coef == 0.2);
      CHECK(ctrl.value() == Approx(expected_ctrl.value()).epsilon(1e-6));
      CHECK(ctrl.value() != 0.2);
    }
  }
}

// ---- entropy ----------------------------------------------------------------------------------

namespace {

// [rows][V] -> entropy per row, fp64: H = -sum p log p with p from a max-shifted softmax.
Vec ref_entropy(const at::Tensor& logits) {
  const Vec flat = to_vec(logits);
  const int64_t vocab = logits.size(-1), rows = logits.numel() / vocab;
  Vec h(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const double* z = flat.data() + r * vocab;
    const double mx = *std::max_element(z, z + vocab);
    double sum = 0;
    for (int64_t k = 0; k < vocab; ++k) sum += std::exp(z[k] - mx);
    double ent = 0;
    for (int64_t k = 0; k < vocab; ++k) {
      const double logp = z[k] - mx - std::log(sum);
      ent -= std::exp(logp) * logp;
    }
    h[r] = ent;
  }
  return h;
}

}  // namespace

TEST_CASE("entropy_from_logits and its chunked variant match the loop reference", "[entropy]") {
  const at::Tensor logits64 =
      at::randn({3, 5, 37}, at::detail::createCPUGenerator(7), at::kDouble).to(test_device()) * 3;
  const Vec want = ref_entropy(logits64);
  for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    const Tol tol = tol_for(dtype);
    const at::Tensor h = va::entropy_from_logits(logits64.to(dtype));
    CHECK(h.sizes() == at::IntArrayRef({3, 5}));
    CHECK(h.scalar_type() == dtype);
    check_close(h, want, tol.rtol, tol.atol, std::string("entropy ") + c10::toString(dtype));
  }
  for (int64_t chunk : {1, 3, 7, 15, 1000}) {
    const at::Tensor h = va::entropy_from_logits_with_chunking(logits64, chunk);
    CHECK(h.sizes() == at::IntArrayRef({3, 5}));
    CHECK(h.scalar_type() == at::kFloat);  // chunks are computed in fp32, as verl
    check_close(h, want, 2e-5, 2e-5, "chunked entropy, chunk " + std::to_string(chunk));
  }
  // bf16 logits: fp32 result, equal to the reference on the bf16-rounded logits.
  const at::Tensor bf = logits64.to(at::kBFloat16);
  check_close(va::entropy_from_logits_with_chunking(bf, 4), ref_entropy(bf.to(at::kDouble)), 2e-5, 2e-5,
              "chunked entropy of bf16 logits");
  // Extreme logits stay finite: a token with probability ~0 contributes nothing.
  const at::Tensor extreme = from_mat({{-1e4, 50, 50, -30}, {0, 0, 0, 0}}, at::kFloat);
  check_close(va::entropy_from_logits(extreme), Vec{std::log(2.0), std::log(4.0)}, 1e-6, 1e-6,
              "entropy of extreme logits");
  check_close(va::entropy_from_logits_with_chunking(extreme, 1), Vec{std::log(2.0), std::log(4.0)}, 1e-6, 1e-6,
              "chunked entropy of extreme logits");
  REQUIRE_THROWS_WITH(va::entropy_from_logits_with_chunking(logits64, 0),
                      Catch::Contains("chunk_size must be > 0; got 0"));
  REQUIRE_THROWS_WITH(va::entropy_from_logits(from_vec({1.0}, at::kFloat).reshape({})), Catch::Contains("shape []"));
}

TEST_CASE("entropy gradient and the aggregated entropy loss", "[entropy]") {
  const at::Tensor logits = at::randn({2, 3, 5}, at::detail::createCPUGenerator(8), at::kDouble).to(test_device());
  auto total = [](const at::Tensor& z) { return va::entropy_from_logits(z).sum(); };
  check_close(autograd_grad(total, logits),
              to_vec(finite_diff([&](const at::Tensor& z) { return to_double(total(z)); }, logits)), 1e-6, 1e-8,
              "entropy gradient");
  const Mat mask = {{1, 1, 0}, {1, 0, 0}};
  const Vec h = ref_entropy(logits);
  const double want = (h[0] + h[1] + h[3]) / 3.0;  // token-mean over the 3 response tokens
  check_scalar(va::compute_entropy_loss(logits, from_mat(mask, at::kDouble)), want, 1e-12, 0,
               "entropy loss token-mean");
  const double want_seq = ((h[0] + h[1]) / 2 + h[3]) / 2;
  check_scalar(va::compute_entropy_loss(logits, from_mat(mask, at::kDouble), "seq-mean-token-mean"), want_seq, 1e-7, 0,
               "entropy loss seq-mean-token-mean");
}
