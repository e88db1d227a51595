// verlpp-bench-train: tokens/s and peak device memory of one training step, the workload of
// issue 7's training goal: forward + backward + AdamW over B x T tokens with a log-prob loss
// (-mean log p(token | prefix) over every position but the first), on a Qwen2.5-0.5B-shaped model
// with random weights (or the tiny model on the CPU). The step is the library's own path:
// train::MixedPrecision (fp32 masters, a 16-bit compute copy), train::response_log_probs (rows
// packed as the RL trainer packs them, the chunked LM head with its logits kept for the backward
// or recomputed there), train::OptimizerStep (AdamW, clipping at 1.0).
// benchmarks/train/hf_train_step.py times the same step in PyTorch + HF transformers beside it.
// `--plugin cuda` hands the LM head's softmax math, RoPE, SwiGLU and the optimizer step to the
// plugin's kernels (after checking them against LibTorch's path on the same rows).
#include "../rollout/bench_options.hpp"
#include "../rollout/bench_profile.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/hw/kernels.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/train/logprob.hpp>
#include <verlpp/train/mixed_precision.hpp>
#include <verlpp/train/optimizer.hpp>
#include <verlpp/train/parameters.hpp>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <fstream>
#include <iostream>
#include <optional>
#include <tuple>
#include <vector>

