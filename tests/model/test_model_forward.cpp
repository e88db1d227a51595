// Decoder forwards: each family against an fp64 reference written here with explicit loops
// (RoPE pair by pair with its own llama3 formula, attention head by head and query by query,
// GQA by index arithmetic), then the forwards against each other: prefill + decode over a
// paged KV cache == full forward, padded batch == per-sequence, packed == separate; gradients
// against finite differences; bf16/fp16 close to fp32.
#include "model_test_util.hpp"

#include <verlpp/model/decoder.hpp>
#include <verlpp/model/kv_cache.hpp>
#include <verlpp/model/layers.hpp>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/randperm.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <cstdlib>
#include <random>

using namespace verlpp::model;
using namespace verlpp::model::testing;

namespace {

const char* const kCausalArchs[] = {"Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM"};

// ---- the fp64 reference --------------------------------------------------------------------

struct Reference {
  const DecoderLM& model;
  const ModelConfig& c;

  at::Tensor p(const std::string& name) const { return model.parameter(name).detach().to(at::kDouble); }
  bool has(const std::string& name) const {
    for (const auto& [n, t] : model.named_parameters())
      if (n == name) return true;
    return false;
  }
  at::Tensor linear(const at::Tensor& x, const std::string& name) const {
    at::Tensor y = x.matmul(p(name + ".weight").t());
    return has(name + ".bias") ? y + p(name + ".bias") : y;
  }
  at::Tensor rms(const at::Tensor& x, const std::string& name) const {
    return x / (x.pow(2).mean(-1, true) + c.rms_norm_eps).sqrt() * p(name);
  }
  // The rotary frequency of pair i, from the published formulas, in double.
  double inv_freq(int64_t i) const {
    double f = 1.0 / std::pow(c.rope_theta, double(2 * i) / double(c.head_dim));
    const RopeScaling& s = c.rope_scaling;
    if (s.type == RopeType::kLinear) return f / s.factor;
    if (s.type != RopeType::kLlama3) return f;
    const double old_len = double(s.original_max_position_embeddings), wavelen = 2 * M_PI / f;
    if (wavelen < old_len / s.high_freq_factor) return f;
    if (wavelen > old_len / s.low_freq_factor) return f / s.factor;
    const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    return (1 - smooth) * f / s.factor + smooth * f;
  }
  // Rotates pairs (i, i + D/2) of every head of every token by position * inv_freq(i).
  at::Tensor rope(at::Tensor x /*[T, n, D]*/, const std::vector<int64_t>& pos) const {
    x = x.contiguous().clone();
    auto a = x.accessor<double, 3>();
    const int64_t half = c.head_dim / 2;
    for (int64_t t = 0; t < x.size(0); ++t)
      for (int64_t h = 0; h < x.size(1); ++h)
        for (int64_t i = 0; i < half; ++i) {
          const double angle = double(pos[size_t(t)]) * inv_freq(i);
          const double x0 = a[t][h][i], x1 = a[t][h][i + half];
          a[t][h][i] = x0 * std::cos(angle) - x1 * std::sin(angle);
          a[t][h][i + half] = x1 * std::cos(angle) + x0 * std::sin(angle);
        }
    return x;
  }
  // Causal attention, one head and one query at a time; query head h reads kv head h / group.
  at::Tensor attend(const at::Tensor& q /*[T, H, D]*/, const at::Tensor& k, const at::Tensor& v) const {
    const int64_t T = q.size(0), H = q.size(1), D = q.size(2), group = H / k.size(1);
    at::Tensor out = at::zeros({T, H, D}, at::kDouble);
    auto qa = q.accessor<double, 3>(), ka = k.accessor<double, 3>(), va = v.accessor<double, 3>();
    auto oa = out.accessor<double, 3>();
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> s(size_t(t + 1));
        double top = -1e300, sum = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += qa[t][h][d] * ka[j][h / group][d];
          s[size_t(j)] = dot / std::sqrt(double(D));
          top = std::max(top, s[size_t(j)]);
        }
        for (double& e : s) sum += (e = std::exp(e - top));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t d = 0; d < D; ++d) oa[t][h][d] += s[size_t(j)] / sum * va[j][h / group][d];
      }
    return out;
  }
  // Final hidden states [T, C] of one sequence.
  at::Tensor hidden(const std::vector<int64_t>& ids, const std::vector<int64_t>& pos) const {
    const int64_t T = int64_t(ids.size()), H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim;
    at::Tensor h = p("model.embed_tokens.weight").index_select(0, at::tensor(ids, at::kLong));
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string pre = "model.layers." + std::to_string(l) + ".";
      at::Tensor x = rms(h, pre + "input_layernorm.weight");
      at::Tensor q = linear(x, pre + "self_attn.q_proj").view({T, H, D});
      at::Tensor k = linear(x, pre + "self_attn.k_proj").view({T, KV, D});
      at::Tensor v = linear(x, pre + "self_attn.v_proj").view({T, KV, D}).contiguous();
      if (c.qk_norm) {
        q = rms(q, pre + "self_attn.q_norm.weight");
        k = rms(k, pre + "self_attn.k_norm.weight");
      }
      at::Tensor a = attend(rope(q, pos), rope(k, pos), v);
      h = h + linear(a.view({T, H * D}), pre + "self_attn.o_proj");
      x = rms(h, pre + "post_attention_layernorm.weight");
      at::Tensor gate = linear(x, pre + "mlp.gate_proj");
      h = h + linear(gate / (1 + (-gate).exp()) * linear(x, pre + "mlp.up_proj"), pre + "mlp.down_proj");
    }
    return rms(h, "model.norm.weight");
  }
};

