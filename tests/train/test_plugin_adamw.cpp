// OptimizerStep::clip_and_step(MixedPrecision&) through a plugin's adamw_update (cpu_ref's
// reference loop): the same weights, moments, norms and skips as LibTorch's AdamW with the casts
// and the refresh around it (the path without kernels), over steps of one micro-batch (16-bit
// gradients deferred into the kernel) and of two (summed in fp32 first), with clipping engaged.
#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/model/model_config.hpp>
#include <verlpp/train/logprob.hpp>
#include <verlpp/train/mixed_precision.hpp>
#include <verlpp/train/optimizer.hpp>
#include <verlpp/train/parameters.hpp>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/randn.h>

#include <cmath>
#include <limits>
#include <string>
#include "cpu_ref_kernels.hpp"
#include "tiny_fixture.hpp"
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;

namespace {

using test::cpu_ref_kernels;

constexpr double kLr = 2e-3;

// A bf16-trained tiny model with its optimizer; `kernels` null: LibTorch's AdamW.
struct Trainee {
  model::DecoderLM master = test::tiny_model(4);
  train::MixedPrecision mp{master, at::kBFloat16};
  train::OptimizerStep opt;
  explicit Trainee(const hw::Kernels* kernels, const train::AdamWConfig& c)
      : opt((master.set_requires_grad(true), train::parameter_tensors(master)), c,
            train::LrSchedule({kLr, "constant", 0, 1, 0.0, 0.5})) {
    opt.use_kernels(kernels);
    mp.defer_casts(opt.updates_through_plugin());
  }
  // One update over `micro` backwards, each leaving the same seeded bf16 gradients on the compute
  // copy for both trainees (a backward through the model would differ between them wherever a
  // weight's last bit rounds to another bf16 value, and bf16 forwards amplify that), one element
  // set to `poison` when it is not 0.
  double update(int seed, int micro, double poison = 0.0) {
    opt.zero_grad();
    for (int k = 0; k < micro; ++k) {
      at::manual_seed(uint64_t(seed * 10 + k));
      for (const auto& [name, p] : mp.compute().named_parameters())
        const_cast<at::Tensor&>(p).mutable_grad() = at::randn(p.sizes()).mul_(1.0 + k).to(at::kBFloat16);
      if (poison != 0.0)
        const_cast<at::Tensor&>(mp.compute().named_parameters()[2].second).mutable_grad().view(-1)[0].fill_(poison);
      mp.accumulate_gradients();
    }
    return opt.clip_and_step(mp);
  }
};

// The largest weight difference between two models, in units of its tolerance: 8 fp32 ulps of
// the weight (the two paths round each step's arithmetic in another order, and the masters carry
// those last bits from step to step) plus 1e-5 of the LR (an AdamW step moves a weight by ~1 LR).
double worst_in_tolerance(const model::DecoderLM& a, const model::DecoderLM& b) {
  double worst = 0;
  for (size_t i = 0; i < a.named_parameters().size(); ++i) {
    const at::Tensor x = a.named_parameters()[i].second.detach(), y = b.named_parameters()[i].second.detach();
    const at::Tensor tolerance = y.abs().mul(8 * std::ldexp(1.0, -24)).add(1e-5 * kLr);
    worst = std::max(worst, x.sub(y).abs().div(tolerance).max().item<double>());
  }
  return worst;
}

// Clipping engaged: the gradients' norm is far above grad_clip.
train::AdamWConfig test_config() {
  train::AdamWConfig c;
  c.grad_clip = 0.05;
  c.weight_decay = 0.1;
  return c;
}

// Whether the compute copy is exactly the masters cast to bf16.
bool compute_is_cast(train::MixedPrecision& mp, const model::DecoderLM& master) {
  for (size_t i = 0; i < master.named_parameters().size(); ++i)
    if (!mp.compute().named_parameters()[i].second.detach().equal(
            master.named_parameters()[i].second.detach().to(at::kBFloat16)))
      return false;
  return true;
}

}  // namespace

TEST_CASE("plugin AdamW: the mixed-precision step through adamw_update equals LibTorch's AdamW with the casts",
          "[optimizer][kernels]") {
  const hw::Kernels& kernels = cpu_ref_kernels();
  REQUIRE(kernels.offers(hw::KernelId::adamw_update));
  const train::AdamWConfig c = test_config();
  Trainee plain(nullptr, c), fused(&kernels, c);
  REQUIRE(!plain.opt.updates_through_plugin());
  REQUIRE(fused.opt.updates_through_plugin());
  REQUIRE(fused.mp.defers_casts());
  for (int step = 0; step < 4; ++step) {
    const int micro = step == 2 ? 2 : 1;  // step 3 sums two backwards in fp32 before the kernel
    const double n_plain = plain.update(step, micro), n_fused = fused.update(step, micro);
    CHECK(fused.opt.last_step_through_plugin());
    CHECK(!plain.opt.last_step_through_plugin());
    INFO("step " << step << ": norms " << n_plain << " / " << n_fused);
    CHECK(n_plain > c.grad_clip);
    CHECK(std::fabs(n_fused - n_plain) <= 1e-5 * n_plain);
    const double worst = worst_in_tolerance(fused.master, plain.master);
    INFO("worst weight difference " << worst << " of its tolerance");
    CHECK(worst <= 1.0);
    CHECK(compute_is_cast(fused.mp, fused.master));
    for (const auto& [name, p] : fused.mp.compute().named_parameters()) CHECK(!p.grad().defined());
    // One backward: its bf16 gradients went to the kernel as they were, no fp32 sum was made
    // (the fallback would have cast them into the masters' gradients first).
    if (micro == 1)
      for (const auto& [name, p] : fused.master.named_parameters()) CHECK(!p.grad().defined());
  }
  CHECK(fused.opt.steps() == 4);
  CHECK(fused.opt.state_elements() == plain.opt.state_elements());
}

