// Block manager and scheduler invariants (ref counts, copy on write, preemption, no leaks) and
// the sampler's distribution against the exact filtered softmax (fp64 loops written here), both
// the LibTorch reference and a plugin's sample kernel (cpu_ref's) reached through sample().
#include <verlpp/core/error.hpp>
#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/rollout/block_manager.hpp>
#include <verlpp/rollout/sampling.hpp>
#include <verlpp/rollout/scheduler.hpp>

#include <ATen/ops/tensor.h>
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

using namespace verlpp::rollout;

TEST_CASE("block manager: allocate, fork, copy on write, free", "[rollout][blocks]") {
  BlockManager bm(5, 4);
  std::vector<int64_t> a, b, c;
  REQUIRE(bm.can_allocate(6));
  bm.allocate(a, 6);  // 2 blocks, the second holds 2 of 4
  CHECK(a.size() == 2);
  CHECK(bm.num_free_blocks() == 3);
  bm.fork(a, b);
  bm.fork(a, c);
  CHECK(bm.ref_count(a[0]) == 3);
  CHECK(bm.ref_count(a[1]) == 3);
  // position 6 lies in the shared partial block: the first two writers copy, the last writes in place
  REQUIRE(bm.can_append(a, 6));
  auto ca = bm.append(a, 6);
  REQUIRE(ca.has_value());
  CHECK(ca->src == b[1]);
  CHECK(bm.ref_count(b[1]) == 2);
  auto cb = bm.append(b, 6);
  REQUIRE(cb.has_value());
  CHECK(bm.ref_count(c[1]) == 1);
  CHECK_FALSE(bm.append(c, 6).has_value());
  CHECK(bm.num_free_blocks() == 1);
  CHECK(a[0] == b[0]);
  CHECK(bm.ref_count(a[0]) == 3);
  // position 8 starts a new block
  REQUIRE(bm.can_append(a, 8));
  bm.append(a, 8);
  CHECK(bm.num_free_blocks() == 0);
  CHECK_FALSE(bm.can_append(b, 8));
  CHECK_FALSE(bm.can_allocate(1));
  CHECK_THROWS_AS(bm.append(b, 8), verlpp::Error);
  bm.free(a);
  bm.free(b);
  bm.free(c);
  CHECK(bm.num_free_blocks() == 5);
  for (int64_t i = 0; i < 5; ++i) CHECK(bm.ref_count(i) == 0);
  CHECK_THROWS_AS(BlockManager(0, 4), verlpp::Error);
}

TEST_CASE("scheduler: n samples share the prompt, COW on decode, preemption, nothing leaks", "[rollout][scheduler]") {
  BlockManager bm(6, 4);
  Scheduler sched(bm, SchedulerLimits{8, 64});
  std::vector<int64_t> stop;
  std::vector<Sequence> seqs(4);
  std::vector<Sequence*> group;
  for (int64_t i = 0; i < 3; ++i) {
    seqs[size_t(i)].id = i;
    seqs[size_t(i)].sample_index = i;
    seqs[size_t(i)].token_ids = {1, 2, 3, 4, 5, 6};
    seqs[size_t(i)].num_prompt_tokens = 6;
    seqs[size_t(i)].max_new_tokens = 8;
    seqs[size_t(i)].stop_ids = &stop;
    group.push_back(&seqs[size_t(i)]);
  }
  seqs[3] = seqs[0];
  seqs[3].id = 3;
  seqs[3].token_ids = {7, 8, 9};
  seqs[3].num_prompt_tokens = 3;
  sched.add_group(group);
  sched.add_group({&seqs[3]});

  ScheduledStep s1 = sched.schedule();
  REQUIRE(s1.is_prefill);
  REQUIRE(s1.compute.size() == 2);  // one leader per group
  REQUIRE(s1.samplers.size() == 4);
  CHECK(s1.samplers[2].second == 0);
  CHECK(bm.ref_count(seqs[0].block_table[0]) == 3);
  CHECK(bm.num_free_blocks() == 3);
  sched.postprocess(s1, {10, 11, 12, 13}, {0, 0, 0, 0});

  ScheduledStep s2 = sched.schedule();
  REQUIRE_FALSE(s2.is_prefill);
  CHECK(s2.copies.size() == 2);  // the shared partial block, copied for two of three samples
  CHECK(bm.num_free_blocks() == 1);
  sched.postprocess(s2, {1, 1, 1, 1}, {0, 0, 0, 0});
  // positions 7 (seqs 0-2) and 4 (seq 3) fit their blocks; then position 8 needs 3 new blocks
  ScheduledStep s3 = sched.schedule();
  sched.postprocess(s3, {1, 1, 1, 1}, {0, 0, 0, 0});
  ScheduledStep s4 = sched.schedule();
  CHECK(sched.num_preemptions() > 0);
  int64_t steps = 0;
  std::vector<int64_t> seen;
  for (ScheduledStep st = s4; !st.empty(); st = sched.schedule()) {
    REQUIRE(++steps < 100);
    std::vector<int64_t> toks(st.samplers.size(), 1);
    for (Sequence* f : sched.postprocess(st, toks, std::vector<float>(toks.size(), 0))) seen.push_back(f->id);
  }
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<int64_t>{0, 1, 2, 3});  // each exactly once
  for (const Sequence& s : seqs) CHECK(s.num_generated() == 8);
  CHECK(bm.num_free_blocks() == 6);
  CHECK_FALSE(sched.has_work());
}

