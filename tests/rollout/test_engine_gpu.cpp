// The engine's decode graphs. On any machine: the bucket sizes, and that a CPU engine says
// why it runs eagerly. With a GPU (hidden tag [.gpu], run by the `rollout_gpu` ctest where
// configure found a GPU): the CUDA plugin's engine with graphs against the same engine without
// them, a naive greedy generator on the CPU and an fp64 full forward, across bucket sizes,
// preemption, a weight update that re-points the parameters, and sleep/wake.
#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/model/checkpoint.hpp>
#include <verlpp/rollout/engine.hpp>

#include "../../src/core/rollout/decode_graphs.hpp"

#include <ATen/Context.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/tensor.h>
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

using namespace verlpp;
using namespace verlpp::rollout;

namespace {

// examples/tiny with logits far from uniform (as test_engine.cpp), on `device`.
model::DecoderLM graph_test_model(uint64_t seed, c10::Device device, at::ScalarType dtype = at::kFloat) {
  std::ifstream in(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["initializer_range"] = 0.2;
  model::DecoderLM m(model::parse_model_config(j, "tiny"));
  m.init_weights(seed);
  m.to(dtype, device);
  return m;
}

// log_softmax(logits / T) at every position of `ids`, one fp64 forward on the CPU: [T, V].
at::Tensor exact_logprobs(const model::DecoderLM& m, const std::vector<int64_t>& ids, double T) {
  at::NoGradGuard no_grad;
  model::DecoderLM exact = m;
  exact.to(at::kDouble, c10::Device(c10::kCPU));
  at::Tensor x = at::tensor(ids, at::TensorOptions().dtype(at::kLong)).unsqueeze(0);
  return at::log_softmax(exact.logits(exact.forward_padded(x))[0] / T, -1);
}

std::vector<int64_t> cpu_greedy(const model::DecoderLM& m, std::vector<int64_t> ids, int64_t max_new) {
  const size_t prompt = ids.size();
  for (int64_t t = 0; t < max_new; ++t)
    ids.push_back(at::argmax(exact_logprobs(m, ids, 1.0)[int64_t(ids.size()) - 1]).item<int64_t>());
  return std::vector<int64_t>(ids.begin() + int64_t(prompt), ids.end());
}

// Worst |engine log-prob - fp64 full forward| relative to the log-prob's size.
double worst_logprob_error(const model::DecoderLM& m, const std::vector<int64_t>& prompt, const GenerateOutput& out,
                           double T) {
  std::vector<int64_t> ids = prompt;
  ids.insert(ids.end(), out.token_ids.begin(), out.token_ids.end());
  const at::Tensor lp = exact_logprobs(m, ids, T);
  double worst = 0;
  for (size_t i = 0; i < out.token_ids.size(); ++i) {
    const double ref = lp[int64_t(prompt.size() + i) - 1][out.token_ids[i]].item<double>();
    worst = std::max(worst, std::abs(ref - double(out.logprobs[i])) / std::max(1.0, std::abs(ref)));
  }
  return worst;
}

std::vector<int64_t> ragged_prompt(int64_t len, int64_t salt) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < len; ++i) ids.push_back((i * 37 + salt * 101 + 5) % 340);
  return ids;
}

}  // namespace

TEST_CASE("decode graphs: batch-size buckets", "[rollout][graphs]") {
  CHECK(detail::DecodeGraphs::buckets(1) == std::vector<int64_t>{1});
  CHECK(detail::DecodeGraphs::buckets(40) == std::vector<int64_t>{1, 2, 4, 8, 16, 32, 40});
  CHECK(detail::DecodeGraphs::buckets(256) ==
        std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 224, 256});
}

TEST_CASE("decode graphs: a CPU engine says why its steps run eagerly", "[rollout][graphs]") {
  RolloutEngine engine(graph_test_model(3, c10::Device(c10::kCPU)), EngineOptions{});
  INFO(engine.device_graphs_off_reason());
  CHECK(engine.device_graphs_off_reason().find("cpu") != std::string::npos);
  EngineOptions off;
  off.device_graphs = false;
  RolloutEngine turned_off(graph_test_model(3, c10::Device(c10::kCPU)), off);
  CHECK(turned_off.device_graphs_off_reason().find("turned off") != std::string::npos);
}

