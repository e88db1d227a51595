// OptimizerStep::save_state / load_state: a run interrupted after k steps, saved, and resumed on
// copies of the parameters in a fresh optimizer ends bit-identical to the uninterrupted run (LR
// warmup + cosine, clipping and a skipped non-finite step included); bad files fail by name.
#include <verlpp/core/error.hpp>
#include <verlpp/model/safetensors.hpp>
#include <verlpp/train/optimizer.hpp>

#include <ATen/ops/arange.h>
#include <ATen/ops/sin.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <unistd.h>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;
using Catch::Contains;

namespace {

// HF-style dotted names: the field is what follows the last dot.
const std::vector<std::string> kNames = {"w1", "w2", "layers.0.w3", "frozen"};
constexpr int64_t kSkippedUpdate = 2;  // this update's gradient is infinite

std::string temp_path(const std::string& name) {
  return "/tmp/verlpp-optstate-test-" + std::to_string(getpid()) + "-" + name + ".safetensors";
}

// Deterministic values of `shape`: sin(scale * i + phase).
at::Tensor wave(std::vector<int64_t> shape, double scale, double phase, at::ScalarType dtype = at::kFloat) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return at::sin(at::arange(n, at::TensorOptions().dtype(at::kDouble)).mul(scale).add(phase)).reshape(shape).to(dtype);
}

// w1 [3, 5], w2 [7], w3 [2, 1, 3] get gradients; "frozen" [4] never does (so never has state).
std::vector<at::Tensor> make_params(std::vector<int64_t> w1_shape = {3, 5}, at::ScalarType dtype = at::kFloat) {
  return {wave(w1_shape, 0.7, 0.1, dtype).set_requires_grad(true), wave({7}, 1.3, 0.2, dtype).set_requires_grad(true),
          wave({2, 1, 3}, 0.4, 0.3, dtype).set_requires_grad(true), wave({4}, 0.9, 0.4, dtype).set_requires_grad(true)};
}

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> out;
  for (const auto& p : params) out.push_back(p.detach().clone().set_requires_grad(true));
  return out;
}

train::OptimizerStep make_optimizer(const std::vector<at::Tensor>& params, double weight_decay = 0.1) {
  train::AdamWConfig config;
  config.weight_decay = weight_decay;
  config.grad_clip = 2.0;  // the gradients below exceed it on some updates: clipping is exercised
  train::LrScheduleOptions schedule;
  schedule.base_lr = 1e-2, schedule.style = "cosine", schedule.warmup_steps = 2, schedule.total_steps = 10;
  schedule.min_lr_ratio = 0.1;
  return train::OptimizerStep(params, config, train::LrSchedule(schedule));
}

// Updates [from, to): LR for the update, fixed gradients that vary with it, clip and step.
void run_updates(train::OptimizerStep& opt, const std::vector<at::Tensor>& params, int64_t from, int64_t to) {
  for (int64_t u = from; u < to; ++u) {
    opt.set_lr_for_update(u);
    opt.zero_grad();
    for (size_t i = 0; i < 3; ++i) {
      at::Tensor g = wave(params[i].sizes().vec(), 0.3 + 0.1 * u, 0.5 * i, params[i].scalar_type()).mul(1.0 + u);
      if (u == kSkippedUpdate && i == 0) g.fill_(std::numeric_limits<double>::infinity());
      params[i].mutable_grad() = g;
    }
    opt.clip_and_step();
  }
}

bool all_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].equal(b[i])) return false;
  return true;
}

}  // namespace

TEST_CASE("optimizer state: a resumed run is bit-identical to the uninterrupted one", "[optimizer][checkpoint]") {
  const int64_t k = GENERATE(1, 4), m = 5;  // k = 4 saves after the skipped update
  const std::string path = temp_path("resume-" + std::to_string(k));

  auto params = make_params();
  auto opt = make_optimizer(params);
  run_updates(opt, params, 0, k);
  opt.save_state(path, kNames);
  const auto saved_params = copies(params);

  // What was written: a state per stepped parameter, none for "frozen"; counters in metadata.
  {
    model::SafetensorsFile file(path);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(file.contains(kNames[i] + ".exp_avg"));
      CHECK(file.contains(kNames[i] + ".exp_avg_sq"));
      CHECK(file.contains(kNames[i] + ".step"));
    }
    for (const auto& e : file.entries()) CHECK(e.name.rfind("frozen.", 0) != 0);
    CHECK(file.metadata().at("verlpp.steps") == std::to_string(opt.steps()));
    CHECK(file.metadata().at("verlpp.skipped") == std::to_string(opt.skipped()));
    const int64_t w1_steps = file.tensor("w1.step").item<int64_t>();
    CHECK(w1_steps == opt.steps());
  }

  // Uninterrupted: the same optimizer goes on.
  run_updates(opt, params, k, k + m);

  // Resumed: a fresh optimizer on copies of the saved parameters, loaded, then the same updates.
  auto resumed_params = copies(saved_params);
  auto resumed = make_optimizer(resumed_params);
  resumed.load_state(path, kNames);
  CHECK(resumed.steps() == (k > kSkippedUpdate ? k - 1 : k));
  CHECK(resumed.skipped() == (k > kSkippedUpdate ? 1 : 0));
  run_updates(resumed, resumed_params, k, k + m);

  CHECK(all_equal(params, resumed_params));
  CHECK(resumed.steps() == opt.steps());
  CHECK(resumed.skipped() == opt.skipped());
  CHECK(resumed_params[3].equal(saved_params[3]));  // "frozen" never moved

  // The check has teeth: without the state (fresh moments, step 1 bias correction) it differs.
  auto fresh_params = copies(saved_params);
  auto fresh = make_optimizer(fresh_params);
  run_updates(fresh, fresh_params, k, k + m);
  CHECK_FALSE(all_equal(params, fresh_params));
  std::remove(path.c_str());
}