namespace {

// The exact distribution: softmax(logits / T), top-k, then the smallest descending prefix whose
// mass reaches p, renormalised (fp64, plain loops).
std::vector<double> filtered(const std::vector<double>& logits, double T, int64_t k, double p) {
  const size_t V = logits.size();
  std::vector<size_t> order(V);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  double mx = logits[order[0]] / T, z = 0;
  std::vector<double> prob(V);
  for (size_t i = 0; i < V; ++i) z += std::exp(logits[i] / T - mx);
  for (size_t i = 0; i < V; ++i) prob[i] = std::exp(logits[i] / T - mx) / z;
  const size_t kk = k > 0 ? std::min(size_t(k), V) : V;
  double zk = 0;
  for (size_t i = 0; i < kk; ++i) zk += prob[order[i]];
  std::vector<double> out(V, 0.0);
  double before = 0, kept = 0;
  for (size_t i = 0; i < kk; ++i) {
    if (before >= p * zk) break;
    out[order[i]] = prob[order[i]];
    before += prob[order[i]];
    kept += prob[order[i]];
  }
  for (double& x : out) x /= kept;
  return out;
}

// Draws 20000 tokens per setting through sample() (the LibTorch reference when `kernels` is
// NULL, else the plugin's kernel through the host's dispatch) and compares the counts with the
// exact filtered softmax; log-probs are under softmax(logits / T) before filtering.
void check_filtered_softmax(const verlpp::hw::Kernels* kernels) {
  const std::vector<double> logits = {1.2, -0.3, 0.8, 2.0, -1.5, 0.1, 1.9, -0.7};  // V = 8
  struct Case {
    double T;
    int64_t k;
    double p;
  };
  const std::vector<Case> cases = {{1.0, 0, 1.0}, {0.5, 0, 1.0}, {1.7, 0, 1.0}, {1.0, 3, 1.0},
                                   {1.0, 0, 0.7}, {0.8, 5, 0.8}, {1.3, 1, 1.0}, {1.0, 0, 0.05}};
  const int64_t draws = 20000;
  at::Tensor row = at::tensor(std::vector<float>(logits.begin(), logits.end()));
  at::Tensor batch = row.unsqueeze(0).expand({draws, 8}).contiguous();
  for (const Case& c : cases) {
    INFO(fmt::format("T {} top_k {} top_p {}", c.T, c.k, c.p));
    std::vector<RowSampling> rows;
    for (int64_t i = 0; i < draws; ++i) rows.push_back(RowSampling{c.T, c.k, c.p, sample_seed(7, i), 3});
    SampleResult r = sample(batch, rows, kernels);
    const std::vector<double> expect = filtered(logits, c.T, c.k, c.p);
    std::vector<int64_t> counts(8, 0);
    for (int64_t i = 0; i < draws; ++i) ++counts[size_t(r.token_ids[i].item<int64_t>())];
    double chi2 = 0;
    int64_t df = -1;
    for (size_t v = 0; v < 8; ++v) {
      if (expect[v] == 0) {
        CHECK(counts[v] == 0);  // never outside the kept set
        continue;
      }
      const double e = expect[v] * double(draws);
      chi2 += (double(counts[v]) - e) * (double(counts[v]) - e) / e;
      ++df;
    }
    INFO(fmt::format("chi2 {:.2f} with {} degrees of freedom", chi2, df));
    CHECK(chi2 < 30.0);  // > 99.99th percentile of chi2(7); fixed seeds make this deterministic
    // log-probs are under softmax(logits / T) before filtering
    double mx = -1e9, z = 0;
    for (double l : logits) mx = std::max(mx, l / c.T);
    for (double l : logits) z += std::exp(l / c.T - mx);
    for (int64_t i = 0; i < 50; ++i) {
      const int64_t t = r.token_ids[i].item<int64_t>();
      CHECK(std::abs(r.logprobs[i].item<float>() - (logits[size_t(t)] / c.T - mx - std::log(z))) < 1e-5);
    }
  }
}

}  // namespace