TEST_CASE("decode graphs on CUDA equal eager steps and a full forward", "[.gpu][rollout][graphs]") {
  REQUIRE(at::hasCUDA());
  const c10::Device gpu(c10::kCUDA, 0), cpu(c10::kCPU);
  hw::Plugin plugin = hw::load_plugin_file(std::string(VERLPP_BIN_DIR) + "/libverlpp-plugin-cuda.so");
  hw::Kernels kernels(plugin);
  const model::DecoderLM ref = graph_test_model(11, cpu);

  // Ragged prompts and lengths, so that the decode batch shrinks through several buckets.
  std::vector<GenerateRequest> reqs;
  const std::vector<int64_t> lens = {1, 5, 7, 16, 17, 30, 3, 9, 12, 4};
  for (size_t i = 0; i < lens.size(); ++i) {
    GenerateRequest r{ragged_prompt(lens[i], int64_t(i)), SamplingParams{}};
    r.sampling.max_new_tokens = 3 + 2 * int64_t(i);
    r.sampling.ignore_eos = true;
    r.sampling.temperature = i % 3 == 0 ? 0.8 : 0.0;
    r.sampling.top_p = i % 2 == 0 ? 0.9 : 1.0;
    r.sampling.top_k = i == 3 ? 20 : 0;
    r.sampling.n = i == 0 ? 3 : 1;
    r.sampling.seed = 100 + i;
    reqs.push_back(r);
  }
  EngineOptions opts;
  opts.block_size = 4;
  opts.num_blocks = 20;  // less than the requests need at once: preemption
  opts.kernels = &kernels;
  EngineOptions eager_opts = opts;
  eager_opts.device_graphs = false;
  RolloutEngine graphs(graph_test_model(11, gpu), opts);
  RolloutEngine eager(graph_test_model(11, gpu), eager_opts);
  INFO("graphs off because: " << graphs.device_graphs_off_reason());
  REQUIRE(graphs.device_graphs_off_reason().empty());

  const auto outs = graphs.generate(reqs);
  const GenerateStats stats = graphs.last_stats();
  const auto expected = eager.generate(reqs);
  INFO(fmt::format("graph steps {} of {} decode steps, {} captures in {:.3f} s, {} preemptions", stats.num_graph_steps,
                   stats.num_decode_steps, stats.num_graph_captures, stats.graph_capture_seconds, stats.num_preemptions));
  CHECK(stats.num_graph_steps == stats.num_decode_steps);
  CHECK(stats.num_graph_captures >= 3);
  CHECK(stats.num_preemptions > 0);
  REQUIRE(outs.size() == expected.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    const GenerateOutput& out = outs[k];
    const GenerateRequest& req = reqs[size_t(out.request_index)];
    INFO(fmt::format("request {} sample {}", out.request_index, out.sample_index));
    REQUIRE(out.error.empty());
    REQUIRE(int64_t(out.token_ids.size()) == req.sampling.max_new_tokens);
    CHECK(out.token_ids == expected[k].token_ids);
    if (req.sampling.temperature == 0) CHECK(out.token_ids == cpu_greedy(ref, req.prompt_ids, req.sampling.max_new_tokens));
    const double T = req.sampling.temperature == 0 ? 1.0 : req.sampling.temperature;
    CHECK(worst_logprob_error(ref, req.prompt_ids, out, T) <= 5e-5);
  }

  // Parameters re-pointed at other storage: the graphs must not keep reading the old weights.
  const model::DecoderLM other_cpu = graph_test_model(12, cpu);
  const model::DecoderLM other_gpu = graph_test_model(12, gpu);
  const WeightUpdateReport update = graphs.update_weights(other_gpu.named_parameters());
  CHECK(update.num_shared > 0);
  std::vector<GenerateRequest> greedy_reqs = {reqs[1], reqs[4], reqs[5]};
  auto after_update = graphs.generate(greedy_reqs);
  CHECK(graphs.last_stats().num_graph_steps > 0);
  for (size_t k = 0; k < greedy_reqs.size(); ++k)
    CHECK(after_update[k].token_ids ==
          cpu_greedy(other_cpu, greedy_reqs[k].prompt_ids, greedy_reqs[k].sampling.max_new_tokens));

  // A new KV pool after sleep/wake: the graphs must write into the new one.
  graphs.sleep();
  graphs.wake();
  auto after_wake = graphs.generate(greedy_reqs);
  CHECK(graphs.last_stats().num_graph_steps > 0);
  for (size_t k = 0; k < greedy_reqs.size(); ++k) CHECK(after_wake[k].token_ids == after_update[k].token_ids);
}

TEST_CASE("decode graphs on CUDA in bf16 match eager bf16 steps", "[.gpu][rollout][graphs]") {
  // bf16 is what RL runs; tokens may differ from fp32, but graphs and eager steps run the same
  // kernels on the same rows, so greedy tokens agree and log-probs are close.
  REQUIRE(at::hasCUDA());
  const c10::Device gpu(c10::kCUDA, 0);
  hw::Plugin plugin = hw::load_plugin_file(std::string(VERLPP_BIN_DIR) + "/libverlpp-plugin-cuda.so");
  hw::Kernels kernels(plugin);
  std::vector<GenerateRequest> reqs;
  for (int64_t i = 0; i < 37; ++i) {
    GenerateRequest r{ragged_prompt(1 + (i * 7) % 23, i), SamplingParams{}};
    r.sampling.max_new_tokens = 8 + i % 5;
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = true;
    reqs.push_back(r);
  }
  EngineOptions opts;
  opts.kernels = &kernels;
  EngineOptions eager_opts = opts;
  eager_opts.device_graphs = false;
  RolloutEngine graphs(graph_test_model(21, gpu, at::kBFloat16), opts);
  RolloutEngine eager(graph_test_model(21, gpu, at::kBFloat16), eager_opts);
  const auto outs = graphs.generate(reqs);
  const auto expected = eager.generate(reqs);
  CHECK(graphs.last_stats().num_graph_steps == graphs.last_stats().num_decode_steps);
  REQUIRE(outs.size() == expected.size());
  int64_t same = 0, total = 0;
  double worst = 0;
  for (size_t k = 0; k < outs.size(); ++k) {
    same += outs[k].token_ids == expected[k].token_ids;
    ++total;
    for (size_t i = 0; i < std::min(outs[k].logprobs.size(), expected[k].logprobs.size()); ++i) {
      if (outs[k].token_ids[i] != expected[k].token_ids[i]) break;
      worst = std::max(worst, double(std::abs(outs[k].logprobs[i] - expected[k].logprobs[i])));
    }
  }
  INFO(fmt::format("{} of {} samples with equal tokens; worst log-prob difference {:.3g}", same, total, worst));
  // Padding rows change the GEMMs' row counts, which may change cuBLAS's choice of kernel and so
  // the last bits of bf16 results; a flip of the argmax on a near-tie can follow. Most samples
  // stay equal and every shared prefix agrees to bf16 rounding.
  CHECK(same >= total - 2);
  CHECK(worst <= 0.05);
}