std::vector<int64_t> random_ids(std::mt19937& rng, int64_t n, int64_t vocab) {
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = pick(rng);
  return ids;
}

std::vector<int64_t> iota(int64_t n, int64_t start = 0) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = start + i;
  return v;
}

at::Tensor single_forward(const DecoderLM& m, const std::vector<int64_t>& ids) {
  return m.forward_padded(at::tensor(ids, at::kLong).unsqueeze(0)).squeeze(0);  // [T, C]
}

DecoderLM make_model(const std::string& arch, uint64_t seed) {
  DecoderLM m(tiny_config(arch));
  m.init_weights(seed);
  return m;
}

// Runs `seqs` through forward_cached over a paged cache with scattered blocks. schedule[step][s]
// is how many tokens of sequence s that step feeds (0 = idle). Returns each sequence's [len, C].
std::vector<at::Tensor> run_cached(const DecoderLM& m, const std::vector<std::vector<int64_t>>& seqs,
                                   const std::vector<std::vector<int64_t>>& schedule, int64_t block_size,
                                   AttentionOptions options = {}) {
  const size_t S = seqs.size();
  std::vector<int64_t> blocks_needed(S);
  int64_t total_blocks = 2;  // spares that no sequence uses
  int64_t max_blocks = 1;
  for (size_t s = 0; s < S; ++s) {
    blocks_needed[s] = (int64_t(seqs[s].size()) + block_size - 1) / block_size;
    total_blocks += blocks_needed[s];
    max_blocks = std::max(max_blocks, blocks_needed[s]);
  }
  at::Tensor perm = at::randperm(total_blocks, at::kLong);
  at::Tensor tables = at::zeros({int64_t(S), max_blocks}, at::kLong);
  int64_t next = 0;
  for (size_t s = 0; s < S; ++s)
    for (int64_t b = 0; b < blocks_needed[s]; ++b) tables[int64_t(s)][b] = perm[next++].item<int64_t>();
  PagedKvCache cache(m.config(), total_blocks, block_size, m.options().dtype, c10::Device(c10::kCPU));
  std::vector<int64_t> done(S, 0);
  std::vector<std::vector<at::Tensor>> pieces(S);
  for (const auto& step : schedule) {
    std::vector<int64_t> ids, pos, slots, cu{0}, lens;
    for (size_t s = 0; s < S; ++s) {
      REQUIRE(done[s] + step[s] <= int64_t(seqs[s].size()));
      for (int64_t p = done[s]; p < done[s] + step[s]; ++p) {
        ids.push_back(seqs[s][size_t(p)]);
        pos.push_back(p);
        slots.push_back(tables[int64_t(s)][p / block_size].item<int64_t>() * block_size + p % block_size);
      }
      done[s] += step[s];
      cu.push_back(cu.back() + step[s]);
      lens.push_back(done[s]);
    }
    PagedAttention backend(
        cache, {at::tensor(slots, at::kLong), at::tensor(cu, at::kLong), at::tensor(lens, at::kLong), tables}, options);
    at::Tensor h = m.forward_cached(at::tensor(ids, at::kLong), at::tensor(pos, at::kLong), backend);
    for (size_t s = 0; s < S; ++s)
      if (step[s] > 0) pieces[s].push_back(h.narrow(0, cu[s], step[s]));
  }
  std::vector<at::Tensor> out;
  for (size_t s = 0; s < S; ++s) {
    REQUIRE(done[s] == int64_t(seqs[s].size()));
    out.push_back(at::cat(pieces[s], 0));
  }
  return out;
}

}  // namespace