// Peak memory comes from LibTorch's CUDA caching allocator (what torch.cuda.max_memory_allocated
// reads in the peer script), available only where the build found LibTorch's c10_cuda.
#ifdef VERLPP_BENCH_CUDA_STATS
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace {

using namespace verlpp;

struct Options {
  std::string shape, model_dir, device = "cpu", param_dtype = "float32";
  std::string plugin;  // whose log-prob kernels run the LM head's softmax; empty = LibTorch's path
  int64_t batch = 4, seq = 64, chunk_rows = 4;
  int steps = 5, warmup = 2;
  bool checkpointing = false;
  bool forward_only = false;  // old_log_prob's pass instead: no grad, log-probs and entropy
  // How the rows reach the decoder: "packed" (verl's use_remove_padding, the RL trainer's default:
  // one packed forward, causal attention per row), "mask" (the padded forward with the batch's
  // [B, T] mask, i.e. a [B, T, T] attention mask), "none" (the padded forward without a mask:
  // every row whole, causal attention; what the HF peer runs).
  std::string padding = "packed";
  std::string logits = "keep";  // the LM head's logits in the backward: keep or recompute
  // The model's path choices (model::ForwardOptions): q/k/v and gate/up as one GEMM each in
  // training ("auto": on accelerators), K/V into SDPA with fewer heads (LibTorch 2.5+).
  std::string fused_projections = "auto";
  int sdpa_gqa = 1;
  int plugin_adamw = 1;  // with --plugin: its adamw_update where offered (0: LibTorch's AdamW)
  std::string json_path;
  std::string profile_path;  // a Kineto trace of --profile-steps more steps after the timed ones
  int profile_steps = 2;
};

void reset_peak(const c10::Device& d) {
#ifdef VERLPP_BENCH_CUDA_STATS
  if (d.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(d.index());
#else
  (void)d;
#endif
}

// Peak bytes allocated since the last reset_peak; -1 where unknown (CPU, or no c10_cuda).
int64_t peak_bytes(const c10::Device& d) {
#ifdef VERLPP_BENCH_CUDA_STATS
  if (d.is_cuda()) return c10::cuda::CUDACachingAllocator::getDeviceStats(d.index()).allocated_bytes[0].peak;
#else
  (void)d;
#endif
  return -1;
}

// Before timing: OptimizerStep on the device (LibTorch's fused AdamW kernel on a GPU) against
// the same steps on CPU copies (torch::optim::AdamW's per-tensor ops), three steps with
// clipping on random parameters and gradients. Returns the worst relative difference.
double check_optimizer(const c10::Device& device) {
  at::manual_seed(5);
  std::vector<at::Tensor> host, dev;
  for (int64_t n : {7, 300, 4096}) {
    host.push_back(at::randn({n}).requires_grad_(true));
    dev.push_back(host.back().detach().to(device).requires_grad_(true));
  }
  train::AdamWConfig c;
  c.grad_clip = 0.5;
  c.weight_decay = 0.1;
  train::OptimizerStep on_host(host, c, train::LrSchedule({1e-2, "constant", 0, 1, 0.0, 0.5}));
  train::OptimizerStep on_dev(dev, c, train::LrSchedule({1e-2, "constant", 0, 1, 0.0, 0.5}));
  for (int s = 0; s < 3; ++s) {
    on_host.zero_grad();
    on_dev.zero_grad();
    for (size_t i = 0; i < host.size(); ++i) {
      at::Tensor g = at::randn(host[i].sizes());
      host[i].mutable_grad() = g;
      dev[i].mutable_grad() = g.to(device);
    }
    on_host.clip_and_step();
    on_dev.clip_and_step();
  }
  double worst = 0;
  for (size_t i = 0; i < host.size(); ++i)
    worst = std::max(worst, dev[i].detach().cpu().sub(host[i].detach()).abs().max().item<double>() /
                                std::max(1e-12, host[i].detach().abs().max().item<double>()));
  return worst;
}

// Before timing with --plugin: log-probs, the gradient they send into the LM head (tied to the
// embedding here) and layer 0's q/k/v projection gradients (through RoPE and attention's
// backward, every layer above included) on `rows` rows, through the plugin's kernels and through
// LibTorch's path, rows as the timed steps pass them. Returns the worst differences: log-prob
// absolute, then relative to their largest entry the LM head's gradient and the worst of layer 0's.
// `mask` undefined: padded rows without a mask; `packed`: use_remove_padding.
std::tuple<double, double, double> check_kernels(model::DecoderLM& m, const at::Tensor& ids, const at::Tensor& mask,
                                                 const at::Tensor& positions, const hw::Kernels& kernels, bool packed) {
  const std::vector<std::string> names = {"lm_head.weight", "model.layers.0.self_attn.q_proj.weight",
                                          "model.layers.0.self_attn.k_proj.weight",
                                          "model.layers.0.self_attn.v_proj.weight"};
  auto run = [&](const hw::Kernels* k) {
    for (const auto& [name, p] : m.named_parameters()) const_cast<at::Tensor&>(p).mutable_grad() = at::Tensor();
    train::ResponseLogProbs out =
        train::response_log_probs(m, ids, mask, positions, ids.size(1) - 1, 1.0, false, 1, packed, k);
    out.log_probs.mean().neg().backward();
    std::vector<at::Tensor> r = {out.log_probs.detach().to(at::kFloat)};
    for (const std::string& name : names) r.push_back(m.parameter(name).grad().to(at::kFloat));
    for (const auto& [name, p] : m.named_parameters()) const_cast<at::Tensor&>(p).mutable_grad() = at::Tensor();
    return r;
  };
  const std::vector<at::Tensor> ref = run(nullptr), got = run(&kernels);
  auto relative = [&](size_t i) {
    return got[i].sub(ref[i]).abs().max().item<double>() / std::max(1e-30, ref[i].abs().max().item<double>());
  };
  const double lp_error = got[0].sub(ref[0]).abs().max().item<double>();
  double layer_error = 0;
  for (size_t i = 2; i < ref.size(); ++i) layer_error = std::max(layer_error, relative(i));
  return {lp_error, relative(1), layer_error};
}

// Waits for the device by reading one element back (no device headers needed).
void wait_for(const at::Tensor& t) { (void)t.reshape({-1}).narrow(0, 0, 1).to(at::kCPU); }

int run(const Options& o) {
  const model::ModelConfig config = bench::bench_model_config(o.shape, o.model_dir);
  const c10::Device device = bench::bench_device(o.device);
  const at::ScalarType compute = model::dtype_from_name(o.param_dtype);
  VERLPP_CHECK(o.batch >= 1 && o.seq >= 2, "--batch {} must be >= 1 and --seq {} >= 2", o.batch, o.seq);
  if (!o.profile_path.empty() && !bench::profiler_unavailable_reason().empty())
    VERLPP_FAIL_AT("--profile", "{}; cannot write '{}'", bench::profiler_unavailable_reason(), o.profile_path);

  const double optimizer_error = check_optimizer(device);
  std::cerr << fmt::format("optimizer check (device vs CPU AdamW, 3 steps): worst relative difference {:.2e}\n",
                           optimizer_error);
  VERLPP_CHECK(optimizer_error < 1e-5, "WRONG: the optimizer on {} differs from the CPU reference by {:.3e} (relative)",
               device.str(), optimizer_error);

  model::ModelOptions model_options;
  model_options.forward.training_projections = o.fused_projections == "auto" ? model::TrainingProjections::kAuto
                                               : o.fused_projections == "1"  ? model::TrainingProjections::kFused
                                                                             : model::TrainingProjections::kSplit;
  model_options.forward.attention.sdpa_gqa = o.sdpa_gqa != 0;
  model::DecoderLM master(config, model_options);  // fp32 masters, drawn on the CPU, then moved
  master.init_weights(1);
  master.to(at::kFloat, device);
  master.set_requires_grad(true);
  master.set_gradient_checkpointing(o.checkpointing);
  train::MixedPrecision precision(master, compute);
  std::optional<hw::Kernels> kernels;
  if (!o.plugin.empty()) {
    kernels.emplace(bench::bench_plugin(o.plugin, o.device));
    if (!kernels->offers(hw::KernelId::logprob_entropy) || !kernels->offers(hw::KernelId::logprob_backward)) {
      std::string offered;
      for (const std::string& name : kernels->available()) offered += (offered.empty() ? "" : ", ") + name;
      VERLPP_FAIL_AT("--plugin", "plugin '{}' lacks logprob_entropy or logprob_backward (ABI 1.2); it offers: {}",
                     o.plugin, offered.empty() ? "none" : offered);
    }
  }
  train::AdamWConfig adamw;
  adamw.grad_clip = 1.0;
  train::OptimizerStep optimizer(train::parameter_tensors(master), adamw,
                                 train::LrSchedule({1e-6, "constant", 0, 1, 0.0, 0.5}));

  at::manual_seed(7);
  const at::Tensor ids =
      at::randint(config.vocab_size, {o.batch, o.seq}, at::TensorOptions().dtype(at::kLong)).to(device);
  const at::Tensor mask = at::ones({o.batch, o.seq}, ids.options());
  const at::Tensor positions = mask.cumsum(1).sub(1);
  // The rows as --padding passes them to the decoder: the mask (undefined for "none"), packed or not.
  const at::Tensor rows_mask = o.padding == "none" ? at::Tensor() : mask;
  const bool packed = o.padding == "packed";
  const train::LogitsInBackward logits =
      o.logits == "keep" ? train::LogitsInBackward::kKeep : train::LogitsInBackward::kRecompute;
  if (kernels) {
    const int64_t rows = std::min<int64_t>(2, o.batch);
    const auto [lp_error, g_error, layer_error] = check_kernels(
        precision.compute(), ids.narrow(0, 0, rows), rows_mask.defined() ? rows_mask.narrow(0, 0, rows) : at::Tensor(),
        positions.narrow(0, 0, rows), *kernels, packed);
    std::cerr << fmt::format(
        "kernel check ({} kernels vs LibTorch, {} rows): log-prob max |diff| {:.2e}, max |diff| / max "
        "|grad| of the LM-head gradient {:.2e}, of layer 0's q/k/v gradients {:.2e}\n",
        o.plugin, rows, lp_error, g_error, layer_error);
    // bf16 logits and gradients: the two paths round dL/dz once each, in another order of sums;
    // layer 0's gradients also carry bf16 rounding flips through 24 layers' backward. A wrong
    // term, sign or rotation is O(1) off.
    const double grad_tolerance = compute == at::kFloat ? 1e-4 : 2e-2;
    const double layer_tolerance = compute == at::kFloat ? 1e-3 : 1e-1;
    VERLPP_CHECK(lp_error < 1e-3 && g_error < grad_tolerance && layer_error < layer_tolerance,
                 "WRONG: the plugin's kernels differ from LibTorch's path (log-prob {:.3e}, LM-head gradient {:.3e}, "
                 "layer-0 gradients {:.3e})",
                 lp_error, g_error, layer_error);
  }
  const hw::Kernels* used = kernels ? &*kernels : nullptr;
  // With --plugin the optimizer step goes through the plugin's adamw_update where offered (ABI
  // 1.4): 16-bit gradients in, the compute copy written in the same pass. --plugin-adamw 0
  // keeps LibTorch's fused AdamW with the casts around it, for a side-by-side run.
  if (o.plugin_adamw != 0) optimizer.use_kernels(used);
  precision.defer_casts(optimizer.updates_through_plugin());
  std::cerr << fmt::format("optimizer step: {}\n",
                           optimizer.updates_through_plugin()
                               ? "the plugin's adamw_update (16-bit gradients, compute copy written)"
                               : "LibTorch's AdamW (fp32 gradients, compute copy refreshed after)");
  double last_loss = 0;
  // Host seconds from a step's start until forward and backward are queued (backward() returns
  // once the autograd engine has launched everything): near the step's time, the step is bound
  // by the host's op dispatch rather than by the device.
  std::vector<double> issue_seconds;
  auto step = [&] {
    const auto issue_start = std::chrono::steady_clock::now();
    if (o.forward_only) {
      at::NoGradGuard no_grad;
      train::ResponseLogProbs out =
          train::response_log_probs(precision.compute(), ids, rows_mask, positions, o.seq - 1, 1.0,
                                    /*with_entropy=*/true, o.chunk_rows, packed, used);
      last_loss = out.entropy.mean().item<double>();  // the mean entropy, in place of a loss
      return;
    }
    optimizer.zero_grad();
    train::ResponseLogProbs out =
        train::response_log_probs(precision.compute(), ids, rows_mask, positions, o.seq - 1, 1.0,
                                  /*with_entropy=*/false, o.chunk_rows, packed, used, logits);
    at::Tensor loss = out.log_probs.mean().neg();
    loss.backward();
    issue_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - issue_start).count());
    precision.accumulate_gradients();
    optimizer.clip_and_step(precision);  // reads the gradient norm back: the step's one host sync
    last_loss = loss.item<double>();
  };
  std::cerr << fmt::format(
      "verlpp-bench-train: {} x {} tokens, param_dtype {}, {} warm-up + {} timed {} on {}; rows {}, "
      "logits {} for the backward\n",
      o.batch, o.seq, o.param_dtype, o.warmup, o.steps,
      o.forward_only ? "forward-only passes (log-probs + entropy, no grad)" : "steps", device.str(),
      o.padding == "packed" ? "packed (use_remove_padding)"
      : o.padding == "mask" ? "padded with an attention mask"
                            : "padded, no mask (causal)",
      o.logits == "keep" ? "kept" : "recomputed");
  for (int i = 0; i < o.warmup; ++i) step();
  wait_for(master.named_parameters().back().second);
  issue_seconds.clear();
  reset_peak(device);
  std::vector<double> seconds;
  for (int i = 0; i < o.steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    wait_for(master.named_parameters().back().second);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  VERLPP_CHECK(std::isfinite(last_loss), "WRONG: the loss after {} steps is {}", o.warmup + o.steps, last_loss);
  VERLPP_CHECK(o.forward_only || optimizer.last_step_through_plugin() == optimizer.updates_through_plugin(),
               "the optimizer step {} through the plugin's adamw_update although it {} offered",
               optimizer.last_step_through_plugin() ? "went" : "did not go",
               optimizer.updates_through_plugin() ? "is" : "is not");
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const double tokens = double(o.batch * o.seq);
  const int64_t peak = peak_bytes(device);
  fmt::print("step: min {:.4f} s, median {:.4f} s, max {:.4f} s; {:.0f} tokens/s (median); peak {}; loss {:.4f}\n",
             sorted.front(), median, sorted.back(), tokens / median,
             peak < 0 ? std::string("unknown") : fmt::format("{:.2f} GiB", double(peak) / double(1ll << 30)),
             last_loss);
  double issue_median = 0;
  if (!issue_seconds.empty()) {
    std::sort(issue_seconds.begin(), issue_seconds.end());
    issue_median = issue_seconds[issue_seconds.size() / 2];
    fmt::print("host: forward + backward queued {:.4f} s after a step's start (median)\n", issue_median);
  }
  if (!o.json_path.empty()) {
    nlohmann::json j = {{"impl", "verlpp"},
                        {"shape", o.shape.empty() ? config.architecture : o.shape},
                        {"device", device.str()},
                        {"param_dtype", o.param_dtype},
                        {"batch", o.batch},
                        {"seq", o.seq},
                        {"steps", o.steps},
                        {"seconds", seconds},
                        {"median_s", median},
                        {"tokens_per_s", tokens / median},
                        {"peak_bytes", peak},
                        {"loss", last_loss},
                        {"gradient_checkpointing", o.checkpointing},
                        {"forward_only", o.forward_only},
                        {"kernels", o.plugin.empty() ? std::string("libtorch") : o.plugin},
                        {"padding", o.padding},
                        {"logits", o.logits},
                        {"host_issue_s", issue_median}};
    std::ofstream(o.json_path) << j.dump() << "\n";
  }
  if (!o.profile_path.empty()) {
    bench::profile_to(o.profile_path, [&] {
      for (int i = 0; i < o.profile_steps; ++i) step();
      wait_for(master.named_parameters().back().second);
    });
    fmt::print("profile: {} ({} steps)\n", o.profile_path, o.profile_steps);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "verlpp-bench-train: tokens/s and peak memory of one training step (forward + backward + AdamW, "
      "log-prob loss)"};
  app.add_option("--shape", o.shape, "a built-in model shape (qwen2.5-0.5b)");
  app.add_option("--model", o.model_dir, "a model folder (config.json; random weights); default examples/tiny");
  app.add_option("--device", o.device, "cpu, cuda or privateuseone")
      ->check(CLI::IsMember({"cpu", "cuda", "privateuseone"}));
  app.add_option("--param-dtype", o.param_dtype, "compute dtype of the passes (float32, bfloat16); masters stay fp32");
  app.add_option("--batch", o.batch, "sequences per step");
  app.add_option("--seq", o.seq, "tokens per sequence");
  app.add_option("--chunk-rows", o.chunk_rows, "rows per LM-head chunk of the log-prob");
  app.add_option("--plugin", o.plugin,
                 "a plugin whose logprob_entropy / logprob_backward kernels run the LM head's softmax "
                 "(checked against LibTorch's path first); default: LibTorch's path");
  app.add_option("--steps", o.steps, "timed steps (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_flag("--gradient-checkpointing", o.checkpointing, "recompute each layer in the backward");
  app.add_flag(
      "--forward-only", o.forward_only,
      "time old_log_prob's pass instead: log-probs and entropy without grad (the loss column is the mean entropy)");
  app.add_option("--padding", o.padding,
                 "how rows reach the decoder: packed (use_remove_padding, the RL default), mask "
                 "(padded, with the [B, T] attention mask), none (padded, no mask: causal)")
      ->check(CLI::IsMember({"packed", "mask", "none"}))
      ->envname("VERLPP_BENCH_PADDING");
  app.add_option("--logits", o.logits,
                 "the LM head's logits in the backward: keep (use_fused_kernels false, the default) "
                 "or recompute (use_fused_kernels true)")
      ->check(CLI::IsMember({"keep", "recompute"}))
      ->envname("VERLPP_BENCH_LOGITS");
  app.add_option("--fused-projections", o.fused_projections,
                 "q/k/v (and gate/up) as one GEMM each in training: auto (on "
                 "accelerators), 1 (everywhere) or 0 (one GEMM per projection)")
      ->check(CLI::IsMember({"auto", "1", "0"}))
      ->envname("VERLPP_BENCH_FUSED_PROJECTIONS");
  app.add_option("--sdpa-gqa", o.sdpa_gqa,
                 "1: K/V with fewer heads go into SDPA as they are where a fused kernel takes "
                 "them (LibTorch 2.5+); 0: repeated for their query groups first")
      ->check(CLI::IsMember({0, 1}))
      ->envname("VERLPP_BENCH_SDPA_GQA");
  app.add_option("--plugin-adamw", o.plugin_adamw,
                 "with --plugin, 1: the plugin's adamw_update where offered (ABI 1.4); "
                 "0: LibTorch's AdamW")
      ->check(CLI::IsMember({0, 1}))
      ->envname("VERLPP_BENCH_PLUGIN_ADAMW");
  app.add_option("--json", o.json_path, "write the figures as one JSON line");
  app.add_option("--profile", o.profile_path,
                 "write a Kineto trace of more steps after the timed ones (LibTorch 2.1+)");
  app.add_option("--profile-steps", o.profile_steps, "steps in that trace")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "verlpp-bench-train: " << e.what() << "\n";
    return 1;
  }
}
