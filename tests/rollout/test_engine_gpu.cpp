// The engine's decode graphs. On any machine: the bucket sizes, and that a CPU engine says
// why it runs eagerly. With a GPU (hidden tag [.gpu], run by the `rollout_gpu` ctest where
// configure found a GPU): the CUDA plugin's engine with graphs against the same engine without
// them, a naive greedy generator on the CPU and an fp64 full forward, across bucket sizes,
// preemption, a weight update that re-points the parameters, and sleep/wake.
#include <verlpp/core/env.hpp>
#include <verlpp/hw/device.hpp>
#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/model/checkpoint.hpp>
#include <verlpp/rollout/engine.hpp>

#include "../../src/core/rollout/decode_graphs.hpp"
#include "engine_fixture.hpp"

#include <ATen/Context.h>
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

using namespace verlpp;
using namespace verlpp::rollout;
using namespace verlpp::test;

TEST_CASE("decode graphs: batch-size buckets", "[rollout][graphs]") {
  CHECK(detail::DecodeGraphs::buckets(1) == std::vector<int64_t>{1});
  CHECK(detail::DecodeGraphs::buckets(40) == std::vector<int64_t>{1, 2, 4, 8, 16, 32, 40});
  CHECK(detail::DecodeGraphs::buckets(256) ==
        std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 224, 256});
}

// Runs the scheduler (reserve_ahead) over ragged samples with no model: n = 2 sharing a prompt,
// mixed prompt lengths and max_new_tokens, sample `stopper` stopping at its 4th token. At every
// decode step the prediction must exist exactly when the plain rule says (some sequence has a
// token after this one), and the scheduler's next step must then be the predicted one less the
// stopped samples, row for row. Returns how many steps were predicted.
static int64_t check_queued_steps(int64_t num_blocks, int64_t stopper, int64_t* preemptions) {
  const int64_t bs = 4;
  BlockManager bm(num_blocks, bs);
  Scheduler sched(bm, SchedulerLimits{16, 256}, /*reserve_ahead=*/true);
  const std::vector<int64_t> stop = {99};
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (int64_t g = 0; g < 5; ++g) {
    std::vector<Sequence*> group;
    for (int64_t j = 0; j < (g % 2 == 0 ? 2 : 1); ++j) {
      auto seq = std::make_unique<Sequence>();
      seq->id = int64_t(seqs.size());
      seq->token_ids = prompt_of(1 + 3 * g, g);
      seq->num_prompt_tokens = seq->num_tokens();
      seq->max_new_tokens = 5 + 3 * g;
      seq->stop_ids = &stop;
      group.push_back(seq.get());
      seqs.push_back(std::move(seq));
    }
    sched.add_group(group);
  }
  int64_t predicted = 0;
  ScheduledStep step = sched.schedule();
  for (int64_t n = 0; !step.empty(); ++n) {
    REQUIRE(n < 300);
    const std::optional<detail::NextDecode> next = detail::predict_next(step, bs);
    bool continues = false, blocks_held = true;
    for (const Sequence* s : step.compute) {
      const bool more = s->num_generated() + 1 < s->max_new_tokens;
      continues = continues || more;
      if (more) blocks_held = blocks_held && s->num_tokens() / bs < int64_t(s->block_table.size());
    }
    INFO("step " << n);
    CHECK(next.has_value() == (!step.is_prefill && continues && blocks_held));
    std::vector<int64_t> tokens;
    for (const auto& [s, row] : step.samplers) tokens.push_back(s->id == stopper && s->num_generated() == 3 ? 99 : 7);
    const auto finished = sched.postprocess(step, tokens, std::vector<float>(tokens.size(), 0.0f));
    step = sched.schedule();
    if (!next) continue;
    ++predicted;
    // The plain expectation: the predicted sequences that did not just finish, in order, each
    // fed at its predicted position (unless the scheduler preempted, then nothing is promised).
    std::vector<int64_t> expected;
    for (size_t q = 0; q < next->seqs.size(); ++q)
      if (!next->seqs[q]->finished) expected.push_back(int64_t(q));
    const auto rows = detail::queued_rows(*next, step, bs);
    if (step.is_prefill || step.compute.size() != expected.size()) {
      CHECK_FALSE(rows.has_value());
      continue;
    }
    REQUIRE(rows.has_value());
    CHECK(*rows == expected);
    for (size_t j = 0; j < rows->size(); ++j) {
      CHECK(step.compute[j] == next->seqs[size_t((*rows)[j])]);
      CHECK(step.compute[j]->num_tokens() - 1 == next->positions[size_t((*rows)[j])]);
    }
  }
  CHECK(bm.num_free_blocks() == bm.num_blocks());  // reserved blocks go back with their tables
  *preemptions = sched.num_preemptions();
  return predicted;
}

