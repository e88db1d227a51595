// Batch: every operation against plain index arithmetic on rows whose values encode their
// origin (row r holds r*10 + column), for tensors and non-tensor columns alike.
#include <verlpp/data/batch.hpp>
#include <verlpp/core/error.hpp>

#include <ATen/ops/arange.h>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using Catch::Contains;
using verlpp::data::Batch;

namespace {

// n rows: tensor "ids" [n, 3] with ids[r][c] = 10r + c, tensor "score" [n] = r, column "uid" = "u<r>".
Batch make(int64_t n) {
  Batch b;
  auto longs = at::TensorOptions().dtype(at::kLong);
  b.set("ids", at::arange(n, longs).unsqueeze(1).mul(10).add(at::arange(3, longs)));
  b.set("score", at::arange(n, at::TensorOptions().dtype(at::kFloat)));
  std::vector<nlohmann::json> uid;
  for (int64_t r = 0; r < n; ++r) uid.push_back("u" + std::to_string(r));
  b.set_column("uid", uid);
  b.meta()["step"] = 7;
  return b;
}

// Checks that row i of `b` came from source row origin[i].
void expect_rows(const Batch& b, const std::vector<int64_t>& origin) {
  REQUIRE(b.size() == int64_t(origin.size()));
  auto ids = b.tensor("ids").contiguous();
  auto score = b.tensor("score").contiguous();
  for (size_t i = 0; i < origin.size(); ++i) {
    INFO("row " << i << " should come from " << origin[i]);
    for (int64_t c = 0; c < 3; ++c) CHECK(ids[int64_t(i)][c].item<int64_t>() == origin[i] * 10 + c);
    CHECK(score[int64_t(i)].item<float>() == float(origin[i]));
    CHECK(b.column("uid")[i] == "u" + std::to_string(origin[i]));
  }
  CHECK(b.meta()["step"] == 7);
}

}  // namespace

TEST_CASE("batch: rows, slice, select", "[batch]") {
  Batch b = make(5);
  expect_rows(b, {0, 1, 2, 3, 4});
  expect_rows(b.rows({4, 0, 0, 2}), {4, 0, 0, 2});
  expect_rows(b.slice(1, 4), {1, 2, 3});
  expect_rows(b.slice(2, 2), {});
  Batch s = b.select({"score"}, {"uid"});
  CHECK(s.tensor_names() == std::vector<std::string>{"score"});
  CHECK(s.size() == 5);
  CHECK_THROWS_WITH(b.select({"nope"}, {}), Contains("no tensor 'nope'") && Contains("ids, score"));
  CHECK_THROWS_WITH(b.rows({5}), Contains("index 5 at position 0 is outside [0, 5)"));
  CHECK_THROWS_WITH(b.slice(3, 6), Contains("[3, 6)"));
}

TEST_CASE("batch: repeat interleaved and tiled", "[batch]") {
  Batch b = make(3);
  expect_rows(b.repeat(2), {0, 0, 1, 1, 2, 2});
  expect_rows(b.repeat(3, false), {0, 1, 2, 0, 1, 2, 0, 1, 2});
  expect_rows(b.repeat(1), {0, 1, 2});
  CHECK_THROWS_WITH(b.repeat(0), Contains("times = 0"));
}

TEST_CASE("batch: chunk, split, concat round trip", "[batch]") {
  Batch b = make(6);
  auto parts = b.chunk(3);
  REQUIRE(parts.size() == 3);
  expect_rows(parts[1], {2, 3});
  expect_rows(Batch::concat(parts), {0, 1, 2, 3, 4, 5});
  auto uneven = b.split(4);
  REQUIRE(uneven.size() == 2);
  expect_rows(uneven[1], {4, 5});
  CHECK_THROWS_WITH(b.chunk(4), Contains("6 rows cannot be split into 4 equal chunks"));
  Batch other = make(2).select({"ids"}, {"uid"});
  CHECK_THROWS_WITH(Batch::concat({b, other}), Contains("part 1 holds tensors [ids]"));
  CHECK(make(0).chunk(2).size() == 2);
}

TEST_CASE("batch: pad to a multiple, then unpad", "[batch]") {
  Batch b = make(5);
  auto [padded, pad] = b.pad_to_multiple(4);
  CHECK(pad == 3);
  expect_rows(padded, {0, 1, 2, 3, 4, 0, 1, 2});
  expect_rows(padded.unpad(pad), {0, 1, 2, 3, 4});
  auto [small, pad2] = make(2).pad_to_multiple(7);  // more padding than rows: wraps around
  CHECK(pad2 == 5);
  expect_rows(small, {0, 1, 0, 1, 0, 1, 0});
  CHECK(b.pad_to_multiple(5).second == 0);
}

TEST_CASE("batch: shapes must agree, merge checks conflicts", "[batch]") {
  Batch b = make(4);
  CHECK_THROWS_WITH(b.set("bad", at::arange(3)), Contains("tensor 'bad' has 3 rows, the batch has 4"));
  CHECK_THROWS_WITH(b.set_column("bad", {1, 2}), Contains("column 'bad' has 2 rows"));
  Batch extra;
  extra.set("adv", at::arange(4, at::TensorOptions().dtype(at::kFloat)));
  extra.meta()["temperature"] = 1.0;
  b.merge(extra);
  CHECK(b.has_tensor("adv"));
  CHECK(b.meta()["temperature"] == 1.0);
  Batch clash;
  clash.set("score", at::arange(4, at::TensorOptions().dtype(at::kFloat)).add(1));
  CHECK_THROWS_WITH(b.merge(clash), Contains("tensor 'score' with different data"));
}
