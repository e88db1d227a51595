// RolloutEngine against a naive generator (forward_padded over the whole sequence every step)
// on the tiny model: greedy tokens and log-probs with preemption forced by a tiny pool,
// sampled log-probs against a full forward (within 1e-5 absolute at the config's init scale),
// seeds, hybrid-engine hooks and bad requests.
#include <verlpp/core/error.hpp>
#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/hw/tensor_storage.hpp>
#include <verlpp/model/checkpoint.hpp>
#include <verlpp/rollout/engine.hpp>
#include <verlpp/train/logprob.hpp>

#include "engine_fixture.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/tensor.h>
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

using namespace verlpp;
using namespace verlpp::rollout;
using namespace verlpp::test;

namespace {

// examples/tiny at its own init scale (0.02, logits ~0.23 wide, near uniform), fp32.
// `logit_scale` multiplies the final norm's weight: every logit grows by it, the body is unchanged.
model::DecoderLM config_scale_model(uint64_t seed, double logit_scale) {
  model::DecoderLM m(tiny_config(0.02));
  m.init_weights(seed);
  at::NoGradGuard no_grad;
  m.parameter("model.norm.weight").mul_(logit_scale);
  return m;
}

// What the trainer recomputes as old log-probs for the last `num_response` tokens of `ids`
// (train::response_log_probs, one unpadded row): [num_response] fp32.
at::Tensor trainer_logprobs(const model::DecoderLM& m, const std::vector<int64_t>& ids, int64_t num_response,
                            double T) {
  at::NoGradGuard no_grad;
  at::Tensor x = at::tensor(ids, at::TensorOptions().dtype(at::kLong)).unsqueeze(0);
  return train::response_log_probs(m, x, at::ones_like(x), at::arange(x.size(1), x.options()).unsqueeze(0),
                                   num_response, T, false)
      .log_probs[0];
}

// Every generated token's log-prob against a full forward of the same weights in fp64 (exact
// to ~1e-12, so what is measured is the engine's error alone), relative to the log-prob's size.
// An fp32 engine is held to 2.5e-5: its rounding depends on the BLAS (the decode step's [1 x C]
// products and a full forward's [T x C] ones sum in different orders; measured 1.2e-5 with
// OpenBLAS on this model's large logits). An fp64 engine is held to 1e-6 (the test below; the
// sampler's log-softmax and the stored log-prob are fp32): a logic error (a wrong position, KV
// block or temperature) shows there at 1e-3 or more, and rounding cannot hide it.
//
// An fp32 engine is also compared with what the trainer recomputes as old log-probs
// (train::response_log_probs in fp32, verl's layout), the pair RL actually compares. Issue 5's
// literal "<= 1e-5 absolute" is proven at realistic scale by the "fp32 log-probs within 1e-5
// absolute" test below (the config's 0.02 init). On this large-init model fp32 rounding alone
// exceeds it: measured up to 2.96e-5 for the pair, and the trainer's fp32 forward is itself up
// to 3.0e-5 from fp64 on the same sample (3.07e-5 with the LM head and log-softmax in fp64: the
// error is the fp32 body's GEMMs and attention), so even an exact engine would be 3e-5 away.
// Each side is within its 2.5e-5 budget of the exact value, so the pair is held to their sum.
void check_logprobs(const model::DecoderLM& m, const std::vector<int64_t>& prompt, const GenerateOutput& out, double T,
                    double tolerance = 2.5e-5) {
  const double worst = worst_logprob_error(m, prompt, out, T);
  INFO(fmt::format("request {} sample {}: worst relative |logprob error| {:.3g}", out.request_index, out.sample_index,
                   worst));
  CHECK(worst <= tolerance);
  if (m.options().dtype != at::kFloat) return;
  std::vector<int64_t> ids = prompt;
  ids.insert(ids.end(), out.token_ids.begin(), out.token_ids.end());
  at::Tensor old = trainer_logprobs(m, ids, int64_t(out.token_ids.size()), T);
  double worst_trainer = 0, worst_abs = 0;
  for (size_t i = 0; i < out.token_ids.size(); ++i) {
    const double ref = old[int64_t(i)].item<double>(), diff = std::abs(ref - double(out.logprobs[i]));
    worst_trainer = std::max(worst_trainer, diff / std::max(1.0, std::abs(ref)));
    worst_abs = std::max(worst_abs, diff);
  }
  INFO(fmt::format("against the trainer's fp32 recompute: worst relative {:.3g}, absolute {:.3g}", worst_trainer,
                   worst_abs));
  CHECK(worst_trainer <= tolerance + 2.5e-5);
}

SamplingParams greedy(int64_t max_new, int64_t n = 1) {
  SamplingParams p;
  p.temperature = 0;
  p.max_new_tokens = max_new;
  p.n = n;
  p.ignore_eos = true;
  return p;
}

}  // namespace

