// TrainedModel with LoRA adapters on the tiny model: the frozen base (bf16) stays bit-identical
// while the adapters learn; AdamW's first step moves B by lr·sign(grad) and leaves A (its
// gradient is zero while B is) as PEFT's zero B makes it; only the adapters hold gradients and
// optimizer state; a checkpoint is a PEFT folder plus the optimizer state and resumes
// bit-identically; the sharded-units layouts are refused by name.
#include <ATen/core/grad_mode.h>
#include <verlpp/core/error.hpp>
#include <verlpp/model/lora.hpp>
#include <verlpp/model/lora_files.hpp>
#include <verlpp/train/trained_model.hpp>

#include <ATen/TensorOperators.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tiny_fixture.hpp"
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;

namespace {

train::LrSchedule schedule() { return train::LrSchedule({1e-2, "constant", 0, 1, 0.0, 0.5}); }

struct LoraRun {
  model::DecoderLM base;
  std::shared_ptr<model::LoraAdapters> adapters;
  std::unique_ptr<train::TrainedModel> trained;

  explicit LoraRun(double weight_decay = 0.0) : base(test::tiny_model(3)) {
    base.to(at::kBFloat16, c10::Device(c10::kCPU));
    model::LoraConfig config;
    config.rank = 4;
    config.alpha = 8;
    adapters = std::make_shared<model::LoraAdapters>(base.config(), config);
    adapters->init(21);
    train::TrainedModelOptions o;
    o.optim.weight_decay = weight_decay;
    o.optim.grad_clip = 1e9;
    o.param_dtype = at::kBFloat16;
    o.lora = adapters;
    trained = std::make_unique<train::TrainedModel>(base, o, schedule());
  }

  // One update of one micro-batch on a loss over the logits of random tokens (seeded by `update`).
  void update(int64_t update) {
    trained->begin_update();
    trained->zero_grad();
    at::manual_seed(uint64_t(100 + update));
    const model::DecoderLM& m = trained->compute();
    const at::Tensor ids = at::randint(m.config().vocab_size, {2, 6}, at::TensorOptions().dtype(at::kLong));
    const at::Tensor w = at::randn({2, 6, m.config().vocab_size});
    trained->backward((m.logits(m.forward_padded(ids)).to(at::kFloat) * w).sum());
    trained->step();
  }
};

std::vector<at::Tensor> values(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  std::vector<at::Tensor> out;
  for (const auto& [name, t] : named) out.push_back(t.detach().clone());
  return out;
}

struct Scratch {
  std::string path;
  Scratch() {
    char pattern[] = "/tmp/verlpp_lora_train_XXXXXX";
    path = ::mkdtemp(pattern);
  }
  ~Scratch() {
    if (std::system(("rm -rf '" + path + "'").c_str()) != 0) { /* leftovers under /tmp are harmless */
    }
  }
};

}  // namespace

TEST_CASE("lora training: the base stays bit-identical, B moves first, only adapters hold state", "[lora]") {
  LoraRun run;
  const std::vector<at::Tensor> base_before = values(run.base.named_parameters());
  const std::vector<at::Tensor> before = values(run.adapters->named_parameters());
  CHECK(&run.trained->compute() == &run.base);  // no compute copy: the base runs in bf16 itself
  run.update(0);
  // Adam's first step is lr * m / (sqrt(v) + eps) = lr * g / (|g| + eps): lr * sign(g) where g
  // is not tiny; A's gradient is exactly zero while B is zero, so A does not move.
  const auto& named = run.adapters->named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    const auto& [name, t] = named[i];
    INFO(name);
    if (name.find("lora_A") != std::string::npos) {
      CHECK(at::equal(t, before[i]));
    } else {
      const at::Tensor g = t.grad();
      REQUIRE(g.defined());
      const at::Tensor big = g.abs().gt(1e-3);
      REQUIRE(big.any().item<bool>());
      const at::Tensor moved = (t.detach() - before[i]).masked_select(big);
      const at::Tensor want = g.sign().masked_select(big) * -1e-2;
      CHECK((moved - want).abs().max().item<double>() < 1e-6);
    }
  }
  for (int64_t u = 1; u < 4; ++u) run.update(u);
  for (size_t i = 0; i < named.size(); ++i) {
    INFO(named[i].first);
    CHECK(!at::equal(named[i].second, before[i]));  // A moves once B is not zero
  }
  const auto& base = run.base.named_parameters();
  for (size_t i = 0; i < base.size(); ++i) {
    INFO(base[i].first);
    CHECK(at::equal(base[i].second, base_before[i]));
    CHECK(!base[i].second.grad().defined());
    CHECK(base[i].second.scalar_type() == at::kBFloat16);
  }
  const train::TrainedModel::MemoryHeld held = run.trained->memory_held();
  CHECK(held.compute_weights == 0);
  CHECK(held.adapter_weights == run.adapters->parameter_count() * 4);
  CHECK(held.optimizer_states == 2 * run.adapters->parameter_count() * 4);
  CHECK(held.gradients == run.adapters->parameter_count() * 4);
}

TEST_CASE("lora training: a checkpoint is a PEFT folder and resumes bit-identically", "[lora]") {
  LoraRun whole(0.1), first(0.1);
  for (int64_t u = 0; u < 5; ++u) whole.update(u);
  for (int64_t u = 0; u < 3; ++u) first.update(u);
  Scratch dir;
  first.trained->save(dir.path);
  // The base is not written: a PEFT folder and the optimizer state.
  CHECK(::access((dir.path + "/" + model::kLoraConfigFile).c_str(), F_OK) == 0);
  CHECK(::access((dir.path + "/" + model::kLoraWeightsFile).c_str(), F_OK) == 0);
  CHECK(::access((dir.path + "/" + train::TrainedModel::kOptimizerStateFile).c_str(), F_OK) == 0);
  CHECK(::access((dir.path + "/model.safetensors").c_str(), F_OK) != 0);
  LoraRun resumed(0.1);
  resumed.trained->load(dir.path);
  resumed.trained->set_updates(3);
  for (int64_t u = 3; u < 5; ++u) resumed.update(u);
  const auto& a = whole.adapters->named_parameters();
  const auto& b = resumed.adapters->named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK(at::equal(a[i].second, b[i].second));
  }
}

TEST_CASE("lora training: layouts that shard the weights are refused by name", "[lora]") {
  LoraRun run;
  train::ShardingOptions offload;
  offload.optimizer_offload = true;
  std::string error;
  try {
    run.trained->set_data_parallel(train::DataParallel(), offload);
  } catch (const Error& e) {
    error = e.what();
  }
  CHECK_THAT(error, Catch::Contains("LoRA with param or optimizer offload is not supported"));
}