TEST_CASE("decoder: each family matches the fp64 loop reference", "[model][decoder]") {
  at::NoGradGuard no_grad;
  std::mt19937 rng(11);
  for (const char* arch : {"Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM", "Qwen2ForTokenClassification",
                           "LlamaForSequenceClassification"}) {
    INFO(arch);
    DecoderLM m = make_model(arch, 5);
    Reference ref{m, m.config()};
    const int64_t T = 13;
    std::vector<int64_t> ids = random_ids(rng, T, m.config().vocab_size), pos = iota(T, 40);  // positions 40..52
    at::Tensor hidden =
        m.forward_padded(at::tensor(ids, at::kLong).unsqueeze(0), {}, at::tensor(pos, at::kLong).unsqueeze(0))
            .squeeze(0);
    at::Tensor expected = ref.hidden(ids, pos);
    check_close(hidden, expected, 1e-4, 1e-4, "final hidden states");
    if (m.config().head == ModelHead::kCausalLM) {
      at::Tensor head = m.config().tie_word_embeddings ? ref.p("model.embed_tokens.weight") : ref.p("lm_head.weight");
      check_close(m.logits(hidden), expected.matmul(head.t()), 1e-4, 1e-4, "logits");
    } else {
      at::Tensor s = expected.matmul(ref.p("score.weight").t());
      if (m.config().score_bias) s = s + ref.p("score.bias");
      check_close(m.scores(hidden), s, 1e-4, 1e-4, "scores");
      CHECK(m.scores(hidden).size(-1) == 1);
    }
  }
}

TEST_CASE("decoder: rope frequencies follow each scaling type", "[model][decoder]") {
  for (const char* arch : kCausalArchs) {
    ModelConfig c = tiny_config(arch);
    DecoderLM m(c);
    Reference ref{m, c};
    at::Tensor inv = rope_inv_freq(c, c10::Device(c10::kCPU));
    REQUIRE(inv.size(0) == c.head_dim / 2);
    std::vector<double> expected;
    for (int64_t i = 0; i < c.head_dim / 2; ++i) expected.push_back(ref.inv_freq(i));
    check_close(inv, at::tensor(expected, at::kDouble), 0, 1e-6, arch);
  }
  // The Llama tiny config puts its four frequencies in all three llama3 bands.
  ModelConfig c = tiny_config("LlamaForCausalLM");
  ModelConfig plain = c;
  plain.rope_scaling = RopeScaling{};
  at::Tensor ratio = rope_inv_freq(plain, c10::Device(c10::kCPU)) / rope_inv_freq(c, c10::Device(c10::kCPU));
  CHECK(ratio[0].item<double>() == Approx(1.0));
  CHECK(ratio[1].item<double>() > 1.5);
  CHECK(ratio[1].item<double>() < 7.5);
  CHECK(ratio[2].item<double>() == Approx(8.0));
  CHECK(ratio[3].item<double>() == Approx(8.0));
  c.rope_scaling = RopeScaling{RopeType::kLinear, 4.0};
  check_close(rope_inv_freq(c, c10::Device(c10::kCPU)) * 4.0, rope_inv_freq(plain, c10::Device(c10::kCPU)), 0, 1e-6,
              "linear");
}

