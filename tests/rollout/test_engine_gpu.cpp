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
#include "engine_fixture.hpp"

#include <ATen/Context.h>
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

using namespace verlpp;
using namespace verlpp::rollout;
using namespace verlpp::test;

TEST_CASE("decode graphs: batch-size buckets", "[rollout][graphs]") {
  CHECK(detail::DecodeGraphs::buckets(1) == std::vector<int64_t>{1});
  CHECK(detail::DecodeGraphs::buckets(40) == std::vector<int64_t>{1, 2, 4, 8, 16, 32, 40});
  CHECK(detail::DecodeGraphs::buckets(256) ==
        std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 224, 256});
}

TEST_CASE("decode graphs: a CPU engine says why its steps run eagerly", "[rollout][graphs]") {
  RolloutEngine engine(tiny_model(3), EngineOptions{});
  INFO(engine.device_graphs_off_reason());
  CHECK(engine.device_graphs_off_reason().find("cpu") != std::string::npos);
  EngineOptions off;
  off.device_graphs = false;
  RolloutEngine turned_off(tiny_model(3), off);
  CHECK(turned_off.device_graphs_off_reason().find("turned off") != std::string::npos);
}

TEST_CASE("decode graphs on CUDA equal eager steps and a full forward", "[.gpu][rollout][graphs]") {
  REQUIRE(at::hasCUDA());
  const c10::Device gpu(c10::kCUDA, 0);
  hw::Plugin plugin = hw::load_plugin_file(std::string(VERLPP_BIN_DIR) + "/libverlpp-plugin-cuda.so");
  hw::Kernels kernels(plugin);
  const model::DecoderLM ref = tiny_model(11);
  const model::DecoderLM exact = fp64_copy(ref);

  // Ragged prompts and lengths, so that the decode batch shrinks through several buckets.
  std::vector<GenerateRequest> reqs;
  const std::vector<int64_t> lens = {1, 5, 7, 16, 17, 30, 3, 9, 12, 4};
  for (size_t i = 0; i < lens.size(); ++i) {
    GenerateRequest r{prompt_of(lens[i], int64_t(i)), SamplingParams{}};
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
  RolloutEngine graphs(tiny_model(11, at::kFloat, gpu), opts);
  RolloutEngine eager(tiny_model(11, at::kFloat, gpu), eager_opts);
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
    if (req.sampling.temperature == 0) CHECK(out.token_ids == naive_greedy(exact, req.prompt_ids, req.sampling.max_new_tokens));
    const double T = req.sampling.temperature == 0 ? 1.0 : req.sampling.temperature;
    CHECK(worst_logprob_error(ref, req.prompt_ids, out, T) <= 5e-5);
  }

  // Parameters re-pointed at other storage: the graphs must not keep reading the old weights.
  const model::DecoderLM other_exact = fp64_copy(tiny_model(12));
  const model::DecoderLM other_gpu = tiny_model(12, at::kFloat, gpu);
  const WeightUpdateReport update = graphs.update_weights(other_gpu.named_parameters());
  CHECK(update.num_shared > 0);
  std::vector<GenerateRequest> greedy_reqs = {reqs[1], reqs[4], reqs[5]};
  auto after_update = graphs.generate(greedy_reqs);
  CHECK(graphs.last_stats().num_graph_steps > 0);
  for (size_t k = 0; k < greedy_reqs.size(); ++k)
    CHECK(after_update[k].token_ids ==
          naive_greedy(other_exact, greedy_reqs[k].prompt_ids, greedy_reqs[k].sampling.max_new_tokens));

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
    GenerateRequest r{prompt_of(1 + (i * 7) % 23, i), SamplingParams{}};
    r.sampling.max_new_tokens = 8 + i % 5;
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = true;
    reqs.push_back(r);
  }
  EngineOptions opts;
  opts.kernels = &kernels;
  EngineOptions eager_opts = opts;
  eager_opts.device_graphs = false;
  RolloutEngine graphs(tiny_model(21, at::kBFloat16, gpu), opts);
  RolloutEngine eager(tiny_model(21, at::kBFloat16, gpu), eager_opts);
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