TEST_CASE("engine: greedy equals a naive full-recompute generator, with preemption", "[rollout][engine]") {
  model::DecoderLM ref = tiny_model(11);
  const std::vector<int64_t> lens = {1, 5, 7, 16, 17, 30};
  const int64_t max_new = 12;
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < lens.size(); ++i)
    reqs.push_back({prompt_of(lens[i], int64_t(i)), greedy(max_new, i == 2 ? 3 : 1)});
  EngineOptions opts;
  opts.block_size = 4;
  opts.num_blocks = 14;  // the longest request alone needs 11: forces preemption
  RolloutEngine engine(tiny_model(11), opts);
  std::vector<GenerateOutput> outs = engine.generate(reqs);
  REQUIRE(outs.size() == lens.size() + 2);
  CHECK(engine.last_stats().num_preemptions > 0);
  for (const GenerateOutput& out : outs) {
    INFO(fmt::format("request {} sample {}", out.request_index, out.sample_index));
    REQUIRE(out.error.empty());
    CHECK(out.finish_reason == FinishReason::kLength);
    const auto& prompt = reqs[size_t(out.request_index)].prompt_ids;
    CHECK(out.token_ids == naive_greedy(ref, prompt, max_new));
    check_logprobs(ref, prompt, out, 1.0);
  }
  // a roomy pool gives the same tokens without preemption
  RolloutEngine roomy(tiny_model(11), EngineOptions{});
  auto outs2 = roomy.generate(reqs);
  CHECK(roomy.last_stats().num_preemptions == 0);
  for (size_t i = 0; i < outs.size(); ++i) CHECK(outs2[i].token_ids == outs[i].token_ids);
}

TEST_CASE("engine: runs of equal-length fresh prompts prefill in one batched call, same tokens", "[rollout][engine]") {
  // Prompt lengths 6, 6, 6, 9, 9, 6, 6 (one step): runs of 3, 2 and 2 fresh sequences attend in
  // one call each; the fp64 engine must still equal the naive generator and a full forward.
  model::DecoderLM ref = tiny_model(13, at::kDouble);
  const std::vector<int64_t> lens = {6, 6, 6, 9, 9, 6, 6};
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < lens.size(); ++i) reqs.push_back({prompt_of(lens[i], int64_t(i)), greedy(5)});
  EngineOptions opts;
  opts.block_size = 4;
  RolloutEngine engine(tiny_model(13, at::kDouble), opts);
  auto outs = engine.generate(reqs);
  const GenerateStats& stats = engine.last_stats();
  CHECK(stats.num_prefill_steps == 1);
  // The phase times are parts of the call's wall time: both phases ran, neither exceeds it.
  CHECK(stats.prefill_seconds > 0);
  CHECK(stats.decode_seconds > 0);
  CHECK(stats.prefill_seconds + stats.decode_seconds <= stats.seconds);
  REQUIRE(outs.size() == lens.size());
  for (const GenerateOutput& out : outs) {
    INFO(fmt::format("request {}", out.request_index));
    const auto& prompt = reqs[size_t(out.request_index)].prompt_ids;
    CHECK(out.token_ids == naive_greedy(ref, prompt, 5));
    check_logprobs(ref, prompt, out, 1.0, 1e-6);
  }
}

