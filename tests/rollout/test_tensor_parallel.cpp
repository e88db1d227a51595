// Tensor-parallel models and engines on cpu_ref's Gloo communicator, ranks as threads: each
// rank's slices against the whole weights; an fp64 model split over 2 and 4 ranks against the
// whole model's logits; engines at TP 2 and 4 against the TP 1 engine (greedy tokens, sampled
// tokens, log-probs, preemption by a tiny pool), KV heads split and replicated; whole weights
// given to a split engine; layouts that cannot split refused.
#include <verlpp/model/tensor_parallel.hpp>
#include <verlpp/rollout/tensor_parallel.hpp>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>

#include "../group_ranks.hpp"
#include "engine_fixture.hpp"

#include <catch2/catch.hpp>

using namespace verlpp;
using namespace verlpp::rollout;
using verlpp::test::prompt_of;
using verlpp::test::tiny_config;

#if VERLPP_CPU_REF_HAS_GLOO

namespace {

// The tiny model (4 heads, 2 KV heads, tied embedding, q/k/v biases), or a variant that uses
// every other split path: an untied LM head over a vocabulary no rank count divides, o_proj and
// MLP biases (added once, after the sum), Qwen3's per-head q/k norms. Biases drawn non-zero.
model::DecoderLM split_test_model(uint64_t seed, bool variant, at::ScalarType dtype) {
  model::ModelConfig c = tiny_config();
  if (variant) {
    c.tie_word_embeddings = false;
    c.vocab_size = 381;
    c.o_bias = c.mlp_bias = c.qk_norm = true;
  }
  model::DecoderLM m(c);
  m.init_weights(seed);
  at::NoGradGuard no_grad;
  at::manual_seed(seed);
  for (const auto& [name, p] : m.named_parameters())
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) p.copy_(at::randn(p.sizes()) * 0.1);
  m.to(dtype, c10::Device(c10::kCPU));
  return m;
}

SamplingParams greedy(int64_t max_new) {
  SamplingParams p;
  p.temperature = 0;
  p.max_new_tokens = max_new;
  p.ignore_eos = true;
  return p;
}

std::vector<GenerateRequest> requests(const SamplingParams& p) {
  std::vector<GenerateRequest> reqs;
  for (int64_t i = 0; i < 5; ++i) reqs.push_back({prompt_of(4 + 3 * i, i), p});
  return reqs;
}

// generate() on a TP-size engine over `whole` (1: no group), per rank.
std::vector<std::vector<GenerateOutput>> generate_split(const model::DecoderLM& whole, int32_t size,
                                                        const std::vector<GenerateRequest>& reqs,
                                                        const EngineOptions& options,
                                                        std::vector<int64_t>* preemptions) {
  std::vector<std::vector<GenerateOutput>> out(static_cast<size_t>(size));
  if (preemptions != nullptr) preemptions->assign(static_cast<size_t>(size), 0);
  if (size == 1) {
    RolloutEngine engine(whole, options);
    out[0] = engine.generate(reqs);
    if (preemptions != nullptr) (*preemptions)[0] = engine.last_stats().num_preemptions;
    return out;
  }
  test::run_group_ranks(size, [&](const hw::ProcessGroup& group) {
    RolloutEngine engine(tensor_parallel_engine_model(whole, group), options);
    out[size_t(group.rank())] = engine.generate(reqs);
    if (preemptions != nullptr) (*preemptions)[size_t(group.rank())] = engine.last_stats().num_preemptions;
  });
  return out;
}

double worst_logprob_difference(const std::vector<GenerateOutput>& a, const std::vector<GenerateOutput>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t t = 0; t < std::min(a[i].logprobs.size(), b[i].logprobs.size()); ++t)
      worst = std::max(worst, std::abs(double(a[i].logprobs[t]) - double(b[i].logprobs[t])));
  return worst;
}

}  // namespace

