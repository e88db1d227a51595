// TrainedModel on the tiny model, with a loss linear in the weights (so every gradient is known
// exactly, in fp32 or rounded to bf16): steps through it equal AdamW written out in fp64 (decoupled
// weight decay, bias corrections, clipping, the LR schedule, a skipped non-finite step), with and
// without a bf16 compute copy and cpu_ref's adamw_update; a handle on the compute tensors sees
// every step; save then load restores weights and optimizer state, so a resumed run ends
// bit-identical to the uninterrupted one.
#include <ATen/core/grad_mode.h>
#include <verlpp/train/trained_model.hpp>

#include <ATen/ops/arange.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/sqrt.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "cpu_ref_kernels.hpp"
#include "tiny_fixture.hpp"
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;

namespace {

constexpr int64_t kSkippedUpdate = 2;  // this update's gradient holds an infinity

train::LrSchedule schedule() { return train::LrSchedule({1e-2, "cosine", 1, 6, 0.1, 0.5}); }

train::TrainedModelOptions options(at::ScalarType dtype, const hw::Kernels* kernels) {
  train::TrainedModelOptions o;
  o.optim.weight_decay = 0.1;
  o.optim.grad_clip = 5.0;  // the gradients' norm is in the hundreds: clipping is engaged
  o.param_dtype = dtype;
  o.kernels = kernels;
  return o;
}

// The coefficients of micro-batch `micro` of update `update`, one tensor per parameter (fp64):
// +-(0.2 .. 1.2), so no gradient is near 0, where AdamW's g / (|g| + eps) would amplify rounding.
std::vector<at::Tensor> coefficients(const model::DecoderLM& m, int64_t update, int64_t micro) {
  std::vector<at::Tensor> out;
  int64_t k = 0;
  for (const auto& [name, p] : m.named_parameters()) {
    const double phase = 0.37 * double(update) + 1.9 * double(micro) + 0.11 * double(k++);
    const at::Tensor s = at::sin(at::arange(p.numel(), at::TensorOptions().dtype(at::kDouble)).mul(0.61).add(phase));
    out.push_back(s.sign().mul(s.abs().add(0.2)).reshape(p.sizes()));
  }
  return out;
}

// sum_i <p_i, c_i> over the compute model's parameters: its gradient is c_i in the compute dtype.
at::Tensor linear_loss(const model::DecoderLM& compute, const std::vector<at::Tensor>& coef) {
  at::Tensor loss = at::zeros({}, at::TensorOptions().dtype(at::kFloat));
  size_t i = 0;
  for (const auto& [name, p] : compute.named_parameters())
    loss = loss.add(p.mul(coef[i++].to(p.scalar_type())).sum().to(at::kFloat));
  return loss;
}

// The gradient TrainedModel sees for one micro-batch: c rounded to the compute dtype, in fp64.
std::vector<at::Tensor> seen_gradient(const std::vector<at::Tensor>& coef, at::ScalarType dtype) {
  std::vector<at::Tensor> out;
  for (const auto& c : coef) out.push_back(c.to(dtype).to(at::kDouble));
  return out;
}

// Updates [from, to) through `trained`, `micros` backwards each; update kSkippedUpdate poisons one
// gradient element with an infinity.
void run_updates(train::TrainedModel& trained, int64_t from, int64_t to, int64_t micros) {
  for (int64_t u = from; u < to; ++u) {
    trained.begin_update();
    trained.zero_grad();
    for (int64_t k = 0; k < micros; ++k) {
      std::vector<at::Tensor> coef = coefficients(trained.master(), u, k);
      if (u == kSkippedUpdate && k == 0) coef[3].view(-1)[5].fill_(std::numeric_limits<double>::infinity());
      trained.backward(linear_loss(trained.compute(), coef));
    }
    trained.step();
  }
}

// AdamW as torch.optim.AdamW computes it, in fp64, over `params` (the masters, moved in place),
// with torch.nn.utils.clip_grad_norm_ before and the step skipped when the norm is not finite.
struct ReferenceAdamW {
  std::vector<at::Tensor> params, exp_avg, exp_avg_sq;
  train::AdamWConfig c;
  int64_t steps = 0;

