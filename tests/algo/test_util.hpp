// Helpers for the algo tests: host matrices (fp64 loops are the references), conversion to
// tensors, an element-wise comparison that reports the worst error and the first bad index,
// random ragged batches with groups of size 1, 2 and many, and central finite differences.
#pragma once

#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace algo_test {

using Vec = std::vector<double>;
using Mat = std::vector<Vec>;  // [B][T]

inline Mat zeros_mat(int64_t rows, int64_t cols) { return Mat(rows, Vec(cols, 0.0)); }

// The device test inputs are made on: VERLPP_TEST_DEVICE (e.g. "cuda"), default CPU. The
// references stay host loops, so the same suite checks the library on an accelerator.
inline at::Device test_device() {
  static const at::Device device = [] {
    const char* env = std::getenv("VERLPP_TEST_DEVICE");
    return at::Device(env && *env ? env : "cpu");
  }();
  return device;
}

inline Vec to_vec(const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kCPU).to(at::kDouble).contiguous();
  const double* p = c.data_ptr<double>();
  return Vec(p, p + c.numel());
}

inline double to_double(const at::Tensor& t) { return t.detach().to(at::kDouble).item<double>(); }

inline Mat to_mat(const at::Tensor& t) {
  REQUIRE(t.dim() == 2);
  const Vec flat = to_vec(t);
  Mat m(t.size(0), Vec(t.size(1)));
  for (int64_t i = 0; i < t.size(0); ++i)
    for (int64_t j = 0; j < t.size(1); ++j) m[i][j] = flat[i * t.size(1) + j];
  return m;
}

inline at::Tensor from_vec(const Vec& v, at::ScalarType dtype) {
  Vec copy = v;
  return at::from_blob(copy.data(), {static_cast<int64_t>(copy.size())}, at::TensorOptions().dtype(at::kDouble))
      .clone()
      .to(test_device())
      .to(dtype);
}

inline at::Tensor from_mat(const Mat& m, at::ScalarType dtype) {
  const int64_t rows = static_cast<int64_t>(m.size());
  const int64_t cols = rows ? static_cast<int64_t>(m[0].size()) : 0;
  Vec flat;
  for (const Vec& r : m) flat.insert(flat.end(), r.begin(), r.end());
  return from_vec(flat, dtype).reshape({rows, cols});
}

// Every element within atol + rtol·|expected| (NaN only where NaN is expected). On failure
// reports how many are off, the first bad index, and the worst error with its index.
inline void check_close(const at::Tensor& actual, const Vec& expected, double rtol, double atol,
                        const std::string& what, int64_t cols = 0) {
  const Vec got = to_vec(actual);
  REQUIRE(got.size() == expected.size());
  auto index_str = [&](size_t k) {
    std::ostringstream os;
    if (cols > 0)
      os << "[" << k / cols << ", " << k % cols << "]";
    else
      os << "[" << k << "]";
    return os.str();
  };
  size_t num_bad = 0, first_bad = 0, worst = 0;
  double worst_err = -1.0;
  for (size_t k = 0; k < got.size(); ++k) {
    const double a = got[k], e = expected[k];
    double err;
    bool bad;
    if (std::isnan(e) || std::isnan(a)) {
      bad = std::isnan(e) != std::isnan(a);
      err = bad ? INFINITY : 0.0;
    } else if (std::isinf(e) || std::isinf(a)) {
      bad = a != e;
      err = bad ? INFINITY : 0.0;
    } else {
      err = std::fabs(a - e);
      bad = err > atol + rtol * std::fabs(e);
    }
    if (bad && num_bad++ == 0) first_bad = k;
    if (err > worst_err) {
      worst_err = err;
      worst = k;
    }
  }
  if (num_bad) {
    std::ostringstream os;
    os.precision(17);
    os << what << ": " << num_bad << " of " << got.size() << " elements off (rtol " << rtol << ", atol " << atol
       << "); first bad " << index_str(first_bad) << " got " << got[first_bad] << " expected " << expected[first_bad]
       << "; worst " << index_str(worst) << " |err| " << worst_err << " (got " << got[worst] << ", expected "
       << expected[worst] << ")";
    FAIL_CHECK(os.str());
  } else {
    SUCCEED(what);
  }
}

inline void check_close(const at::Tensor& actual, const Mat& expected, double rtol, double atol,
                        const std::string& what) {
  Vec flat;
  for (const Vec& r : expected) flat.insert(flat.end(), r.begin(), r.end());
  check_close(actual, flat, rtol, atol, what, expected.empty() ? 0 : expected[0].size());
}