// Concatenated over the ranks (rows or columns as each parameter splits), the slices are the
// whole tensor bit for bit (less the last rank's vocabulary padding, which is zeros); whole
// tensors are the same on every rank; with KV heads replicated (4 ranks, 2 KV heads) each rank
// holds the head its query heads use (query head h uses KV head h / (H / KV)).
TEST_CASE("tensor parallel: each rank's slices are the parts of the whole weights, bit for bit", "[rollout][tp]") {
  for (const bool variant : {false, true}) {
    const model::DecoderLM whole = split_test_model(3, variant, at::kFloat);
    const model::ModelConfig& c = whole.config();
    for (const int64_t size : {1, 2, 4}) {
      INFO((variant ? "variant" : "tiny") << ", " << size << " ranks");
      const model::TensorParallelLayout layout = model::tensor_parallel_layout(c, size);
      CHECK(layout.kv_replicated == (size > c.num_key_value_heads));
      for (const auto& [name, tensor] : whole.named_parameters()) {
        INFO(name);
        std::vector<at::Tensor> parts;
        for (int64_t r = 0; r < size; ++r) parts.push_back(model::tensor_parallel_slice(c, layout, name, tensor, r));
        const bool columns =
            name.find("o_proj.weight") != std::string::npos || name.find("down_proj.weight") != std::string::npos;
        const bool rows = name.find("q_proj") != std::string::npos || name.find("gate_proj") != std::string::npos ||
                          name.find("up_proj") != std::string::npos || name.find("embed_tokens") != std::string::npos ||
                          name == "lm_head.weight";
        const bool kv = name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos;
        if (columns) {
          CHECK(at::cat(parts, 1).equal(tensor));
        } else if (rows) {
          const at::Tensor joined = at::cat(parts, 0);
          CHECK(joined.narrow(0, 0, tensor.size(0)).equal(tensor));
          CHECK(joined.narrow(0, tensor.size(0), joined.size(0) - tensor.size(0)).eq(0).all().item<bool>());
        } else if (kv && layout.kv_replicated) {
          const int64_t D = c.head_dim, per_kv = c.num_attention_heads / c.num_key_value_heads;
          for (int64_t r = 0; r < size; ++r) {
            const int64_t head = (r * layout.heads) / per_kv;
            CHECK(parts[size_t(r)].equal(tensor.narrow(0, head * D, D)));
          }
        } else if (kv) {
          CHECK(at::cat(parts, 0).equal(tensor));
        } else {
          for (const at::Tensor& p : parts) CHECK(p.equal(tensor));
        }
      }
    }
  }
}

// The forward itself: an fp64 model split over 2 and 4 ranks (KV heads split, then replicated)
// gives the whole model's logits to 1e-9 (the sums over ranks round differently, ~1e-15), with
// the whole vocabulary on every rank, bit-identical among the ranks.
TEST_CASE("tensor parallel: an fp64 model split over 2 and 4 ranks gives the whole model's logits", "[rollout][tp]") {
  for (const bool variant : {false, true}) {
    const model::DecoderLM whole = split_test_model(7, variant, at::kDouble);
    const at::Tensor ids = at::arange(40, at::TensorOptions().dtype(at::kLong)).mul_(7).remainder_(340).view({2, 20});
    at::Tensor expected;
    {
      at::NoGradGuard no_grad;
      expected = whole.logits(whole.forward_padded(ids));
    }
    for (const int32_t size : {2, 4}) {
      std::vector<at::Tensor> got(static_cast<size_t>(size));
      test::run_group_ranks(size, [&](const hw::ProcessGroup& group) {
        at::NoGradGuard no_grad;
        const model::DecoderLM part = tensor_parallel_engine_model(whole, group);
        got[size_t(group.rank())] = part.logits(part.forward_padded(ids));
      });
      INFO((variant ? "variant" : "tiny") << ", " << size << " ranks");
      REQUIRE(got[0].sizes() == expected.sizes());
      const double worst = got[0].sub(expected).abs().max().item<double>();
      INFO("worst |split - whole| logit = " << worst);
      CHECK(worst < 1e-9);
      for (int32_t r = 1; r < size; ++r) CHECK(got[size_t(r)].equal(got[0]));
    }
  }
}

// Engines: every rank of a group returns the same outputs (tokens and log-probs bit for bit:
// they sample from the same gathered logits); greedy tokens equal the TP 1 engine's; in fp64 the
// log-probs (returned as float) equal TP 1's to float rounding. With the same seeds the sampled
// tokens equal TP 1's too: the draws are the same, and a token can differ only where a logit
// difference of ~1e-15 (fp64) moves a sampling boundary past a draw, which these runs do not
// meet; fp32 logits differ by ~1e-6 between layouts, so there only greedy tokens are compared,
// and the log-probs with the fp64 forward of the whole weights, to the engine tests' tolerance.
TEST_CASE("tensor parallel: engines at TP 2 and 4 generate what the TP 1 engine does", "[rollout][tp]") {
  SamplingParams sampled;
  sampled.temperature = 0.8;
  sampled.top_p = 0.95;
  sampled.n = 2;
  sampled.max_new_tokens = 12;
  sampled.ignore_eos = true;
  sampled.seed = 5;
  for (const bool variant : {false, true}) {
    for (const at::ScalarType dtype : {at::kDouble, at::kFloat}) {
      const model::DecoderLM whole = split_test_model(11, variant, dtype);
      for (const bool is_greedy : {true, false}) {
        if (!is_greedy && dtype != at::kDouble) continue;
        const auto reqs = requests(is_greedy ? greedy(12) : sampled);
        const auto one = generate_split(whole, 1, reqs, EngineOptions{}, nullptr)[0];
        for (const int32_t size : {2, 4}) {
          INFO((variant ? "variant" : "tiny")
               << ", " << c10::toString(dtype) << ", " << (is_greedy ? "greedy" : "sampled") << ", TP " << size);
          const auto split = generate_split(whole, size, reqs, EngineOptions{}, nullptr);
          REQUIRE(split[0].size() == one.size());
          for (size_t i = 0; i < one.size(); ++i) {
            CHECK(split[0][i].error.empty());
            CHECK(split[0][i].token_ids == one[i].token_ids);
          }
          for (int32_t r = 1; r < size; ++r)
            for (size_t i = 0; i < one.size(); ++i) {
              CHECK(split[size_t(r)][i].token_ids == split[0][i].token_ids);
              CHECK(split[size_t(r)][i].logprobs == split[0][i].logprobs);
            }
          const double worst = worst_logprob_difference(split[0], one);
          INFO("worst |TP - TP 1| log-prob = " << worst);
          if (dtype == at::kDouble) {
            CHECK(worst < 1e-6);
          } else {
            // fp32: each layout against the fp64 forward of the whole weights, to the engine
            // tests' tolerance (check_logprobs: 2.5e-5 of max(1, |log-prob|)).
            double worst_vs_fp64 = 0;
            for (const GenerateOutput& out : split[0])
              worst_vs_fp64 = std::max(worst_vs_fp64, test::worst_logprob_error(
                                                          whole, reqs[size_t(out.request_index)].prompt_ids, out, 1.0));
            INFO("worst relative |TP - fp64 whole| log-prob = " << worst_vs_fp64);
            CHECK(worst_vs_fp64 <= 2.5e-5);
          }
        }
      }
    }
  }
}