namespace {
// cpu_ref's kernel table with ABI 1.3's and 1.5's decode fusions wrapped to count their calls.
const verlpp_kernel_table* g_cpu_ref_kernels = nullptr;
int64_t g_rotary_kv_stores = 0, g_add_rms_norms = 0, g_rotary_attentions = 0;
verlpp_error* counting_rotary_kv_store(const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* pos,
                                       const DLTensor* freq, const DLTensor* slots, DLTensor* q_out, DLTensor* kc,
                                       DLTensor* vc, verlpp_stream s) {
  ++g_rotary_kv_stores;
  return g_cpu_ref_kernels->rotary_kv_store(q, k, v, pos, freq, slots, q_out, kc, vc, s);
}
verlpp_error* counting_add_rms_norm(const DLTensor* x, DLTensor* r, const DLTensor* w, float eps, DLTensor* out,
                                    verlpp_stream s) {
  ++g_add_rms_norms;
  return g_cpu_ref_kernels->add_rms_norm(x, r, w, eps, out, s);
}
verlpp_error* counting_rotary_attention(const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* pos,
                                        const DLTensor* freq, const DLTensor* slots, DLTensor* kc, DLTensor* vc,
                                        const DLTensor* tables, const DLTensor* lens, float scale, DLTensor* out,
                                        verlpp_stream s) {
  ++g_rotary_attentions;
  return g_cpu_ref_kernels->rotary_paged_attention_decode(q, k, v, pos, freq, slots, kc, vc, tables, lens, scale, out,
                                                          s);
}
}  // namespace

TEST_CASE("engine: with cpu_ref's kernels (paged attention decode, sample) against the naive generator",
          "[rollout][engine]") {
  // The host's dispatch to a plugin's paged_attention_decode, sample, rotary_kv_store (or 1.5's
  // rotary_paged_attention_decode) and add_rms_norm, checked end to end: the engine's own KV
  // layout, block tables, GQA mapping and fused projections against a full forward.
  const bool fused = GENERATE(true, false);  // a table with 1.5's fused attention, and one without it
  INFO("rotary_paged_attention_decode offered: " << fused);
  hw::Plugin loaded = hw::load_plugin_file(std::string(VERLPP_BIN_DIR) + "/libverlpp-plugin-cpu_ref.so");
  g_cpu_ref_kernels = loaded.api().kernels;
  REQUIRE(g_cpu_ref_kernels->rotary_kv_store != nullptr);
  REQUIRE(g_cpu_ref_kernels->add_rms_norm != nullptr);
  REQUIRE(g_cpu_ref_kernels->rotary_paged_attention_decode != nullptr);
  static verlpp_kernel_table counting;
  counting = *g_cpu_ref_kernels;
  counting.rotary_kv_store = &counting_rotary_kv_store;
  counting.add_rms_norm = &counting_add_rms_norm;
  counting.rotary_paged_attention_decode = fused ? &counting_rotary_attention : nullptr;
  verlpp_plugin_api api = loaded.api();
  api.kernels = &counting;
  hw::Plugin plugin(loaded.path(), loaded.score(), api, sizeof(api));
  hw::Kernels kernels(plugin);
  REQUIRE(kernels.offers(hw::KernelId::paged_attention_decode));
  REQUIRE(kernels.offers(hw::KernelId::sample));
  g_rotary_kv_stores = g_add_rms_norms = g_rotary_attentions = 0;
  model::DecoderLM ref = tiny_model(11);
  SamplingParams sampled;
  sampled.temperature = 0.8;
  sampled.top_k = 20;
  sampled.max_new_tokens = 9;
  sampled.n = 2;
  sampled.ignore_eos = true;
  sampled.seed = 7;
  std::vector<GenerateRequest> reqs = {
      {prompt_of(5, 0), greedy(9)}, {prompt_of(17, 1), greedy(9)}, {prompt_of(6, 2), sampled}};
  EngineOptions opts;
  opts.block_size = 4;
  opts.kernels = &kernels;
  RolloutEngine engine(tiny_model(11), opts);
  auto outs = engine.generate(reqs);
  REQUIRE(outs.size() == 4);
  for (const GenerateOutput& out : outs) {
    INFO(fmt::format("request {} sample {}", out.request_index, out.sample_index));
    REQUIRE(out.error.empty());
    const GenerateRequest& req = reqs[size_t(out.request_index)];
    REQUIRE(out.token_ids.size() == 9);
    if (req.sampling.temperature == 0) CHECK(out.token_ids == naive_greedy(ref, req.prompt_ids, 9));
    // 5e-5, not 1e-5: cpu_ref attends in fp64 where the full forward uses fp32, and 1/T
    // amplifies the difference (seen: 1.0e-5 at T = 0.8 with Debian's reference BLAS).
    check_logprobs(ref, req.prompt_ids, out, req.sampling.temperature == 0 ? 1.0 : req.sampling.temperature, 5e-5);
  }
  // Every decode step stored K/V through the fused attention (or rotary_kv_store) once a layer;
  // every step (prefill and decode) ran its residual adds through add_rms_norm: two a layer
  // (the first layer's first norm has no add before it; the final norm has one).
  const GenerateStats& stats = engine.last_stats();
  const int64_t layers = ref.config().num_hidden_layers;
  CHECK(stats.num_decode_steps > 0);
  CHECK(g_rotary_attentions == (fused ? layers * stats.num_decode_steps : 0));
  CHECK(g_rotary_kv_stores == (fused ? 0 : layers * stats.num_decode_steps));
  CHECK(g_add_rms_norms == 2 * layers * (stats.num_prefill_steps + stats.num_decode_steps));
}