TEST_CASE("sampler: temperature, top-k, top-p follow the filtered softmax (chi-square)", "[rollout][sampler]") {
  check_filtered_softmax(nullptr);
  const std::vector<double> logits = {1.2, -0.3, 0.8, 2.0, -1.5, 0.1, 1.9, -0.7};  // V = 8
  at::Tensor row = at::tensor(std::vector<float>(logits.begin(), logits.end()));
  at::Tensor batch = row.unsqueeze(0).expand({2, 8}).contiguous();
  // greedy: argmax, log-prob at temperature 1; a row's draw depends only on (seed, step)
  SampleResult g = sample(batch, {RowSampling{0.0, 0, 1.0, 1, 0}, RowSampling{0.0, 0, 1.0, 2, 5}});
  CHECK(g.token_ids[0].item<int64_t>() == 3);
  CHECK(g.token_ids[1].item<int64_t>() == 3);
  CHECK(uniform_draw(5, 2) == uniform_draw(5, 2));
  CHECK(uniform_draw(5, 2) != uniform_draw(5, 3));
  CHECK(sample_seed(5, 0) != sample_seed(5, 1));
}

TEST_CASE("sampler: a plugin's sample kernel (cpu_ref) through the host's dispatch", "[rollout][sampler]") {
  verlpp::hw::Plugin plugin =
      verlpp::hw::load_plugin_file(std::string(VERLPP_BIN_DIR) + "/libverlpp-plugin-cpu_ref.so");
  verlpp::hw::Kernels kernels(plugin);
  REQUIRE(kernels.offers(verlpp::hw::KernelId::sample));
  check_filtered_softmax(&kernels);
  // greedy rows take the argmax, with the log-prob at temperature 1
  at::Tensor batch = at::tensor(std::vector<float>{0.5f, 3.0f, -1.0f, 2.0f, 4.0f, 1.0f}).reshape({2, 3});
  SampleResult g = sample(batch, {RowSampling{0.0, 0, 1.0, 1, 0}, RowSampling{0.0, 5, 0.5, 2, 5}}, &kernels);
  CHECK(g.token_ids[0].item<int64_t>() == 1);
  CHECK(g.token_ids[1].item<int64_t>() == 1);
  const double z0 = std::log(std::exp(0.5 - 3.0) + 1.0 + std::exp(-1.0 - 3.0));
  CHECK(std::abs(g.logprobs[0].item<float>() - (0.0 - z0)) < 1e-5);
  // An odd batch: tokens and log-probs share one device buffer (DeviceSamples), the log-probs
  // after ceil(B / 2) int64s; every row must still read its own token and log-prob.
  const std::vector<float> odd = {2.0f, 0.0f, -1.0f, -3.0f, 1.0f, 0.5f, 0.25f, 0.0f, 4.0f};
  SampleResult o = sample(
      at::tensor(odd).reshape({3, 3}),
      {RowSampling{0.0, 0, 1.0, 1, 0}, RowSampling{0.0, 0, 1.0, 2, 0}, RowSampling{0.0, 0, 1.0, 3, 0}}, &kernels);
  REQUIRE(o.token_ids.numel() == 3);
  REQUIRE(o.logprobs.numel() == 3);
  for (int64_t r = 0; r < 3; ++r) {
    INFO(fmt::format("row {}", r));
    const float* x = odd.data() + 3 * r;
    const int64_t want = std::max_element(x, x + 3) - x;
    const double z = std::log(std::exp(double(x[0]) - x[want]) + std::exp(double(x[1]) - x[want]) +
                              std::exp(double(x[2]) - x[want]));
    CHECK(o.token_ids[r].item<int64_t>() == want);
    CHECK(std::abs(o.logprobs[r].item<float>() + z) < 1e-5);
  }
}