TEST_CASE("decoder: prefill + decode over a paged KV cache equals the full forward", "[model][decoder][kv]") {
  at::NoGradGuard no_grad;
  std::mt19937 rng(3);
  for (const char* arch : kCausalArchs) {
    INFO(arch);
    DecoderLM m = make_model(arch, 9);
    const int64_t V = m.config().vocab_size;
    std::vector<std::vector<int64_t>> seqs = {random_ids(rng, 7, V), random_ids(rng, 1, V), random_ids(rng, 11, V)};
    // Step 1: prefill chunks of 4, 1, 5; step 2: chunked prefill 2, -, 3 (sequence 1 idle);
    // then one decode token per unfinished sequence per step.
    std::vector<std::vector<int64_t>> schedule = {{4, 1, 5}, {2, 0, 3}, {1, 0, 1}, {0, 0, 1}, {0, 0, 1}};
    for (int64_t block_size : {1, 3, 16}) {
      INFO("block_size " << block_size);
      auto cached = run_cached(m, seqs, schedule, block_size);
      for (size_t s = 0; s < seqs.size(); ++s) {
        at::Tensor full = single_forward(m, seqs[s]);
        check_close(cached[s], full, 2e-5, 2e-5, "sequence " + std::to_string(s));
        check_close(m.logits(cached[s]), m.logits(full), 2e-5, 2e-5, "logits of sequence " + std::to_string(s));
      }
    }
  }
}

TEST_CASE("decoder: cached-prefix steps of uneven lengths, padded into shared calls, equal the full forward",
          "[model][decoder][kv]") {
  at::NoGradGuard no_grad;
  std::mt19937 rng(4);
  DecoderLM m = make_model("Qwen2ForCausalLM", 9);
  const int64_t V = m.config().vocab_size;
  std::vector<std::vector<int64_t>> seqs = {random_ids(rng, 7, V), random_ids(rng, 9, V), random_ids(rng, 11, V),
                                            random_ids(rng, 6, V)};
  // After the first step every sequence has a cached prefix and a different count of new tokens
  // (resumed turns of unequal tool replies, decode tokens among them).
  std::vector<std::vector<int64_t>> schedule = {{3, 2, 4, 6}, {2, 4, 1, 0}, {1, 1, 3, 0}, {1, 2, 3, 0}};
  // One chunk for all, or a bound so small that every sequence is its own call.
  for (long long pairs : {1LL << 21, 1LL}) {
    INFO("cached_chunk_pairs " << pairs);
    AttentionOptions options;
    options.cached_chunk_pairs = pairs;
    auto cached = run_cached(m, seqs, schedule, 3, options);
    for (size_t s = 0; s < seqs.size(); ++s)
      check_close(cached[s], single_forward(m, seqs[s]), 2e-5, 2e-5, "sequence " + std::to_string(s));
  }
}

TEST_CASE("decoder: a padded batch equals per-sequence forwards", "[model][decoder]") {
  at::NoGradGuard no_grad;
  std::mt19937 rng(5);
  for (const char* arch : kCausalArchs) {
    DecoderLM m = make_model(arch, 2);
    const int64_t V = m.config().vocab_size;
    std::vector<std::vector<int64_t>> seqs = {random_ids(rng, 5, V), random_ids(rng, 9, V), random_ids(rng, 1, V)};
    const int64_t B = 3, T = 9;
    for (bool left : {false, true}) {
      INFO(arch << (left ? " left padding" : " right padding"));
      at::Tensor ids = at::zeros({B, T}, at::kLong) + 3, mask = at::zeros({B, T}, at::kLong);
      for (int64_t b = 0; b < B; ++b) {
        const int64_t n = int64_t(seqs[size_t(b)].size()), start = left ? T - n : 0;
        for (int64_t t = 0; t < n; ++t) {
          ids[b][start + t] = seqs[size_t(b)][size_t(t)];
          mask[b][start + t] = 1;
        }
      }
      at::Tensor hidden = m.forward_padded(ids, mask);
      CHECK(hidden.isfinite().all().item<bool>());  // padding rows too
      for (int64_t b = 0; b < B; ++b) {
        const int64_t n = int64_t(seqs[size_t(b)].size()), start = left ? T - n : 0;
        check_close(hidden[b].narrow(0, start, n), single_forward(m, seqs[size_t(b)]), 2e-5, 2e-5,
                    "row " + std::to_string(b));
      }
    }
  }
}