TEST_CASE("engine: in fp64 the returned log-probs equal a full forward to float precision (greedy, sampled, preempted)",
          "[rollout][engine]") {
  model::DecoderLM ref = tiny_model(5, at::kDouble);
  SamplingParams p;
  p.temperature = 0.7;
  p.top_k = 50;
  p.top_p = 0.9;
  p.max_new_tokens = 10;
  p.n = 2;
  p.ignore_eos = true;
  p.seed = 77;
  std::vector<GenerateRequest> reqs = {{prompt_of(9, 1), p}, {prompt_of(14, 2), greedy(10, 2)}, {prompt_of(3, 3), p}};
  EngineOptions small;
  small.block_size = 4;
  small.num_blocks = 10;  // forces preemption
  RolloutEngine engine(tiny_model(5, at::kDouble), small);
  auto outs = engine.generate(reqs);
  REQUIRE(outs.size() == 6);
  CHECK(engine.last_stats().num_preemptions > 0);
  for (const auto& out : outs) {
    REQUIRE(out.error.empty());
    const double t = reqs[size_t(out.request_index)].sampling.temperature;
    check_logprobs(ref, reqs[size_t(out.request_index)].prompt_ids, out, t == 0 ? 1.0 : t, 1e-6);
  }
}

TEST_CASE(
    "engine: fp32 log-probs within 1e-5 absolute of an fp32 full forward and of the trainer's recompute (config init "
    "scale)",
    "[rollout][engine]") {
  // Issue 5's literal bound, on the tiny model as configured (initializer_range 0.02: logits
  // ~0.23 wide, near uniform) and with its logits scaled 20x, as peaked as a trained model's
  // (|logit| up to 24, mean entropy 1.2 nats, top token 0.68 on average). Both references are
  // fp32: one full forward's log_softmax(logits / T), and train::response_log_probs (the
  // trainer's old log-probs). Measured worst (OpenBLAS) 9.5e-7 at scale 1, 4.4e-6 at scale 20.
  SamplingParams t1;  // T = 1, top-p, n = 3
  t1.temperature = 1.0;
  t1.top_p = 0.9;
  t1.n = 3;
  t1.seed = 41;
  SamplingParams t07;  // T = 0.7, top-k and top-p
  t07.temperature = 0.7;
  t07.top_k = 40;
  t07.top_p = 0.95;
  t07.seed = 42;
  const int64_t max_new = 12;
  for (SamplingParams* p : {&t1, &t07}) {
    p->max_new_tokens = max_new;
    p->ignore_eos = true;
  }
  std::vector<GenerateRequest> reqs = {{prompt_of(1, 0), t1},
                                       {prompt_of(6, 1), t07},
                                       {prompt_of(13, 2), greedy(max_new)},
                                       {prompt_of(22, 3), t07},
                                       {prompt_of(31, 4), greedy(max_new)}};
  reqs[3].sampling.seed = 43;
  for (double logit_scale : {1.0, 20.0}) {
    model::DecoderLM ref = config_scale_model(31, logit_scale);
    EngineOptions small;
    small.block_size = 4;
    small.num_blocks = 14;  // the longest request alone needs 11: forces preemption
    RolloutEngine engine(config_scale_model(31, logit_scale), small);
    std::vector<GenerateOutput> outs = engine.generate(reqs);
    REQUIRE(outs.size() == reqs.size() + 2);
    CHECK(engine.last_stats().num_preemptions > 0);
    double worst_full = 0, worst_trainer = 0, min_logprob = 0;
    for (const GenerateOutput& out : outs) {
      REQUIRE(out.error.empty());
      REQUIRE(out.token_ids.size() == size_t(max_new));
      const GenerateRequest& req = reqs[size_t(out.request_index)];
      const double T = req.sampling.temperature == 0 ? 1.0 : req.sampling.temperature;
      std::vector<int64_t> ids = req.prompt_ids;
      ids.insert(ids.end(), out.token_ids.begin(), out.token_ids.end());
      const at::Tensor full = full_logprobs(ref, ids, T);
      const at::Tensor trainer = trainer_logprobs(ref, ids, max_new, T);
      int64_t first_bad = -1;
      std::string bad;
      for (int64_t i = 0; i < max_new; ++i) {
        const double got = out.logprobs[size_t(i)];
        const double a = full[int64_t(req.prompt_ids.size()) + i - 1][out.token_ids[size_t(i)]].item<double>();
        const double b = trainer[i].item<double>();
        worst_full = std::max(worst_full, std::abs(got - a));
        worst_trainer = std::max(worst_trainer, std::abs(got - b));
        min_logprob = std::min(min_logprob, got);
        if (first_bad < 0 && std::max(std::abs(got - a), std::abs(got - b)) > 1e-5) {
          first_bad = i;
          bad = fmt::format("token {}: engine {:.9g}, full forward {:.9g}, trainer {:.9g}", i, got, a, b);
        }
      }
      INFO(fmt::format("logit scale {}, request {} sample {}: first token off by > 1e-5: {}", logit_scale,
                       out.request_index, out.sample_index, first_bad < 0 ? "none" : bad));
      CHECK(first_bad == -1);
    }
    INFO(fmt::format(
        "logit scale {}: worst |engine - full forward| {:.3g}, |engine - trainer| {:.3g} (log-probs down to {:.3g})",
        logit_scale, worst_full, worst_trainer, min_logprob));
    CHECK(std::max(worst_full, worst_trainer) <= 1e-5);
  }
}

