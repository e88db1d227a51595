// Reward models on the tiny decoder: scores equal a full recompute of the classification head on
// each row's unpadded tokens, whatever the padding and micro-batching; the token-level placement
// equals a plain loop; the Bradley–Terry step equals a full-batch AdamW step by hand and learns a
// separable preference.
#include <ATen/core/grad_mode.h>
#include <verlpp/model/model_config.hpp>
#include <verlpp/train/reward_model.hpp>
#include <verlpp/train/reward_model_trainer.hpp>

#include <ATen/ops/full.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/sqrt.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <cmath>

#include "tiny_fixture.hpp"
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;

namespace {

model::ModelConfig tiny_config() {
  return model::load_model_config(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/config.json");
}

model::DecoderLM tiny_rm(uint64_t seed = 31) {
  model::DecoderLM m(train::sequence_classification_config(tiny_config()));
  m.init_weights(seed);
  return m;
}

// The score of one unpadded sequence, recomputed: its tokens alone through the decoder (positions
// 0..n-1), then the head's dot product with the last hidden state, by hand.
double plain_score(const model::DecoderLM& m, const at::Tensor& tokens) {
  at::NoGradGuard no_grad;
  const at::Tensor hidden = m.forward_padded(tokens.unsqueeze(0)).squeeze(0);  // [n, C]
  const at::Tensor w = m.parameter("score.weight");                            // [1, C]
  return at::matmul(w, hidden.select(0, tokens.size(0) - 1)).item<double>();
}

}  // namespace

TEST_CASE("reward model: scores at the last valid token equal a full recompute", "[reward_model]") {
  const model::DecoderLM m = tiny_rm();
  CHECK(m.config().architecture == "Qwen2ForSequenceClassification");
  CHECK_FALSE(m.config().score_bias);
  const int64_t rows = 7, t = 12;
  // Left padding on some rows, right padding on others, both on one.
  data::Batch b = test::ragged_batch(
      m.config().vocab_size, rows, 5, t - 5, 3, [](int64_t r) { return r % 3; }, [](int64_t r) { return (r * 2) % 5; });
  const at::Tensor ids = b.tensor("input_ids"), mask = b.tensor("attention_mask");
  std::vector<double> expected;
  for (int64_t r = 0; r < rows; ++r) {
    const at::Tensor keep = mask[r].nonzero().squeeze(1);
    expected.push_back(plain_score(m, ids[r].index_select(0, keep)));
  }
  for (int64_t micro : {1, 3, 7}) {
    for (bool dynamic : {false, true}) {
      train::RewardModelOptions o;
      o.micro_batch_size = micro;
      o.use_dynamic_bsz = dynamic;
      o.max_token_len = 20;
      const at::Tensor scores = train::reward_model_scores(m, b, o);
      REQUIRE(scores.sizes() == std::vector<int64_t>{rows});
      CHECK(scores.scalar_type() == at::kFloat);
      double worst = 0;
      for (int64_t r = 0; r < rows; ++r) worst = std::max(worst, std::abs(scores[r].item<double>() - expected[r]));
      INFO("micro " << micro << " dynamic " << dynamic << ": worst |score diff| " << worst);
      CHECK(worst < 1e-5);
    }
  }
}

TEST_CASE("reward model: a token-classification head (verl loads reward models so) reads the last token with its bias",
          "[reward_model]") {
  model::ModelConfig c = tiny_config();
  c.head = model::ModelHead::kTokenClassification;
  c.num_labels = 1;
  c.score_bias = true;
  model::DecoderLM m(c);
  m.init_weights(41);
  {
    at::NoGradGuard no_grad;
    m.parameter("score.bias").fill_(0.75);  // a bias the recompute must add
  }
  data::Batch b = test::ragged_batch(
      c.vocab_size, 4, 3, 5, 9, [](int64_t r) { return r % 2; }, [](int64_t r) { return r; });
  const at::Tensor scores = train::reward_model_scores(m, b, {});
  for (int64_t r = 0; r < 4; ++r) {
    const at::Tensor keep = b.tensor("attention_mask")[r].nonzero().squeeze(1);
    const double expected = plain_score(m, b.tensor("input_ids")[r].index_select(0, keep)) + 0.75;
    CHECK(std::abs(scores[r].item<double>() - expected) < 1e-5);
  }
}

TEST_CASE("reward model: token-level placement at the last valid token (verl's _expand_to_token_level)",
          "[reward_model]") {
  const int64_t rows = 5, t = 9, response = 4;
  // rows: full; right-padded response; left-padded prompt; empty response; one valid response token
  const std::vector<std::pair<int64_t, int64_t>> pads = {{0, 0}, {0, 2}, {3, 1}, {1, 4}, {2, 3}};
  at::Tensor mask = at::ones({rows, t}, at::TensorOptions().dtype(at::kLong));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < pads[size_t(r)].first; ++k) mask[r][k] = 0;
    for (int64_t k = 0; k < pads[size_t(r)].second; ++k) mask[r][t - 1 - k] = 0;
  }
  const at::Tensor positions = mask.cumsum(1).sub(1).clamp_min(0);
  const at::Tensor scores = at::tensor(std::vector<float>{0.5f, -1.0f, 2.0f, 3.0f, -0.25f});
  const at::Tensor placed = train::token_level_rm_scores(mask, positions, scores, response);
  REQUIRE(placed.sizes() == std::vector<int64_t>{rows, response});
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t valid = response - pads[size_t(r)].second;  // valid response tokens
    for (int64_t j = 0; j < response; ++j) {
      const double want = (valid >= 1 && j == valid - 1) ? scores[r].item<double>() : 0.0;
      CHECK(placed[r][j].item<double>() == want);
    }
  }
}