TEST_CASE("decoder: packed sequences equal separate forwards", "[model][decoder]") {
  at::NoGradGuard no_grad;
  std::mt19937 rng(8);
  for (const char* arch : kCausalArchs) {
    INFO(arch);
    DecoderLM m = make_model(arch, 4);
    const int64_t V = m.config().vocab_size;
    // Runs of equal lengths (6, 6, -, 6 and 1, 1: one attention batch each) beside lone ones.
    std::vector<std::vector<int64_t>> seqs = {random_ids(rng, 6, V),  random_ids(rng, 6, V), {},
                                              random_ids(rng, 6, V),  random_ids(rng, 1, V), random_ids(rng, 1, V),
                                              random_ids(rng, 10, V), random_ids(rng, 3, V)};
    std::vector<int64_t> flat, pos, cu{0};
    for (const auto& s : seqs) {
      flat.insert(flat.end(), s.begin(), s.end());
      for (int64_t t = 0; t < int64_t(s.size()); ++t) pos.push_back(t);
      cu.push_back(int64_t(flat.size()));
    }
    at::Tensor packed =
        m.forward_packed(at::tensor(flat, at::kLong), at::tensor(pos, at::kLong), at::tensor(cu, at::kLong));
    REQUIRE(packed.size(0) == int64_t(flat.size()));
    for (size_t s = 0; s < seqs.size(); ++s) {
      if (seqs[s].empty()) continue;
      check_close(packed.narrow(0, cu[s], cu[s + 1] - cu[s]), single_forward(m, seqs[s]), 2e-5, 2e-5,
                  "segment " + std::to_string(s));
    }
  }
  DecoderLM m = make_model("Qwen2ForCausalLM", 1);
  CHECK_THROWS_WITH(m.forward_packed(at::tensor(std::vector<int64_t>{1, 2, 3}, at::kLong),
                                     at::tensor(std::vector<int64_t>{0, 1, 2}, at::kLong),
                                     at::tensor(std::vector<int64_t>{0, 2}, at::kLong)),
                    Catch::Matchers::Contains("cu_seqlens must run from 0 to N = 3"));
}

TEST_CASE("decoder: gradients match finite differences (fp64)", "[model][decoder][grad]") {
  ModelOptions opts;
  opts.dtype = at::kDouble;
  DecoderLM m(tiny_config("Qwen3ForCausalLM"), opts);
  {
    DecoderLM init(tiny_config("Qwen3ForCausalLM"));
    init.init_weights(6);
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < m.named_parameters().size(); ++i)
      m.named_parameters()[i].second.copy_(init.named_parameters()[i].second);
  }
  m.set_requires_grad(true);
  at::Tensor ids = at::tensor(std::vector<int64_t>{3, 9, 1, 30, 7, 2, 2, 5}, at::kLong).view({2, 4});
  at::Tensor mask = at::tensor(std::vector<int64_t>{1, 1, 1, 1, 0, 1, 1, 1}, at::kLong).view({2, 4});
  at::Tensor w = at::randn({2, 4, m.config().vocab_size}, at::kDouble);
  auto loss = [&] { return (m.logits(m.forward_padded(ids, mask)) * w * mask.unsqueeze(-1)).sum(); };
  loss().backward();
  for (const auto& [name, p] : m.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().isfinite().all().item<bool>());
  }
  const std::pair<const char*, int64_t> probes[] = {{"model.embed_tokens.weight", 9 * 24 + 5},
                                                    {"model.layers.0.self_attn.q_norm.weight", 3},
                                                    {"model.layers.1.self_attn.k_proj.weight", 17},
                                                    {"model.layers.0.mlp.down_proj.weight", 100},
                                                    {"model.norm.weight", 11}};
  at::NoGradGuard no_grad;
  for (const auto& [name, index] : probes) {
    INFO(name << "[" << index << "]");
    at::Tensor flat = m.parameter(name).view({-1});
    const double analytic = m.parameter(name).grad().view({-1})[index].item<double>(), eps = 1e-6;
    const double saved = flat[index].item<double>();
    flat[index].fill_(saved + eps);
    const double up = loss().item<double>();
    flat[index].fill_(saved - eps);
    const double down = loss().item<double>();
    flat[index].fill_(saved);
    CHECK(analytic == Approx((up - down) / (2 * eps)).epsilon(1e-6).margin(1e-8));
  }
}