TEST_CASE("engine: sampled log-probs equal a full forward at the temperature; seeds", "[rollout][engine]") {
  model::DecoderLM ref = tiny_model(5);
  SamplingParams p;
  p.temperature = 0.7;
  p.top_k = 50;
  p.top_p = 0.9;
  p.max_new_tokens = 10;
  p.n = 3;
  p.ignore_eos = true;
  p.seed = 1234;
  std::vector<GenerateRequest> reqs = {{prompt_of(9, 1), p}, {prompt_of(3, 2), p}, {prompt_of(13, 3), p}};
  reqs[1].sampling.seed = 99;
  reqs[2].sampling.temperature = 1.3;
  reqs[2].sampling.top_k = 0;
  EngineOptions small;
  small.block_size = 4;
  small.num_blocks = 9;
  RolloutEngine engine(tiny_model(5), small);
  auto outs = engine.generate(reqs);
  REQUIRE(outs.size() == 9);
  for (const auto& out : outs) {
    REQUIRE(out.token_ids.size() == 10);
    check_logprobs(ref, reqs[size_t(out.request_index)].prompt_ids, out,
                   reqs[size_t(out.request_index)].sampling.temperature);
  }
  CHECK(outs[0].token_ids != outs[1].token_ids);  // samples of one prompt draw differently

  // request 0 alone, in a roomy pool, gives the same tokens (batch composition, preemption)
  RolloutEngine roomy(tiny_model(5), EngineOptions{});
  auto alone = roomy.generate({reqs[0]});
  REQUIRE(alone.size() == 3);
  for (size_t j = 0; j < 3; ++j) CHECK(alone[j].token_ids == outs[j].token_ids);
  // with other requests before it, again the same
  auto mixed = roomy.generate({reqs[2], reqs[1], reqs[0]});
  for (size_t j = 0; j < 3; ++j) CHECK(mixed[6 + j].token_ids == outs[j].token_ids);
  // another seed, other tokens
  reqs[0].sampling.seed = 4321;
  auto other = roomy.generate({reqs[0]});
  CHECK(other[0].token_ids != outs[0].token_ids);
}

