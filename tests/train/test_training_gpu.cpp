// The training forward and backward on CUDA through the cuda plugin (hidden tag [.gpu], run by
// the `train_gpu` ctest where configure found a GPU): the tiny model in bf16, rows packed and
// padded, against LibTorch's own path on the same GPU; and the switches that pick a path
// (kept or recomputed logits, RoPE through rotary_kv_store or rotary_embedding, K/V as they are
// or repeated for SDPA) against each other. On the CPU the same paths run through cpu_ref
// (test_logprob_kernels.cpp); here the plugin's real kernels and LibTorch's fused attention do.
#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/hw/torch_memory.hpp>
#include <verlpp/train/logprob.hpp>

#include <ATen/Context.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/randn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tiny_fixture.hpp"
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;

namespace {

struct Pass {
  at::Tensor log_probs;           // [B, R] fp32, on the CPU
  std::vector<at::Tensor> grads;  // every parameter's gradient, fp32, on the CPU
};

double max_abs(const at::Tensor& t) { return t.abs().max().item<double>(); }

// One forward + backward of a loss that weighs every log-prob differently.
Pass run_pass(model::DecoderLM& m, const data::Batch& b, const hw::Kernels* kernels, const std::string& rows,
              train::LogitsInBackward logits, bool rotate_qkv = true) {
  for (const auto& [name, p] : m.named_parameters()) const_cast<at::Tensor&>(p).mutable_grad() = at::Tensor();
  const c10::Device gpu = m.named_parameters().front().second.device();
  const at::Tensor ids = b.tensor("input_ids").to(gpu), mask = b.tensor("attention_mask").to(gpu);
  const at::Tensor pos = b.tensor("position_ids").to(gpu);
  const int64_t response = b.tensor("responses").size(1);
  train::ResponseLogProbs out =
      train::response_log_probs(m, ids, rows == "none" ? at::Tensor() : mask, pos, response, 0.9,
                                /*with_entropy=*/true, 2, rows == "packed", kernels, logits, rotate_qkv);
  at::manual_seed(4);
  const at::Tensor w = at::randn(out.log_probs.sizes()).to(gpu);
  (out.log_probs.mul(w).sum() + out.entropy.mean()).backward();
  Pass pass;
  pass.log_probs = out.log_probs.detach().cpu();
  for (const auto& [name, p] : m.named_parameters()) pass.grads.push_back(p.grad().to(at::kFloat).cpu());
  return pass;
}

// Log-probs within `lp_tol` and every gradient within `rel` of its largest entry (0, 0: equal).
void check_same(const Pass& got, const Pass& want, const model::DecoderLM& m, double lp_tol, double rel) {
  CHECK(max_abs(got.log_probs.sub(want.log_probs)) <= lp_tol);
  for (size_t i = 0; i < want.grads.size(); ++i) {
    INFO("parameter " << m.named_parameters()[i].first);
    CHECK(max_abs(got.grads[i].sub(want.grads[i])) <= rel * max_abs(want.grads[i]));
  }
}

// Sets an environment switch for one scope.
struct EnvSwitch {
  std::string name;
  EnvSwitch(std::string n, const char* value) : name(std::move(n)) { ::setenv(name.c_str(), value, 1); }
  ~EnvSwitch() { ::unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE("training on CUDA: the cuda plugin's path equals LibTorch's, and its switches equal each other",
          "[.gpu][logprob][kernels]") {
  REQUIRE(at::hasCUDA());
  const c10::Device gpu(c10::kCUDA, 0);
  hw::Plugin plugin = hw::load_plugin_file(std::string(VERLPP_BIN_DIR) + "/libverlpp-plugin-cuda.so");
  const hw::Kernels kernels(plugin);
  REQUIRE(kernels.offers(hw::KernelId::rotary_kv_store));
  REQUIRE(kernels.offers(hw::KernelId::logprob_backward));
  model::DecoderLM m = test::tiny_model(21);
  m.to(at::kBFloat16, gpu);
  m.set_requires_grad(true);
  // Ragged rows: left-padded prompts, right-padded responses (the packed forward's runs differ).
  const data::Batch b = test::ragged_batch(
      m.config().vocab_size, 5, 7, 9, 5, [](int64_t r) { return r % 3; }, [](int64_t r) { return (4 - r) % 4; });
  using train::LogitsInBackward;
  for (const std::string rows : {"packed", "mask", "none"}) {
    INFO("rows " << rows);
    const Pass libtorch = run_pass(m, b, nullptr, rows, LogitsInBackward::kKeep);
    const Pass plugin_path = run_pass(m, b, &kernels, rows, LogitsInBackward::kKeep);
    // bf16 everywhere: the kernels round where LibTorch's ops round, but an exp or cos an fp32
    // ulp apart flips a bf16 rounding now and then, and the backward carries it through the
    // layers below (test_logprob_kernels.cpp saw up to ~2.5% of a gradient's largest element).
    // A wrong term, sign or rotation is O(1) off.
    check_same(plugin_path, libtorch, m, 2e-2, 4e-2);
    // The logits kept for the backward are the ones a recomputation makes: the same bits.
    check_same(run_pass(m, b, &kernels, rows, LogitsInBackward::kRecompute), plugin_path, m, 0, 0);
    // RoPE through rotary_embedding on contiguous copies instead of rotary_kv_store: the same
    // rotation by contract; attention then reads v strided instead of contiguous.
    check_same(run_pass(m, b, &kernels, rows, LogitsInBackward::kKeep, /*rotate_qkv=*/false), plugin_path, m, 2e-2,
               4e-2);
    {
      // K/V repeated for their query groups instead of taken as they are (enable_gqa).
      model::ForwardOptions repeat;
      repeat.attention.sdpa_gqa = false;
      m.set_forward_options(repeat);
      check_same(run_pass(m, b, &kernels, rows, LogitsInBackward::kKeep), plugin_path, m, 2e-2, 4e-2);
      m.set_forward_options({});
    }
  }
}

// The per-stage memory metrics read LibTorch's allocator (hw/torch_memory.hpp): its figures
// follow tensors of known sizes, and a reset starts the peak at what is held now.
TEST_CASE("LibTorch's device memory statistics follow the bytes of the tensors made and freed", "[.gpu][memory]") {
  REQUIRE(at::hasCUDA());
  const c10::Device gpu(c10::DeviceType::CUDA, 0);
  at::Tensor warm = at::empty({1}, at::TensorOptions().device(gpu));  // the allocator exists
  hw::TorchMemoryStats before;
  REQUIRE(hw::torch_memory_stats(gpu, &before));
  hw::reset_torch_memory_peak(gpu);
  constexpr int64_t kBytes = int64_t(256) << 20;
  {
    at::Tensor big = at::empty({kBytes}, at::TensorOptions().dtype(at::kByte).device(gpu));
    hw::TorchMemoryStats held;
    REQUIRE(hw::torch_memory_stats(gpu, &held));
    CHECK(held.allocated - before.allocated == kBytes);
    CHECK(held.reserved >= held.allocated);
    CHECK(held.peak_allocated >= held.allocated);
  }
  hw::TorchMemoryStats freed;
  REQUIRE(hw::torch_memory_stats(gpu, &freed));
  CHECK(freed.allocated == before.allocated);
  CHECK(freed.peak_allocated >= before.allocated + kBytes);  // the peak remembers the tensor
  hw::reset_torch_memory_peak(gpu);
  hw::TorchMemoryStats reset;
  REQUIRE(hw::torch_memory_stats(gpu, &reset));
  CHECK(reset.peak_allocated == reset.allocated);
  // The host has no allocator statistics: the stages then report resident memory.
  hw::TorchMemoryStats host;
  CHECK_FALSE(hw::torch_memory_stats(c10::Device(c10::kCPU), &host));
}