TEST_CASE("decode graphs: the step queued ahead is the scheduler's next step less the stopped samples",
          "[rollout][graphs]") {
  int64_t preemptions = 0;
  // A roomy pool: every decode step but the last predicts, block boundaries included.
  CHECK(check_queued_steps(64, /*stopper=*/5, &preemptions) >= 10);
  CHECK(preemptions == 0);
  // A pool too small for all at once: preemption and re-prefill break predictions off.
  CHECK(check_queued_steps(12, /*stopper=*/3, &preemptions) >= 3);
  CHECK(preemptions > 0);
  // A queued step is never taken for a step with other rows, a prefill or copies.
  BlockManager bm(8, 4);
  Sequence a, b;
  a.token_ids = b.token_ids = {1, 2, 3};
  a.num_prompt_tokens = b.num_prompt_tokens = 2;
  a.num_cached_tokens = b.num_cached_tokens = 2;
  a.max_new_tokens = b.max_new_tokens = 8;
  bm.allocate(a.block_table, 3);
  bm.allocate(b.block_table, 3);
  ScheduledStep now;
  now.compute = {&a, &b};
  now.samplers = {{&a, 0}, {&b, 1}};
  const auto next = detail::predict_next(now, 4);
  REQUIRE(next.has_value());
  CHECK(next->positions == std::vector<int64_t>{3, 3});
  for (Sequence* s : {&a, &b}) s->token_ids.push_back(5), s->num_cached_tokens = 3, ++s->sampling.step;
  ScheduledStep later = now;
  CHECK(detail::queued_rows(*next, later, 4) == std::vector<int64_t>{0, 1});
  ScheduledStep swapped = later;
  swapped.compute = {&b, &a};
  swapped.samplers = {{&b, 0}, {&a, 1}};
  CHECK_FALSE(detail::queued_rows(*next, swapped, 4).has_value());
  ScheduledStep copying = later;
  copying.copies.push_back(BlockCopy{0, 1});
  CHECK_FALSE(detail::queued_rows(*next, copying, 4).has_value());
  ScheduledStep prefill = later;
  prefill.is_prefill = true;
  CHECK_FALSE(detail::queued_rows(*next, prefill, 4).has_value());
  ++a.sampling.step;  // not the sampling step predicted
  CHECK_FALSE(detail::queued_rows(*next, later, 4).has_value());
}