// fp16 is left to the GPU parity script: LibTorch 1.13 has no fp16 matmul on the CPU.
TEST_CASE("decoder: bf16 stays close to fp32; value heads pool the last token", "[model][decoder]") {
  at::NoGradGuard no_grad;
  DecoderLM m = make_model("LlamaForCausalLM", 12);
  at::Tensor ids = at::tensor(std::vector<int64_t>{4, 8, 15, 16, 23, 36, 1, 2}, at::kLong).view({2, 4});
  at::Tensor mask = at::tensor(std::vector<int64_t>{1, 1, 1, 1, 1, 1, 0, 0}, at::kLong).view({2, 4});
  at::Tensor ref = m.logits(m.forward_padded(ids, mask)) * mask.unsqueeze(-1);
  for (at::ScalarType dtype : {at::kBFloat16}) {
    DecoderLM low = make_model("LlamaForCausalLM", 12);
    low.to(dtype, c10::Device(c10::kCPU));
    CHECK(low.parameter("model.norm.weight").scalar_type() == dtype);
    at::Tensor out = low.logits(low.forward_padded(ids, mask));
    CHECK(out.scalar_type() == dtype);
    const double rel = ((out.to(at::kFloat) * mask.unsqueeze(-1) - ref).norm() / ref.norm()).item<double>();
    INFO(c10::toString(dtype) << " relative error " << rel);
    CHECK(rel < 0.05);
  }
  DecoderLM rm = make_model("LlamaForSequenceClassification", 2);
  at::Tensor scores = rm.scores(rm.forward_padded(ids, mask));  // [2, 4, 1]
  at::Tensor pooled = last_token(scores, mask);                 // [2, 1]
  CHECK(pooled[0][0].item<float>() == scores[0][3][0].item<float>());
  CHECK(pooled[1][0].item<float>() == scores[1][1][0].item<float>());
}