TEST_CASE("engine: stop ids, EOS and the context cap", "[rollout][engine]") {
  model::DecoderLM ref = tiny_model(3);
  const auto prompt = prompt_of(6, 0);
  const auto expect = naive_greedy(ref, prompt, 8);
  RolloutEngine engine(tiny_model(3), EngineOptions{});
  GenerateRequest r{prompt, greedy(8)};
  r.sampling.stop_token_ids = {expect[3]};
  auto outs = engine.generate({r});
  const auto cut = std::find(expect.begin(), expect.end(), expect[3]);
  CHECK(outs[0].finish_reason == FinishReason::kStop);
  CHECK(outs[0].token_ids == std::vector<int64_t>(expect.begin(), cut + 1));
  // a prompt near the context end generates only up to max_position_embeddings
  const int64_t ctx = ref.config().max_position_embeddings;
  auto near_end = engine.generate({{prompt_of(ctx - 2, 1), greedy(8)}});
  CHECK(near_end[0].token_ids.size() == 2);
  CHECK(near_end[0].finish_reason == FinishReason::kLength);
}

TEST_CASE("engine: bad requests are errors, the rest of the batch runs", "[rollout][engine]") {
  model::DecoderLM ref = tiny_model(2);
  EngineOptions opts;
  opts.block_size = 4;
  opts.num_blocks = 8;  // 32 tokens
  RolloutEngine engine(tiny_model(2), opts);
  const int64_t ctx = ref.config().max_position_embeddings;
  std::vector<GenerateRequest> reqs = {
      {{}, greedy(4)},                  // empty
      {prompt_of(5, 0), greedy(4)},     // fine
      {prompt_of(ctx, 1), greedy(4)},   // no room in the context
      {prompt_of(5, 2), greedy(4, 0)},  // n = 0
      {prompt_of(5, 3), greedy(4)},     // top_p = 0
      {prompt_of(5, 4), greedy(4)},     // top_p = 1.5
      {{3, 400}, greedy(4)},            // id outside the vocabulary
      {prompt_of(30, 5), greedy(10)},   // too long for the whole pool
  };
  reqs[4].sampling.top_p = 0;
  reqs[5].sampling.top_p = 1.5;
  auto outs = engine.generate(reqs);
  REQUIRE(outs.size() == reqs.size());
  const std::vector<std::string> expected = {"empty", "",      "context",    "sampling.n",
                                             "top_p", "top_p", "vocabulary", "pool"};
  for (size_t i = 0; i < outs.size(); ++i) {
    INFO(fmt::format("request {}: '{}'", i, outs[i].error));
    CHECK(outs[i].request_index == int64_t(i));
    if (expected[i].empty()) {
      CHECK(outs[i].error.empty());
      CHECK(outs[i].token_ids == naive_greedy(ref, reqs[i].prompt_ids, 4));
    } else {
      CHECK_THAT(outs[i].error, Catch::Contains(expected[i]));
      CHECK(outs[i].finish_reason == FinishReason::kAborted);
    }
  }
  CHECK_THROWS_AS(model::load_pretrained("/nonexistent/model"), Error);
}