// A pool too small for the batch preempts (and recomputes) at TP 2 exactly as at TP 1: the
// ranks' schedulers see the same tokens, so they take the same decisions.
TEST_CASE("tensor parallel: preemption by a tiny pool at TP 2", "[rollout][tp]") {
  const model::DecoderLM whole = split_test_model(13, false, at::kDouble);
  EngineOptions small;
  small.block_size = 4;
  small.num_blocks = 10;
  const auto reqs = requests(greedy(14));
  std::vector<int64_t> one_preempted, split_preempted;
  const auto one = generate_split(whole, 1, reqs, small, &one_preempted)[0];
  const auto split = generate_split(whole, 2, reqs, small, &split_preempted);
  CHECK(one_preempted[0] > 0);
  CHECK(split_preempted[0] == one_preempted[0]);
  CHECK(split_preempted[1] == one_preempted[0]);
  for (size_t i = 0; i < one.size(); ++i) {
    CHECK(split[0][i].token_ids == one[i].token_ids);
    CHECK(split[1][i].token_ids == one[i].token_ids);
  }
}

// A split engine takes the whole model's weights (a trainer's, after an update): each rank keeps
// its slice, and generation follows the new weights as a TP 1 engine given them does.
TEST_CASE("tensor parallel: a split engine takes whole weights through update_weights", "[rollout][tp]") {
  const model::DecoderLM before = split_test_model(17, true, at::kDouble);
  const model::DecoderLM after = split_test_model(19, true, at::kDouble);
  const auto reqs = requests(greedy(10));
  const auto expected = generate_split(after, 1, reqs, EngineOptions{}, nullptr)[0];
  std::vector<std::vector<GenerateOutput>> got(2);
  std::vector<int64_t> copied(2);
  std::vector<std::string> refused(2);
  test::run_group_ranks(2, [&](const hw::ProcessGroup& group) {
    RolloutEngine engine(tensor_parallel_engine_model(before, group), EngineOptions{});
    engine.update_weights(after.named_parameters(), WeightSharing::kCopy);
    got[size_t(group.rank())] = engine.generate(reqs);
    try {
      engine.update_weights({{"model.layers.0.mlp.up_proj.weight", at::zeros({3, 3}, at::kDouble)}});
    } catch (const std::exception& e) {
      refused[size_t(group.rank())] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < expected.size(); ++i) CHECK(got[size_t(r)][i].token_ids == expected[i].token_ids);
    CHECK_THAT(refused[size_t(r)], Catch::Contains("model.layers.0.mlp.up_proj.weight") && Catch::Contains("[3, 3]"));
  }
}

// Layouts that cannot split are refused before any work, naming the dimension and the sizes.
TEST_CASE("tensor parallel: layouts that do not split are refused", "[rollout][tp]") {
  using Catch::Contains;
  const model::ModelConfig tiny = tiny_config();
  CHECK_THROWS_WITH(model::tensor_parallel_layout(tiny, 3), Contains("3 does not divide the 4 attention heads"));
  CHECK_THROWS_WITH(model::tensor_parallel_layout(tiny, 0), Contains("must be >= 1"));
  model::ModelConfig kv = tiny;
  kv.num_attention_heads = 12;
  kv.num_key_value_heads = 4;
  CHECK_THROWS_WITH(model::tensor_parallel_layout(kv, 6), Contains("6 and the 4 KV heads"));
  model::ModelConfig mlp = tiny;
  mlp.intermediate_size = 350;
  CHECK_THROWS_WITH(model::tensor_parallel_layout(mlp, 4), Contains("intermediate_size 350"));
  model::ModelConfig head = tiny;
  head.head = model::ModelHead::kTokenClassification;
  CHECK_THROWS_WITH(model::tensor_parallel_layout(head, 2), Contains("classification head"));
}

#endif  // VERLPP_CPU_REF_HAS_GLOO