inline void check_scalar(const at::Tensor& actual, double expected, double rtol, double atol, const std::string& what) {
  REQUIRE(actual.numel() == 1);
  check_close(actual.reshape({1}), Vec{expected}, rtol, atol, what);
}

// Tolerances per dtype for results of a few dozen ops (whitening divides by a std).
struct Tol {
  double rtol, atol;
};
inline Tol tol_for(at::ScalarType dtype) { return dtype == at::kDouble ? Tol{1e-10, 1e-11} : Tol{2e-5, 2e-5}; }

// A random batch: rows shuffled across groups of the given sizes, ragged response lengths
// (0 and T included), masks as prefixes or (holes = true) with masked-out gaps inside.
struct Batch {
  int64_t rows = 0, cols = 0;
  Mat rewards, values, mask;
  Vec baselines;
  std::vector<std::string> uids;
};

inline Batch make_batch(uint64_t seed, const std::vector<int>& group_sizes, int64_t cols, bool outcome_only,
                        bool holes = false) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Batch b;
  for (size_t g = 0; g < group_sizes.size(); ++g)
    for (int k = 0; k < group_sizes[g]; ++k) b.uids.push_back("uid-" + std::to_string(g * 7919));
  std::shuffle(b.uids.begin(), b.uids.end(), rng);
  b.rows = static_cast<int64_t>(b.uids.size());
  b.cols = cols;
  b.rewards = zeros_mat(b.rows, cols);
  b.values = zeros_mat(b.rows, cols);
  b.mask = zeros_mat(b.rows, cols);
  std::uniform_int_distribution<int64_t> len_dist(1, cols);
  for (int64_t i = 0; i < b.rows; ++i) {
    int64_t len = len_dist(rng);
    if (i == 1) len = cols;             // a full row
    if (i == 2 && b.rows > 4) len = 0;  // an empty row
    for (int64_t t = 0; t < len; ++t) b.mask[i][t] = 1.0;
    if (holes)
      for (int64_t t = 1; t + 1 < len; ++t)
        if (rng() % 4 == 0) b.mask[i][t] = 0.0;  // e.g. observation tokens in a multi-turn row
    for (int64_t t = 0; t < cols; ++t) b.values[i][t] = normal(rng);
    if (outcome_only) {
      // 0/1/0.5 outcome on the last response token: exact sums, ties inside groups.
      if (len > 0) b.rewards[i][len - 1] = static_cast<double>(rng() % 3) * 0.5;
    } else {
      for (int64_t t = 0; t < cols; ++t) b.rewards[i][t] = b.mask[i][t] * normal(rng);
    }
    b.baselines.push_back(normal(rng));
  }
  return b;
}

// Row ids of each group, in first-appearance order of the uids.
inline std::vector<std::vector<int64_t>> group_rows(const std::vector<std::string>& uids) {
  std::vector<std::string> seen;
  std::vector<std::vector<int64_t>> rows;
  for (int64_t i = 0; i < static_cast<int64_t>(uids.size()); ++i) {
    auto it = std::find(seen.begin(), seen.end(), uids[i]);
    if (it == seen.end()) {
      seen.push_back(uids[i]);
      rows.push_back({i});
    } else {
      rows[it - seen.begin()].push_back(i);
    }
  }
  return rows;
}

inline double row_sum(const Vec& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

// Central finite differences of a scalar function f at x (fp64): df/dx, same shape as x.
inline at::Tensor finite_diff(const std::function<double(const at::Tensor&)>& f, const at::Tensor& x, double h = 1e-6) {
  at::Tensor base = x.detach().to(at::kCPU).to(at::kDouble).contiguous().clone();
  at::Tensor grad = at::zeros_like(base);
  double* p = base.data_ptr<double>();
  double* g = grad.data_ptr<double>();
  for (int64_t k = 0; k < base.numel(); ++k) {
    const double keep = p[k];
    p[k] = keep + h;
    const double up = f(base.to(x.device()));
    p[k] = keep - h;
    const double down = f(base.to(x.device()));
    p[k] = keep;
    g[k] = (up - down) / (2 * h);
  }
  return grad;
}

// Autograd gradient of a scalar function at x (fp64).
inline at::Tensor autograd_grad(const std::function<at::Tensor(const at::Tensor&)>& f, const at::Tensor& x) {
  at::Tensor leaf = x.detach().to(at::kDouble).clone().requires_grad_(true);
  f(leaf).backward();
  return leaf.grad().detach().clone();
}

}  // namespace algo_test