TEST_CASE("optimizer state: the LR is restored even without set_lr_for_update", "[optimizer][checkpoint]") {
  const std::string path = temp_path("lr");
  auto params = make_params();
  auto opt = make_optimizer(params);
  run_updates(opt, params, 0, 3);
  opt.save_state(path, kNames);
  auto resumed_params = copies(params);
  auto resumed = make_optimizer(resumed_params);  // its LR is the schedule's lr(0) = 0 (warmup)
  resumed.load_state(path, kNames);
  // One more step on both with no set_lr_for_update: the LR must be update 2's on both.
  opt.zero_grad();
  resumed.zero_grad();
  for (auto* ps : {&params, &resumed_params})
    for (size_t i = 0; i < 3; ++i) (*ps)[i].mutable_grad() = wave((*ps)[i].sizes().vec(), 0.2, 0.1);
  opt.clip_and_step();
  resumed.clip_and_step();
  CHECK(all_equal(params, resumed_params));
  std::remove(path.c_str());
}

TEST_CASE("optimizer state: a mismatched file fails, naming file and tensor, and changes nothing",
          "[optimizer][checkpoint]") {
  const std::string path = temp_path("bad");
  auto params = make_params();
  auto opt = make_optimizer(params);
  run_updates(opt, params, 0, 2);
  opt.save_state(path, kNames);

  SECTION("wrong shape") {
    auto other_params = make_params({5, 3});
    auto other = make_optimizer(other_params);
    CHECK_THROWS_WITH(other.load_state(path, kNames),
                      Contains(path) && Contains("w1.exp_avg") && Contains("[3, 5]") && Contains("[5, 3]"));
    CHECK(other.steps() == 0);  // nothing was loaded
  }
  SECTION("wrong dtype") {
    auto other_params = make_params({3, 5}, at::kDouble);
    auto other = make_optimizer(other_params);
    CHECK_THROWS_WITH(other.load_state(path, kNames), Contains(path) && Contains("w1.exp_avg") && Contains("F32"));
  }
  SECTION("a name the file does not have") {
    auto other = make_optimizer(copies(params));
    CHECK_THROWS_WITH(other.load_state(path, {"w1", "w2_renamed", "layers.0.w3", "frozen"}),
                      Contains(path) && Contains("w2_renamed"));
  }
  SECTION("wrong number of names") {
    auto other = make_optimizer(copies(params));
    CHECK_THROWS_WITH(other.load_state(path, {"w1", "w2", "layers.0.w3"}), Contains("3 names given for 4 parameters"));
    CHECK_THROWS_WITH(opt.save_state(path, {"w1", "w1", "layers.0.w3", "frozen"}), Contains("'w1' given twice"));
  }
  SECTION("a different config") {
    auto other = make_optimizer(copies(params), /*weight_decay=*/0.05);
    CHECK_THROWS_WITH(other.load_state(path, kNames), Contains(path) && Contains("weight_decay"));
  }
  SECTION("not an optimizer state") {
    const std::string plain = temp_path("plain");
    model::write_safetensors(plain, {{"w1", params[0].detach()}});
    auto other = make_optimizer(copies(params));
    CHECK_THROWS_WITH(other.load_state(plain, kNames), Contains(plain) && Contains("save_state"));
    std::remove(plain.c_str());
  }
  std::remove(path.c_str());
}

TEST_CASE("optimizer state: loading leaves parameters stateless that were stateless when saved",
          "[optimizer][checkpoint]") {
  const std::string path = temp_path("stateless");
  auto params = make_params();
  auto before = make_optimizer(params);
  before.save_state(path, kNames);  // nothing stepped yet: no tensors at all
  CHECK(model::SafetensorsFile(path).entries().empty());

  // An optimizer that has stepped, loaded with that empty state, behaves like a fresh one.
  auto stepped_params = copies(params);
  auto stepped = make_optimizer(stepped_params);
  run_updates(stepped, stepped_params, 0, 3);
  auto fresh_params = copies(stepped_params);
  auto fresh = make_optimizer(fresh_params);
  stepped.load_state(path, kNames);
  CHECK(stepped.steps() == 0);
  run_updates(stepped, stepped_params, 0, 3);
  run_updates(fresh, fresh_params, 0, 3);
  CHECK(all_equal(stepped_params, fresh_params));
  std::remove(path.c_str());
}