TEST_CASE("reward model: the head must have one label", "[reward_model]") {
  const model::ModelConfig lm = tiny_config();
  CHECK_THROWS_WITH(train::check_reward_model_config(lm, "reward_model.model.path"),
                    Catch::Contains("reward_model.model.path") && Catch::Contains("without a classification head"));
  model::ModelConfig two = train::sequence_classification_config(lm);
  two.num_labels = 2;
  CHECK_THROWS_WITH(train::check_reward_model_config(two, "x"), Catch::Contains("num_labels = 2"));
  model::ModelConfig token = lm;
  token.head = model::ModelHead::kTokenClassification;
  token.num_labels = 1;
  CHECK_NOTHROW(train::check_reward_model_config(token, "x"));
}

namespace {

// Pairs of random sequences, right-padded to T; `marker` at the last valid token of chosen rows
// and `marker + 1` at rejected rows' (a preference the head can learn).
data::Batch make_pairs(int64_t vocab, int64_t pairs, int64_t t, uint64_t seed, int64_t marker) {
  at::manual_seed(seed);
  data::Batch b;
  for (const char* side : {"chosen", "rejected"}) {
    at::Tensor ids = at::randint(vocab - 2, {pairs, t}, at::TensorOptions().dtype(at::kLong));
    at::Tensor mask = at::ones({pairs, t}, at::TensorOptions().dtype(at::kLong));
    for (int64_t r = 0; r < pairs; ++r) {
      const int64_t len = t - (r * 3 + (side[0] == 'c' ? 0 : 1)) % 4;
      for (int64_t k = len; k < t; ++k) mask[r][k] = 0;
      ids[r][len - 1] = marker + (side[0] == 'c' ? 0 : 1);
    }
    const std::string s(side);
    b.set(s + "_input_ids", ids);
    b.set(s + "_attention_mask", mask);
    b.set(s + "_position_ids", mask.cumsum(1).sub(1).clamp_min(0));
  }
  return b;
}

}  // namespace