TEST_CASE("plugin AdamW: a non-finite gradient skips the step, writing nothing", "[optimizer][kernels]") {
  const hw::Kernels& kernels = cpu_ref_kernels();
  const train::AdamWConfig c = test_config();
  Trainee fused(&kernels, c);
  fused.update(0, 1);
  std::vector<at::Tensor> before;
  for (const auto& [name, p] : fused.master.named_parameters()) before.push_back(p.detach().clone());
  const int64_t state = fused.opt.state_elements();
  for (double poison : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    const double norm = fused.update(1, 1, poison);
    CHECK(!std::isfinite(norm));
    CHECK(fused.opt.last_step_skipped());
    for (size_t i = 0; i < before.size(); ++i)
      CHECK(fused.master.named_parameters()[i].second.detach().equal(before[i]));
    CHECK(compute_is_cast(fused.mp, fused.master));
    CHECK(fused.opt.state_elements() == state);
  }
  CHECK(fused.opt.steps() == 1);
  CHECK(fused.opt.skipped() == 2);
  // The next finite step goes on from the first step's state (its step count was not advanced).
  Trainee plain(nullptr, c);
  plain.update(0, 1);
  plain.update(2, 1);
  fused.update(2, 1);
  CHECK(worst_in_tolerance(fused.master, plain.master) <= 1.0);
}

TEST_CASE("mixed precision: deferred casts keep one backward's gradient aside until flushed", "[actor][mixed]") {
  model::DecoderLM master = test::tiny_model(3);
  master.set_requires_grad(true);
  train::MixedPrecision mp(master, at::kBFloat16);
  mp.defer_casts(true);
  const data::Batch b = test::ragged_batch(
      master.config().vocab_size, 4, 3, 3, 11, [](int64_t) { return 0; }, [](int64_t) { return 0; });
  auto out = train::response_log_probs(mp.compute(), b.tensor("input_ids"), b.tensor("attention_mask"),
                                       b.tensor("position_ids"), 3, 1.0, false);
  out.log_probs.sum().backward();
  std::vector<at::Tensor> expected;
  for (const auto& [name, p] : mp.compute().named_parameters()) expected.push_back(p.grad().to(at::kFloat));
  mp.accumulate_gradients();
  for (size_t i = 0; i < expected.size(); ++i) {
    CHECK(!master.named_parameters()[i].second.grad().defined());
    CHECK(!mp.compute().named_parameters()[i].second.grad().defined());
  }
  mp.flush_gradients();
  for (size_t i = 0; i < expected.size(); ++i) CHECK(master.named_parameters()[i].second.grad().equal(expected[i]));
  mp.flush_gradients();  // nothing deferred any more: the sums stay
  for (size_t i = 0; i < expected.size(); ++i) CHECK(master.named_parameters()[i].second.grad().equal(expected[i]));
}

// An ABI 1.3 plugin's table ends before adamw_update: the host must not read the slot, and the
// step falls back to LibTorch's AdamW with the casts (the same weights as the plain path).
TEST_CASE("plugin AdamW: a plugin built for ABI 1.3 is not asked for adamw_update", "[optimizer][kernels]") {
  const hw::Plugin& loaded = cpu_ref_kernels().plugin();
  verlpp_plugin_api api = loaded.api();
  api.abi_minor = 3;
  const hw::Plugin older(loaded.path(), loaded.score(), api, sizeof(api));
  const hw::Kernels kernels(older);
  CHECK(!kernels.offers(hw::KernelId::adamw_update));
  const train::AdamWConfig c = test_config();
  Trainee plain(nullptr, c), fallback(&kernels, c);
  CHECK(!fallback.opt.updates_through_plugin());
  CHECK(!fallback.mp.defers_casts());
  for (int step = 0; step < 2; ++step) CHECK(plain.update(step, 1) == fallback.update(step, 1));
  CHECK(!fallback.opt.last_step_through_plugin());
  CHECK(worst_in_tolerance(fallback.master, plain.master) == 0.0);
  CHECK(compute_is_cast(fallback.mp, fallback.master));
}