TEST_CASE("engine: on_output hands over each output as it finishes, the same outputs as returned",
          "[rollout][engine]") {
  EngineOptions opts;
  opts.block_size = 4;
  opts.num_blocks = 12;                                   // 48 tokens: a few samples at a time, finishing in waves
  std::vector<GenerateRequest> reqs = {{{}, greedy(4)}};  // refused: empty
  for (int64_t i = 0; i < 6; ++i) {
    SamplingParams p;
    p.n = 2;
    p.max_new_tokens = 3 + 2 * i;  // different lengths: different finishing steps
    p.temperature = 0.9;
    p.seed = uint64_t(10 + i);
    p.ignore_eos = true;
    reqs.push_back({prompt_of(5 + i, i), p});
  }
  RolloutEngine whole(tiny_model(2), opts), streamed(tiny_model(2), opts);
  const std::vector<GenerateOutput> expected = whole.generate(reqs);
  REQUIRE(expected.size() == 13);  // the refusal + 6 prompts x 2 samples

  std::vector<GenerateOutput> got;
  std::vector<size_t> got_at_progress;  // outputs handed over when each progress call came
  const std::vector<GenerateOutput> returned = streamed.generate(
      reqs, [&](int64_t, int64_t) { got_at_progress.push_back(got.size()); },
      [&](GenerateOutput&& o) { got.push_back(std::move(o)); });
  CHECK(returned.empty());  // the engine kept none
  REQUIRE(got.size() == expected.size());
  CHECK(got.front().request_index == 0);  // refusals come first
  CHECK_THAT(got.front().error, Catch::Contains("empty"));
  // Handed over as they finished, not at the end: each progress call saw its samples already.
  REQUIRE(got_at_progress.size() > 1);
  CHECK(got_at_progress.front() < got.size());
  for (size_t k = 1; k < got_at_progress.size(); ++k) CHECK(got_at_progress[k] > got_at_progress[k - 1]);
  std::sort(got.begin(), got.end(), [](const GenerateOutput& a, const GenerateOutput& b) {
    return std::make_pair(a.request_index, a.sample_index) < std::make_pair(b.request_index, b.sample_index);
  });
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("output " << i);
    CHECK(got[i].request_index == expected[i].request_index);
    CHECK(got[i].sample_index == expected[i].sample_index);
    CHECK(got[i].token_ids == expected[i].token_ids);
    CHECK(got[i].logprobs == expected[i].logprobs);
    CHECK(got[i].finish_reason == expected[i].finish_reason);
    CHECK(got[i].error == expected[i].error);
  }
}

TEST_CASE("engine: update_weights shares or casts; sleep and wake", "[rollout][engine]") {
  model::DecoderLM trainer = tiny_model(21);
  const auto prompt = prompt_of(7, 0);
  const auto expect = naive_greedy(trainer, prompt, 6);
  RolloutEngine engine(tiny_model(20), EngineOptions{});
  CHECK(engine.generate({{prompt, greedy(6)}})[0].token_ids != expect);
  // The fused projections (q/k/v, gate/up and their biases) are copied into the engine's fused
  // buffers; every other parameter is shared.
  int64_t fused = 0;
  for (const auto& [name, p] : trainer.named_parameters()) fused += engine.model().is_fused(name) ? 1 : 0;
  const auto& c = trainer.config();
  CHECK(fused == (5 + (c.qkv_bias ? 3 : 0) + (c.mlp_bias ? 2 : 0)) * c.num_hidden_layers);
  WeightUpdateReport shared = engine.update_weights(trainer.named_parameters());
  CHECK(shared.num_shared == int64_t(trainer.named_parameters().size()) - fused);
  CHECK(shared.num_copied == fused);
  CHECK(engine.model().parameter("model.norm.weight").is_same(trainer.parameter("model.norm.weight")) == false);
  CHECK(engine.model().parameter("model.norm.weight").data_ptr() == trainer.parameter("model.norm.weight").data_ptr());
  const std::string q0 = "model.layers.0.self_attn.q_proj.weight";
  CHECK(engine.model().parameter(q0).data_ptr() != trainer.parameter(q0).data_ptr());
  CHECK(engine.model().parameter(q0).equal(trainer.parameter(q0)));
  CHECK(engine.generate({{prompt, greedy(6)}})[0].token_ids == expect);
  {
    // Without fusion every parameter is shared.
    EngineOptions plain;
    plain.fuse_projections = false;
    RolloutEngine unfused(tiny_model(20), plain);
    WeightUpdateReport all = unfused.update_weights(trainer.named_parameters());
    CHECK(all.num_shared == int64_t(trainer.named_parameters().size()));
    CHECK(all.num_copied == 0);
    CHECK(unfused.generate({{prompt, greedy(6)}})[0].token_ids == expect);
  }

  // fp64 weights are cast into private buffers (never written through the shared storage)
  model::DecoderLM other = tiny_model(22);
  other.to(at::kDouble, c10::Device(c10::kCPU));
  at::Tensor before = trainer.parameter("model.norm.weight").clone();
  WeightUpdateReport cast = engine.update_weights(other.named_parameters());
  CHECK(cast.num_copied == int64_t(other.named_parameters().size()));
  CHECK(trainer.parameter("model.norm.weight").equal(before));
  CHECK(engine.model().parameter("model.norm.weight").scalar_type() == at::kFloat);
  model::DecoderLM other32 = tiny_model(22);
  CHECK(engine.generate({{prompt, greedy(6)}})[0].token_ids == naive_greedy(other32, prompt, 6));

  CHECK_THROWS_AS(engine.update_weights({{"model.nope", before}}), Error);
  CHECK_THROWS_WITH(engine.update_weights({{"model.norm.weight", before.narrow(0, 0, 3)}}), Catch::Contains("shape"));

  const double slept = engine.sleep();
  CHECK(engine.is_sleeping());
  CHECK(slept >= 0);
  CHECK_THROWS_WITH(engine.generate({{prompt, greedy(2)}}), Catch::Contains("asleep"));
  engine.wake();
  CHECK(engine.generate({{prompt, greedy(6)}})[0].token_ids == naive_greedy(other32, prompt, 6));
}