TEST_CASE("reward model trainer: a micro-batched step equals the full-batch AdamW step", "[reward_model]") {
  const double lr = 1e-3;
  model::DecoderLM m = tiny_rm();
  const data::Batch pairs = make_pairs(m.config().vocab_size, 6, 8, 5, 100);
  // Reference: the batch-mean loss on a fresh copy in one forward each side, one AdamW step by hand.
  model::DecoderLM ref = tiny_rm();
  ref.set_requires_grad(true);
  double ref_loss = 0;
  {
    at::Tensor total;
    for (int64_t i = 0; i < pairs.size(); ++i) {
      auto side = [&](const std::string& s) {
        const at::Tensor keep = pairs.tensor(s + "_attention_mask")[i].nonzero().squeeze(1);
        const at::Tensor tokens = pairs.tensor(s + "_input_ids")[i].index_select(0, keep);
        const at::Tensor hidden = ref.forward_padded(tokens.unsqueeze(0)).squeeze(0);
        return at::matmul(ref.parameter("score.weight"), hidden.select(0, tokens.size(0) - 1)).squeeze(0);
      };
      const at::Tensor margin = side("chosen").sub(side("rejected"));
      // -log sigmoid(x) = log(1 + exp(-x)), written out
      const at::Tensor loss = margin.neg().exp().add(1).log();
      total = total.defined() ? total.add(loss) : loss;
    }
    total = total.div(double(pairs.size()));
    ref_loss = total.item<double>();
    total.backward();
  }
  train::RewardModelTrainerConfig cfg;
  cfg.micro_batch_size = 4;  // 4 + 2 pairs
  cfg.optim.grad_clip = 1e9;
  cfg.optim.eps = 1e-3;
  train::RewardModelTrainer trainer(m, cfg, train::LrSchedule({lr, "constant", 0, 1, 0.0, 0.5}));
  const train::PairwiseSums before = trainer.evaluate(pairs);
  const nlohmann::json metrics = trainer.train_step(pairs);
  CHECK(std::abs(metrics["rm/loss"].get<double>() - ref_loss) < 1e-5);
  CHECK(std::abs(before.mean_loss() - ref_loss) < 1e-5);
  double worst = 0;
  size_t i = 0;
  const auto& trained = m.named_parameters();
  for (const auto& [name, p] : ref.named_parameters()) {
    at::NoGradGuard no_grad;
    const at::Tensor g = p.grad().defined() ? p.grad() : at::zeros_like(p);
    const at::Tensor expected =
        p.mul(1 - lr * cfg.optim.weight_decay).sub(g.div(at::sqrt(g.mul(g)).add(cfg.optim.eps)).mul(lr));
    worst = std::max(worst, trained[i++].second.detach().sub(expected).abs().max().item<double>());
  }
  INFO("worst |param diff| " << worst);
  CHECK(worst < lr * 1e-3);
  CHECK(trainer.steps() == 1);
  CHECK(metrics["rm/accuracy"].get<double>() == Approx(before.accuracy()));
}

TEST_CASE("reward model trainer: learns a separable preference", "[reward_model]") {
  model::DecoderLM m = tiny_rm();
  const int64_t vocab = m.config().vocab_size;
  const data::Batch train_pairs = make_pairs(vocab, 32, 8, 11, 100);
  const data::Batch held_out = make_pairs(vocab, 32, 8, 12, 100);
  train::RewardModelTrainerConfig cfg;
  cfg.micro_batch_size = 16;
  train::RewardModelTrainer trainer(m, cfg, train::LrSchedule({3e-3, "constant", 0, 1, 0.0, 0.5}));
  const train::PairwiseSums before = trainer.evaluate(held_out);
  for (int step = 0; step < 40; ++step) trainer.train_step(train_pairs);
  const train::PairwiseSums after = trainer.evaluate(held_out);
  INFO("held-out accuracy " << before.accuracy() << " -> " << after.accuracy() << ", loss " << before.mean_loss()
                            << " -> " << after.mean_loss());
  CHECK(after.accuracy() >= 0.95);
  CHECK(after.mean_loss() < before.mean_loss());
  CHECK(after.pairs == 32);
}