// fuse_projections (the rollout engine's layout): q/k/v and gate/up become row views of one
// buffer each. The fused model must compute what the unfused one computes, writes through a
// parameter must reach the buffer the fused GEMM reads, and to() must give back plain tensors.
TEST_CASE("decoder: fused projections are views of one buffer and change no result", "[model][decoder]") {
  at::NoGradGuard no_grad;
  std::mt19937 rng(21);
  for (const char* arch : kCausalArchs) {
    INFO(arch);
    DecoderLM plain = make_model(arch, 9), fused = make_model(arch, 9);
    fused.fuse_projections();
    const bool bias = fused.config().qkv_bias, mlp_bias = fused.config().mlp_bias;
    for (int64_t l = 0; l < fused.config().num_hidden_layers; ++l) {
      const std::string a = "model.layers." + std::to_string(l) + ".self_attn.",
                        f = "model.layers." + std::to_string(l) + ".mlp.";
      for (const char* kind : {"weight", "bias"}) {
        const bool has = std::string(kind) == "weight" || bias;
        const std::string q = a + "q_proj." + kind, k = a + "k_proj." + kind, v = a + "v_proj." + kind;
        CHECK(fused.is_fused(q) == has);
        if (!has) continue;
        // One buffer: k starts where q ends, v where k ends.
        CHECK(static_cast<const char*>(fused.parameter(k).data_ptr()) ==
              static_cast<const char*>(fused.parameter(q).data_ptr()) + fused.parameter(q).nbytes());
        CHECK(static_cast<const char*>(fused.parameter(v).data_ptr()) ==
              static_cast<const char*>(fused.parameter(k).data_ptr()) + fused.parameter(k).nbytes());
        for (const std::string& n : {q, k, v}) {
          CHECK(fused.parameter(n).is_contiguous());
          CHECK(fused.parameter(n).equal(plain.parameter(n)));
        }
      }
      const bool has_mlp_bias = mlp_bias;
      CHECK(fused.is_fused(f + "gate_proj.weight"));
      CHECK(fused.is_fused(f + "up_proj.bias") == has_mlp_bias);
      CHECK(static_cast<const char*>(fused.parameter(f + "up_proj.weight").data_ptr()) ==
            static_cast<const char*>(fused.parameter(f + "gate_proj.weight").data_ptr()) +
                fused.parameter(f + "gate_proj.weight").nbytes());
      CHECK_FALSE(fused.is_fused(a + "o_proj.weight"));
      CHECK_FALSE(fused.is_fused(f + "down_proj.weight"));
    }
    const int64_t V = fused.config().vocab_size;
    auto compare = [&](const std::string& what) {
      std::vector<int64_t> ids = random_ids(rng, 9, V);
      check_close(single_forward(fused, ids), single_forward(plain, ids), 1e-5, 1e-5, what + ": padded forward");
      std::vector<std::vector<int64_t>> seqs = {random_ids(rng, 5, V), random_ids(rng, 3, V)};
      const std::vector<std::vector<int64_t>> schedule = {{3, 3}, {1, 0}, {1, 0}};
      auto a = run_cached(fused, seqs, schedule, 2), b = run_cached(plain, seqs, schedule, 2);
      for (size_t s = 0; s < seqs.size(); ++s) check_close(a[s], b[s], 1e-5, 1e-5, what + ": cached forward");
    };
    compare("as loaded");
    // New values through the parameters (as RolloutEngine::update_weights copies them) reach the
    // fused GEMMs: the two models still agree, and differ from before.
    const std::vector<int64_t> probe = random_ids(rng, 6, V);
    const at::Tensor before = single_forward(fused, probe);
    for (const char* name : {"model.layers.1.self_attn.k_proj.weight", "model.layers.0.mlp.up_proj.weight"}) {
      const at::Tensor fresh = at::randn(plain.parameter(name).sizes()) * 0.3;
      const_cast<at::Tensor&>(plain.parameter(name)).copy_(fresh);
      const_cast<at::Tensor&>(fused.parameter(name)).copy_(fresh);
    }
    CHECK((single_forward(fused, probe) - before).abs().max().item<double>() > 1e-3);
    compare("after writes");
    // to() turns the views into tensors of their own.
    fused.to(at::kDouble, c10::Device(c10::kCPU));
    CHECK_FALSE(fused.is_fused("model.layers.0.self_attn.q_proj.weight"));
    CHECK(static_cast<const char*>(fused.parameter("model.layers.0.self_attn.k_proj.weight").data_ptr()) !=
          static_cast<const char*>(fused.parameter("model.layers.0.self_attn.q_proj.weight").data_ptr()) +
              fused.parameter("model.layers.0.self_attn.q_proj.weight").nbytes());
    plain.to(at::kDouble, c10::Device(c10::kCPU));
    check_close(single_forward(fused, probe), single_forward(plain, probe), 1e-12, 1e-12, "fp64 after to()");
  }
}

namespace {
// A LayerKernels whose only offer is add_rms_norm, done with LibTorch's ops but writing the sum
// into `residual` in place (as a plugin's kernel does), and declining where autograd records.
struct InPlaceAddNorm : LayerKernels {
  mutable int64_t calls = 0;
  std::tuple<at::Tensor, at::Tensor, at::Tensor> rotate(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                        const at::Tensor&, const at::Tensor&) const override {
    return {};
  }
  at::Tensor silu_mul(const at::Tensor&, const at::Tensor&) const override { return {}; }
  std::pair<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
                                                 double eps) const override {
    if (at::GradMode::is_enabled() && (x.requires_grad() || residual.requires_grad() || weight.requires_grad()))
      return {};
    ++calls;
    residual.add_(x);
    return {residual, rms_norm(residual, weight, eps)};
  }
};
}  // namespace