TEST_CASE("engine: release_weights frees what the engine owns and leaves the trainer's shared weights",
          "[rollout][engine]") {
  model::DecoderLM trainer = tiny_model(21);
  const auto prompt = prompt_of(7, 0);
  const auto expect = naive_greedy(trainer, prompt, 6);
  std::vector<at::Tensor> originals;
  for (const auto& [name, p] : trainer.named_parameters()) originals.push_back(p.clone());
  RolloutEngine engine(tiny_model(20), EngineOptions{});
  engine.update_weights(trainer);
  CHECK_FALSE(engine.weights_released());
  engine.release_weights();
  CHECK(engine.weights_released());
  // The fused projections (the engine's own buffers) are gone; every shared tensor is whole and
  // unchanged, the trainer's as before.
  int64_t released = 0;
  for (const auto& [name, p] : engine.model().named_parameters()) {
    INFO(name);
    CHECK(hw::is_storage_released(p) == engine.model().is_fused(name));
    released += hw::is_storage_released(p) ? 1 : 0;
  }
  CHECK(released > 0);
  size_t k = 0;
  for (const auto& [name, p] : trainer.named_parameters()) {
    INFO(name);
    CHECK_FALSE(hw::is_storage_released(p));
    CHECK(p.equal(originals[k++]));
  }
  // Generation refuses until the sync writes them again, then gives the trainer's tokens.
  CHECK_THROWS_WITH(engine.generate({{prompt, greedy(2)}}), Catch::Contains("released"));
  engine.update_weights(trainer);
  CHECK_FALSE(engine.weights_released());
  CHECK(engine.generate({{prompt, greedy(6)}})[0].token_ids == expect);

  // An engine with a copy of its own (another dtype) releases every weight.
  model::DecoderLM wide = tiny_model(21);
  wide.to(at::kDouble, c10::Device(c10::kCPU));
  RolloutEngine own(tiny_model(20), EngineOptions{});
  own.update_weights(wide);
  own.release_weights();
  for (const auto& [name, p] : own.model().named_parameters()) CHECK(hw::is_storage_released(p));
  for (const auto& [name, p] : wide.named_parameters()) CHECK_FALSE(hw::is_storage_released(p));
  own.update_weights(wide);
  CHECK(own.generate({{prompt, greedy(6)}})[0].token_ids == expect);
}

TEST_CASE("engine: memory_fraction off the CPU needs memory_total_bytes", "[rollout][engine]") {
  // Physical RAM is no measure of a GPU's memory; the meta device stands in for one here (it
  // allocates nothing, and the check fires before the pool is created).
  model::ModelOptions on_meta;
  on_meta.device = c10::Device(c10::kMeta);
  EngineOptions opts;
  opts.memory_fraction = 0.5;
  CHECK_THROWS_WITH(RolloutEngine(model::DecoderLM(tiny_config(), on_meta), opts),
                    Catch::Contains("memory_total_bytes"));
}