  ReferenceAdamW(const model::DecoderLM& m, const train::AdamWConfig& config) : c(config) {
    for (const auto& [name, p] : m.named_parameters()) {
      params.push_back(p.detach().to(at::kDouble));
      exp_avg.push_back(at::zeros_like(params.back()));
      exp_avg_sq.push_back(at::zeros_like(params.back()));
    }
  }
  // Returns the norm before clipping.
  double step(std::vector<at::Tensor> grads, double lr) {
    std::vector<at::Tensor> norms;
    for (const auto& g : grads) norms.push_back(g.norm());
    const double norm = at::stack(norms).norm().item<double>();
    if (!std::isfinite(norm)) return norm;
    const double coef = std::min(1.0, c.grad_clip / (norm + 1e-6));
    ++steps;
    const double bc1 = 1 - std::pow(c.beta1, double(steps)), bc2 = 1 - std::pow(c.beta2, double(steps));
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor g = grads[i].mul(coef);
      params[i].mul_(1 - lr * c.weight_decay);
      exp_avg[i].mul_(c.beta1).add_(g.mul(1 - c.beta1));
      exp_avg_sq[i].mul_(c.beta2).add_(g.mul(g).mul(1 - c.beta2));
      const at::Tensor denom = at::sqrt(exp_avg_sq[i]).div(std::sqrt(bc2)).add(c.eps);
      params[i].sub_(exp_avg[i].div(denom).mul(lr / bc1));
    }
    return norm;
  }
};

bool all_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].equal(b[i])) return false;
  return true;
}

// Whether every compute parameter of `trained` is its master cast, bit for bit.
bool compute_is_master_cast(const train::TrainedModel& trained) {
  const auto& masters = trained.master().named_parameters();
  const auto& computes = trained.compute().named_parameters();
  for (size_t i = 0; i < masters.size(); ++i)
    if (!computes[i].second.detach().equal(masters[i].second.detach().to(computes[i].second.scalar_type())))
      return false;
  return true;
}

std::string temp_dir(const std::string& name) {
  const std::string dir = "/tmp/verlpp-trained-model-test-" + std::to_string(getpid()) + "-" + name;
  REQUIRE(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()) == 0);
  return dir;
}

}  // namespace

TEST_CASE("trained model: steps equal AdamW written out in fp64", "[trained_model]") {
  struct Variant {
    const char* name;
    at::ScalarType dtype;
    bool kernels;
    int64_t micros;
  };
  const Variant variants[] = {{"fp32", at::kFloat, false, 2},
                              {"bf16", at::kBFloat16, false, 2},
                              {"bf16, plugin AdamW, 16-bit gradients into the kernel", at::kBFloat16, true, 1},
                              {"bf16, plugin AdamW, gradients summed in fp32 first", at::kBFloat16, true, 2}};
  const Variant variant = variants[GENERATE(0, 1, 2, 3)];
  INFO(variant.name);
  const train::TrainedModelOptions o = options(variant.dtype, variant.kernels ? &test::cpu_ref_kernels() : nullptr);
  model::DecoderLM m = test::tiny_model(5);
  train::TrainedModel trained(m, o, schedule());
  ReferenceAdamW reference(m, o.optim);
  const train::LrSchedule lr = schedule();
  for (int64_t u = 0; u < 4; ++u) {
    REQUIRE(trained.updates() == u);
    CHECK(trained.begin_update() == lr.lr(u));
    trained.zero_grad();
    std::vector<at::Tensor> grads;
    for (int64_t k = 0; k < variant.micros; ++k) {
      std::vector<at::Tensor> coef = coefficients(m, u, k);
      if (u == kSkippedUpdate && k == 0) coef[3].view(-1)[5].fill_(std::numeric_limits<double>::infinity());
      trained.backward(linear_loss(trained.compute(), coef));
      const std::vector<at::Tensor> g = seen_gradient(coef, variant.dtype);
      if (grads.empty()) {
        grads = g;
      } else {
        for (size_t i = 0; i < g.size(); ++i) grads[i] = grads[i].add(g[i]);
      }
    }
    const double norm = trained.step();
    const double want_norm = reference.step(grads, lr.lr(u));
    INFO("update " << u);
    CHECK(trained.last_step_skipped() == (u == kSkippedUpdate));
    CHECK(trained.optimizer().last_step_through_plugin() == variant.kernels);
    if (u == kSkippedUpdate) {
      CHECK(!std::isfinite(norm));
      CHECK(trained.mean_grad_norm() == 0.0);  // no step taken in this update
    } else {
      CHECK(norm == Approx(want_norm).epsilon(1e-5));
      CHECK(trained.mean_grad_norm() == norm);
    }
    // Every weight within 8 fp32 ulps of itself plus 1e-5 of the LR (a step moves it by ~1 LR);
    // a wrong term (decay, a bias correction, the clipping factor) is off by far more.
    double worst = 0;
    size_t worst_at = 0;
    for (size_t i = 0; i < reference.params.size(); ++i) {
      const at::Tensor got = m.named_parameters()[i].second.detach().to(at::kDouble);
      const at::Tensor tolerance =
          reference.params[i].abs().mul(8 * std::ldexp(1.0, -24)).add(1e-5 * lr.options().base_lr);
      const double w = got.sub(reference.params[i]).abs().div(tolerance).max().item<double>();
      if (w > worst) worst = w, worst_at = i;
    }
    INFO("worst weight error " << worst << " tolerances, at " << m.named_parameters()[worst_at].first);
    CHECK(worst <= 1.0);
    CHECK(compute_is_master_cast(trained));
  }
  CHECK(trained.steps() == 3);
  CHECK(trained.skipped_steps() == 1);
}