namespace {
// cpu_ref's sample, wrapped to record the dtype of the logits the host hands it.
const verlpp_kernel_table* g_cpu_ref_table = nullptr;
DLDataType g_logits_dtype{};
verlpp_error* recording_sample(const DLTensor* logits, const DLTensor* temperature, const DLTensor* top_k,
                               const DLTensor* top_p, const DLTensor* seeds, uint64_t step, DLTensor* out_tokens,
                               DLTensor* out_logprobs, verlpp_stream stream) {
  g_logits_dtype = logits->dtype;
  return g_cpu_ref_table->sample(logits, temperature, top_k, top_p, seeds, step, out_tokens, out_logprobs, stream);
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.numel() == b.numel() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), size_t(a.numel()) * a.element_size()) == 0;
}
}  // namespace

TEST_CASE("sampler: bf16 / f16 logits reach an ABI 1.3 kernel as they are, with their fp32 conversion's result",
          "[rollout][sampler]") {
  verlpp::hw::Plugin loaded =
      verlpp::hw::load_plugin_file(std::string(VERLPP_BIN_DIR) + "/libverlpp-plugin-cpu_ref.so");
  g_cpu_ref_table = loaded.api().kernels;
  static verlpp_kernel_table recording;
  recording = *g_cpu_ref_table;
  recording.sample = &recording_sample;
  // V odd, values with many exact ties once rounded (bf16 keeps 8 significant bits).
  const int64_t B = 16, V = 1001;
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> values(size_t(B * V));
  for (float& x : values) x = normal(rng);
  const at::Tensor drawn = at::tensor(values).reshape({B, V});
  std::vector<RowSampling> rows;
  const RowSampling kinds[] = {
      {0.0, 0, 1.0, 0, 0}, {0.8, 0, 1.0, 0, 0}, {1.0, 40, 1.0, 0, 0}, {1.2, 0, 0.9, 0, 0}, {0.7, 20, 0.8, 0, 0}};
  for (int64_t r = 0; r < B; ++r) {
    RowSampling row = kinds[r % 5];
    row.seed = sample_seed(13, r);
    row.step = 4 + r % 3;
    rows.push_back(row);
  }
  for (uint32_t minor : {3u, 2u}) {
    verlpp_plugin_api api = loaded.api();
    api.kernels = &recording;
    api.abi_minor = minor;  // a 1.2 plugin must keep getting fp32
    verlpp::hw::Plugin plugin(loaded.path(), loaded.score(), api, sizeof(api));
    verlpp::hw::Kernels kernels(plugin);
    for (at::ScalarType type : {at::kBFloat16, at::kHalf}) {
      INFO(fmt::format("plugin ABI minor {}, logits {}", minor, c10::toString(type)));
      const at::Tensor narrow = drawn.to(type), wide = narrow.to(at::kFloat);  // wide: the exact conversion
      SampleResult got = sample(narrow, rows, &kernels);
      const bool native = minor >= 3;
      CHECK(g_logits_dtype.bits == (native ? 16 : 32));
      CHECK(g_logits_dtype.code == (native && type == at::kBFloat16 ? kDLBfloat : kDLFloat));
      SampleResult want = sample(wide, rows, &kernels);
      CHECK(g_logits_dtype.bits == 32);
      CHECK(same_bits(got.token_ids, want.token_ids));
      CHECK(same_bits(got.logprobs, want.logprobs));
    }
  }
}

TEST_CASE("sampling params: bad values are errors naming the field", "[rollout][sampler]") {
  auto message = [](SamplingParams p) {
    try {
      validate(p);
    } catch (const verlpp::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SamplingParams p;
  CHECK(message(p).empty());
  p.n = 0;
  CHECK_THAT(message(p), Catch::Contains("sampling.n"));
  p = SamplingParams{};
  p.top_p = 0;
  CHECK_THAT(message(p), Catch::Contains("top_p"));
  p.top_p = 1.5;
  CHECK_THAT(message(p), Catch::Contains("top_p"));
  p = SamplingParams{};
  p.temperature = -1;
  CHECK_THAT(message(p), Catch::Contains("temperature"));
  p = SamplingParams{};
  p.max_new_tokens = 0;
  CHECK_THAT(message(p), Catch::Contains("max_new_tokens"));
}