// The cuda plugin built beside these tests, on a host with a CUDA device (the case fails without one).
static hw::Plugin cuda_plugin() {
  REQUIRE(at::hasCUDA());
  return hw::load_plugin_file(std::string(VERLPP_BIN_DIR) + "/libverlpp-plugin-cuda.so");
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
  hw::Plugin plugin = cuda_plugin();
  hw::Kernels kernels(plugin);
  const c10::Device gpu(c10::kCUDA, 0);
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
                   stats.num_decode_steps, stats.num_graph_captures, stats.graph_capture_seconds,
                   stats.num_preemptions));
  CHECK(stats.num_graph_steps == stats.num_decode_steps);
  CHECK(stats.num_graph_captures >= 3);
  CHECK(stats.num_preemptions > 0);
  // With VERLPP_GRAPH_EARLY_LAUNCH=1 the plugin's kernels behind cuBLAS's launch early in the
  // graphs (plugins/cuda/dependent_launch.cuh; counted by LibTorch 2.6+ on a GPU with
  // programmatic dependent launch); the tokens below must not change. run_gpu_perf.sh runs
  // these tests with and without it.
  INFO(fmt::format("early-launch edges {}", stats.graph_early_launch_edges));
  if (!env_equals("VERLPP_GRAPH_EARLY_LAUNCH", "1"))
    CHECK(stats.graph_early_launch_edges == 0);
  else if ((TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)) &&
           !env_equals("VERLPP_CUDA_PDL", "0") && hw::Device(plugin, 0).properties().compute_major >= 9)
    CHECK(stats.graph_early_launch_edges > 0);
  REQUIRE(outs.size() == expected.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    const GenerateOutput& out = outs[k];
    const GenerateRequest& req = reqs[size_t(out.request_index)];
    INFO(fmt::format("request {} sample {}", out.request_index, out.sample_index));
    REQUIRE(out.error.empty());
    REQUIRE(int64_t(out.token_ids.size()) == req.sampling.max_new_tokens);
    CHECK(out.token_ids == expected[k].token_ids);
    if (req.sampling.temperature == 0)
      CHECK(out.token_ids == naive_greedy(exact, req.prompt_ids, req.sampling.max_new_tokens));
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

TEST_CASE("decode graphs on CUDA queue the next step ahead: the same tokens, stop tokens included",
          "[.gpu][rollout][graphs]") {
  // Ragged prompts (so some sequence starts a KV block at almost every step: the scheduler takes
  // those blocks ahead), greedy and seeded sampled rows, and stop tokens taken from a free run so
  // that samples end at many different steps: queued steps are then read for a subset of their
  // rows, and one is discarded where nothing follows. Every output must equal the eager
  // engine's, with overlap on and off, and over a second call on the same engine.
  hw::Plugin plugin = cuda_plugin();
  hw::Kernels kernels(plugin);
  const c10::Device gpu(c10::kCUDA, 0);
  std::vector<GenerateRequest> reqs;
  for (int64_t i = 0; i < 40; ++i) {
    GenerateRequest r{prompt_of(3 + (i * 5) % 29, i), SamplingParams{}};
    r.sampling.max_new_tokens = 20 + i % 11;
    r.sampling.ignore_eos = true;
    r.sampling.temperature = i % 2 == 0 ? 0.0 : 0.7;
    r.sampling.seed = 900 + uint64_t(i);
    reqs.push_back(r);
  }
  EngineOptions eager_opts;
  eager_opts.kernels = &kernels;
  eager_opts.device_graphs = false;
  eager_opts.block_size = 8;
  RolloutEngine eager(tiny_model(17, at::kFloat, gpu), eager_opts);
  const auto free_run = eager.generate(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& ids = free_run[i].token_ids;
    reqs[i].sampling.stop_token_ids = {ids[ids.size() * (1 + i % 3) / 4]};  // a quarter to three quarters in
  }
  const auto expected = eager.generate(reqs);
  int64_t stopped = 0;
  for (const auto& out : expected) stopped += out.finish_reason == FinishReason::kStop;
  CHECK(stopped == int64_t(reqs.size()));  // each stop token lies on the sample's own (deterministic) path
  for (bool overlap : {true, false}) {
    EngineOptions opts = eager_opts;
    opts.device_graphs = true;
    opts.overlap_decode = overlap;
    RolloutEngine graphs(tiny_model(17, at::kFloat, gpu), opts);
    REQUIRE(graphs.device_graphs_off_reason().empty());
    for (int call = 0; call < 2; ++call) {
      const auto outs = graphs.generate(reqs);
      const GenerateStats& st = graphs.last_stats();
      INFO(fmt::format("overlap {} call {}: {} decode steps, {} from graphs, {} overlapped, {} discarded", overlap,
                       call, st.num_decode_steps, st.num_graph_steps, st.num_overlapped_steps, st.num_discarded_steps));
      CHECK(st.num_graph_steps == st.num_decode_steps);
      if (overlap) {
        CHECK(st.num_overlapped_steps >= st.num_decode_steps / 2);
      } else {
        CHECK(st.num_overlapped_steps == 0);
        CHECK(st.num_discarded_steps == 0);
      }
      REQUIRE(outs.size() == expected.size());
      for (size_t k = 0; k < outs.size(); ++k) {
        INFO("request " << k);
        CHECK(outs[k].token_ids == expected[k].token_ids);
        CHECK(outs[k].finish_reason == expected[k].finish_reason);
        REQUIRE(outs[k].logprobs.size() == expected[k].logprobs.size());
        for (size_t i = 0; i < outs[k].logprobs.size(); ++i)
          CHECK(std::abs(outs[k].logprobs[i] - expected[k].logprobs[i]) <= 1e-4);
      }
    }
  }
}

TEST_CASE("decode graphs on CUDA in bf16 match eager bf16 steps", "[.gpu][rollout][graphs]") {
  // bf16 is what RL runs; tokens may differ from fp32, but graphs and eager steps run the same
  // kernels on the same rows, so greedy tokens agree and log-probs are close.
  hw::Plugin plugin = cuda_plugin();
  hw::Kernels kernels(plugin);
  const c10::Device gpu(c10::kCUDA, 0);
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

TEST_CASE("ABI 1.5's fused decode attention on CUDA gives the tokens and log-probs of 1.3's pair of kernels",
          "[.gpu][rollout][graphs]") {
  // Head 64 in bf16 with blocks of 16: the shapes the cuda plugin's fused tensor-core kernel
  // takes (RoPE of q in registers, the new K/V row from shared memory). The plugin promises the
  // pair's output bits, so every token and log-prob must be equal, in graphs and eager steps,
  // with ragged prompts that end and start KV blocks at many steps.
  hw::Plugin plugin = cuda_plugin();
  hw::Kernels kernels(plugin);
  const c10::Device gpu(c10::kCUDA, 0);
  REQUIRE(kernels.offers(hw::KernelId::rotary_paged_attention_decode));
  model::ModelConfig cfg = tiny_config();
  cfg.hidden_size = 256;  // 4 heads of 64 over 2 KV heads
  cfg.head_dim = 64;
  auto model = [&] {
    model::DecoderLM m(cfg);
    m.init_weights(23);
    m.to(at::kBFloat16, gpu);
    return m;
  };
  std::vector<GenerateRequest> reqs;
  for (int64_t i = 0; i < 24; ++i) {
    GenerateRequest r{prompt_of(1 + (i * 11) % 37, i), SamplingParams{}};
    r.sampling.max_new_tokens = 10 + i % 13;
    r.sampling.ignore_eos = true;
    r.sampling.temperature = i % 2 == 0 ? 0.0 : 0.9;
    r.sampling.seed = 300 + uint64_t(i);
    reqs.push_back(r);
  }
  for (bool graphs : {false, true}) {
    EngineOptions opts;
    opts.kernels = &kernels;
    opts.block_size = 16;
    opts.device_graphs = graphs;
    EngineOptions pair_opts = opts;
    pair_opts.rotary_attention = false;
    RolloutEngine pair_engine(model(), pair_opts);
    const auto expected = pair_engine.generate(reqs);
    RolloutEngine fused_engine(model(), opts);
    const auto outs = fused_engine.generate(reqs);
    INFO("graphs " << graphs);
    REQUIRE(outs.size() == expected.size());
    for (size_t k = 0; k < outs.size(); ++k) {
      INFO("request " << k);
      CHECK(outs[k].token_ids == expected[k].token_ids);
      CHECK(outs[k].logprobs == expected[k].logprobs);
    }
  }
}