// The hybrid engine holds a second handle on the compute tensors (rl_setup.cpp): steps and loads
// must write into them, never replace them.
TEST_CASE("trained model: a handle on the compute tensors sees every step and load", "[trained_model]") {
  const at::ScalarType dtype = GENERATE(at::kFloat, at::kBFloat16);
  const std::string dir = temp_dir(std::string("handle-") + c10::toString(dtype));
  model::DecoderLM m = test::tiny_model(5);
  train::TrainedModel trained(m, options(dtype, nullptr), schedule());
  const model::DecoderLM engine = trained.compute();  // shares the tensors, as the engine's model does
  run_updates(trained, 0, 2, 1);
  trained.save(dir);
  run_updates(trained, 2, 4, 1);
  CHECK(all_equal(test::parameter_values(engine), test::parameter_values(trained.compute())));
  const auto stepped = test::parameter_values(engine);
  trained.load(dir);  // back to the weights after update 2
  CHECK(all_equal(test::parameter_values(engine), test::parameter_values(trained.compute())));
  CHECK_FALSE(all_equal(test::parameter_values(engine), stepped));
  CHECK(std::system(("rm -rf " + dir).c_str()) == 0);
}

TEST_CASE("trained model: save then load resumes bit-identically to the uninterrupted run",
          "[trained_model][checkpoint]") {
  const at::ScalarType dtype = GENERATE(at::kFloat, at::kBFloat16);
  const int64_t k = GENERATE(1, 3), n = 5;  // k = 3 saves after the skipped update
  const std::string dir = temp_dir(std::string("resume-") + c10::toString(dtype) + "-" + std::to_string(k));
  const train::TrainedModelOptions o = options(dtype, nullptr);

  // Uninterrupted: n updates in one go.
  model::DecoderLM straight = test::tiny_model(5);
  train::TrainedModel uninterrupted(straight, o, schedule());
  run_updates(uninterrupted, 0, n, 2);

  // Interrupted after k updates and saved.
  model::DecoderLM first = test::tiny_model(5);
  {
    train::TrainedModel trained(first, o, schedule());
    run_updates(trained, 0, k, 2);
    trained.save(dir);
  }
  for (const char* file : {"config.json", "model.safetensors", train::TrainedModel::kOptimizerStateFile})
    CHECK(::access((dir + "/" + file).c_str(), F_OK) == 0);

  // Resumed: another model (other weights), loaded, the LR schedule's position restored.
  model::DecoderLM second = test::tiny_model(77);
  train::TrainedModel resumed(second, o, schedule());
  resumed.load(dir);
  CHECK(all_equal(test::parameter_values(second), test::parameter_values(first)));
  CHECK(compute_is_master_cast(resumed));
  CHECK(resumed.steps() == (k > kSkippedUpdate ? k - 1 : k));
  CHECK(resumed.skipped_steps() == (k > kSkippedUpdate ? 1 : 0));
  resumed.set_updates(k);
  run_updates(resumed, k, n, 2);

  CHECK(all_equal(test::parameter_values(second), test::parameter_values(straight)));
  CHECK(all_equal(test::parameter_values(resumed.compute()), test::parameter_values(uninterrupted.compute())));
  CHECK(resumed.steps() == uninterrupted.steps());
  CHECK(resumed.skipped_steps() == uninterrupted.skipped_steps());

  // The check has teeth: the weights alone, without the optimizer state, end elsewhere.
  model::DecoderLM third = test::tiny_model(77);
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < third.named_parameters().size(); ++i)
      third.named_parameters()[i].second.detach().copy_(first.named_parameters()[i].second.detach());
  }
  train::TrainedModel fresh(third, o, schedule());
  fresh.set_updates(k);
  run_updates(fresh, k, n, 2);
  CHECK_FALSE(all_equal(test::parameter_values(third), test::parameter_values(straight)));
  CHECK(std::system(("rm -rf " + dir).c_str()) == 0);
}