// The residual adds ride to the next RMSNorm (DecoderLM::run's `pending`) and a LayerKernels
// may fuse them, writing into the residual. Without autograd every add goes through it (two a
// layer) and the result is unchanged; with gradient checkpointing the layer's first pass runs
// without autograd, and its input, saved for the recomputation, must not be written: the
// gradients must equal those of a model without the kernels.
TEST_CASE("decoder: fused residual adds change no result and never write a checkpointed input",
          "[model][decoder][grad]") {
  std::mt19937 rng(8);
  for (const char* arch : kCausalArchs) {
    INFO(arch);
    const auto kernels = std::make_shared<InPlaceAddNorm>();
    DecoderLM m = make_model(arch, 4);
    const int64_t layers = m.config().num_hidden_layers;
    const at::Tensor ids = at::tensor(random_ids(rng, 10, m.config().vocab_size), at::kLong).view({2, 5});
    {
      at::NoGradGuard no_grad;
      const at::Tensor want = m.forward_padded(ids);
      const at::Tensor got = m.forward_padded(ids, {}, {}, kernels);
      CHECK(kernels->calls == 2 * layers);
      check_close(got, want, 0, 0, "no-grad forward with fused adds");
    }
    m.set_requires_grad(true);
    m.set_gradient_checkpointing(true);
    const at::Tensor w = at::randn({2, 5, m.config().hidden_size});
    auto grads = [&](std::shared_ptr<const LayerKernels> k) {
      for (const auto& [name, p] : m.named_parameters()) p.mutable_grad() = at::Tensor();
      (m.forward_padded(ids, {}, {}, std::move(k)) * w).sum().backward();
      std::vector<at::Tensor> out;
      for (const auto& [name, p] : m.named_parameters())
        out.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
      return out;
    };
    const std::vector<at::Tensor> want = grads(nullptr);
    const std::vector<at::Tensor> got = grads(kernels);
    for (size_t i = 0; i < want.size(); ++i) {
      const std::string& name = m.named_parameters()[i].first;
      INFO(name);
      REQUIRE(got[i].defined() == want[i].defined());  // the LM head has none: forward_padded stops before it
      if (want[i].defined()) check_close(got[i], want[i], 1e-6, 1e-5, name);
    }
  }
}

// A model being trained on an accelerator computes q/k/v as one GEMM (ForwardOptions'
// training_projections forces it on here, on the CPU): for every architecture (Qwen3's q/k norms read the strided
// slices) the forward and every parameter's gradient equal those of one GEMM per projection.
TEST_CASE("decoder: fused training projections give the per-projection forward and gradients",
          "[model][decoder][grad]") {
  std::mt19937 rng(12);
  for (const char* arch : kCausalArchs) {
    INFO(arch);
    DecoderLM m = make_model(arch, 5);
    m.set_requires_grad(true);
    const at::Tensor ids = at::tensor(random_ids(rng, 12, m.config().vocab_size), at::kLong).view({2, 6});
    const at::Tensor w = at::randn({2, 6, m.config().hidden_size});
    std::vector<at::Tensor> grads[2];
    at::Tensor outs[2];
    for (int fused = 0; fused < 2; ++fused) {
      ForwardOptions forward;
      forward.training_projections = fused ? TrainingProjections::kFused : TrainingProjections::kSplit;
      m.set_forward_options(forward);
      for (const auto& [name, p] : m.named_parameters()) p.mutable_grad() = at::Tensor();
      outs[fused] = m.forward_padded(ids);
      (outs[fused] * w).sum().backward();
      for (const auto& [name, p] : m.named_parameters())
        grads[fused].push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
    }
    check_close(outs[1], outs[0], 1e-5, 1e-5, "hidden states");
    for (size_t i = 0; i < grads[0].size(); ++i) {
      const std::string& name = m.named_parameters()[i].first;
      INFO(name);
      REQUIRE(grads[1][i].defined() == grads[0][i].defined());
      if (grads[0][i].defined())
        check_close(grads[1][i], grads[0][i], 1e-5 * grads[0][i].abs().max().item<double>(), 1e-4, name);
    }
  }
}
