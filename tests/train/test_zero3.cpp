// Sharded training (ZeRO-3) and offloaded state, on cpu_ref's Gloo communicator with ranks as
// threads: updates at ZeRO-3, and with offloaded optimizer state (AdamW on the host or streamed
// through the device) or offloaded weights at every stage, against the replicated optimizer on the
// same ranks and on one rank; what each rank holds, measured from its tensors; checkpoints moved
// between rank counts and stages; the critic; a frozen sharded reference and the unit-by-unit
// export the rollout sync uses, against the whole model.
#include <ATen/core/grad_mode.h>
#include <verlpp/hw/tensor_storage.hpp>
#include <verlpp/train/actor.hpp>
#include <verlpp/train/critic.hpp>
#include <verlpp/train/logprob.hpp>
#include <verlpp/train/sharded_weights.hpp>

#include <ATen/ops/randn.h>

#include <cstdlib>
#include <unistd.h>

#include "rank_threads.hpp"
#include "tiny_fixture.hpp"
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;
using verlpp::test::run_ranks;
using verlpp::test::worst_diff;
using verlpp::test::worst_relative;

#if VERLPP_CPU_REF_HAS_GLOO

namespace {

constexpr int64_t kR = test::kRanksResponse;

data::Batch make_batch(const model::DecoderLM& m) { return test::ranks_batch(m); }
train::ActorConfig actor_config() { return test::ranks_actor_config(); }

train::ShardingOptions stage(int zero_stage, bool optimizer_offload = false, bool param_offload = false,
                             train::OffloadedStep where = train::OffloadedStep::kHost) {
  train::ShardingOptions o;
  o.zero_stage = zero_stage;
  o.optimizer_offload = optimizer_offload;
  o.param_offload = param_offload;
  o.offloaded_step = where;
  return o;
}

struct RankResult {
  std::vector<at::Tensor> params;
  nlohmann::json metrics;
  train::TrainedModel::MemoryHeld held;
};

// Runs body on `world` ranks, or on this thread without a group for one rank.
void on_ranks(int32_t world, const std::function<void(const train::DataParallel&)>& body) {
  if (world == 1) {
    body(train::DataParallel());
  } else {
    run_ranks(world, body);
  }
}

// Two actor updates of `batch` on `world` ranks with `sharding`; per rank: the weights (gathered
// back into the master model), the second update's metrics, and what the rank held after it.
std::vector<RankResult> two_updates(int32_t world, const train::ShardingOptions& sharding,
                                    const train::ActorConfig& config, const data::Batch& batch, double lr,
                                    bool checkpointing = false) {
  std::vector<RankResult> out(static_cast<size_t>(world));
  on_ranks(world, [&](const train::DataParallel& dp) {
    model::DecoderLM m = test::tiny_model(9);
    m.set_gradient_checkpointing(checkpointing);
    train::Actor actor(m, config, train::LrSchedule::constant(lr));
    actor.set_data_parallel(dp, sharding);
    actor.update_policy(batch);
    RankResult& r = out[size_t(dp.rank())];
    r.metrics = actor.update_policy(batch);
    r.held = actor.trained_model().memory_held();
    actor.trained_model().materialize_master();
    r.params = test::parameter_values(m);
  });
  return out;
}

}  // namespace

// Against the replicated optimizer on the same ranks: the sums over ranks are reduce-scatters per
// micro-batch (ZeRO-3) where they were one all-reduce per step, and the norm of sharded units is
// taken in fp64 from shard sums, so they agree to rounding (1e-6 of the weights' scale), not bit
// for bit. The replicas stay bit-identical among themselves.
TEST_CASE("ZeRO-3 and offloaded state step as the replicated optimizer", "[zero3]") {
  const double lr = 1e-3;
  const data::Batch batch = make_batch(test::tiny_model(9));
  const std::vector<at::Tensor> initial = test::parameter_values(test::tiny_model(9));
  struct Variant {
    const char* name;
    train::ActorConfig config;
    bool checkpointing;
  };
  std::vector<Variant> variants = {{"plain", actor_config(), false}};
  variants.push_back({"clipping active (grad_clip 1e-3)", actor_config(), false});
  variants.back().config.optim.grad_clip = 1e-3;
  variants.push_back({"gradient checkpointing", actor_config(), true});
  variants.push_back({"packed rows, dynamic batch size, checkpointing", actor_config(), true});
  variants.back().config.remove_padding = true;
  variants.back().config.use_dynamic_bsz = true;
  variants.back().config.ppo_max_token_len = 20;  // ranks make different numbers of micro-batches
  struct Mode {
    const char* name;
    train::ShardingOptions sharding;
  };
  std::vector<Mode> modes = {
      {"ZeRO-2", stage(2)},
      {"ZeRO-3", stage(3)},
      {"ZeRO-3, forward prefetch", stage(3)},
      {"ZeRO-3, optimizer offload (AdamW on the host)", stage(3, true, false)},
      {"ZeRO-3, optimizer and param offload (AdamW streamed through the device)",
       stage(3, true, true, train::OffloadedStep::kDevice)},
      {"ZeRO-2, optimizer offload", stage(2, true)},
      {"ZeRO-0, param offload", stage(0, false, true)},
  };
  modes[2].sharding.forward_prefetch = true;
  for (const Variant& v : variants) {
    for (int32_t world : {2, 4}) {
      const auto replicated = two_updates(world, stage(0), v.config, batch, lr, v.checkpointing);
      for (const Mode& mode : modes) {
        INFO(v.name << ", " << world << " ranks, " << mode.name);
        const auto got = two_updates(world, mode.sharding, v.config, batch, lr, v.checkpointing);
        const double worst = worst_relative(got[0].params, replicated[0].params);
        INFO("worst |sharded - replicated| / max |param| = " << worst);
        CHECK(worst < 1e-6);
        CHECK(worst_diff(got[0].params, initial) > lr * 0.1);  // it moved
        CHECK(got[0].metrics["actor/grad_norm"].get<double>() ==
              Approx(replicated[0].metrics["actor/grad_norm"].get<double>()).epsilon(1e-5));
        CHECK(got[0].metrics["actor/pg_loss"].get<double>() ==
              Approx(replicated[0].metrics["actor/pg_loss"].get<double>()).epsilon(1e-5));
        for (int32_t r = 1; r < world; ++r) CHECK(worst_diff(got[size_t(r)].params, got[0].params) == 0.0);
      }
    }
  }
}

// One rank: the units hold whole parameters and take clip_grad_norm's norm, and AdamW on the
// device is LibTorch's arithmetic op for op, so offloaded weights, or optimizer state streamed
// through the device, step bit for bit as the replicated optimizer. The host's one-pass AdamW
// rounds each operation as written where LibTorch's vector kernels contract multiply-adds:
// equal to rounding only.
TEST_CASE("one rank: offloaded state steps as the replicated optimizer", "[zero3]") {
  const double lr = 1e-3;
  const data::Batch batch = make_batch(test::tiny_model(9));
  train::ActorConfig config = actor_config();
  config.optim.grad_clip = 1e-3;  // clipping active
  const auto replicated = two_updates(1, stage(0), config, batch, lr);
  const auto params_only = two_updates(1, stage(3, false, true), config, batch, lr);
  const auto streamed = two_updates(1, stage(0, true, false, train::OffloadedStep::kDevice), config, batch, lr);
  const auto host = two_updates(1, stage(0, true, true, train::OffloadedStep::kHost), config, batch, lr);
  CHECK(worst_diff(params_only[0].params, replicated[0].params) == 0.0);
  CHECK(worst_diff(streamed[0].params, replicated[0].params) == 0.0);
  const double worst = worst_relative(host[0].params, replicated[0].params);
  INFO("host AdamW: worst |offloaded - replicated| / max |param| = " << worst);
  CHECK(worst < 1e-6);
  // The first step's norm is the same; the second one's follows the slightly different weights.
  CHECK(host[0].metrics["actor/grad_norm"].get<double>() ==
        Approx(replicated[0].metrics["actor/grad_norm"].get<double>()).epsilon(1e-6));
}

// At ZeRO-3 each rank keeps 1/N of the weights, the gradient sums and the moments, and the master
// model none; ZeRO-2 the same but whole compute weights: measured from the tensors held (fp32
// on the CPU: the masters are the compute shards; bf16: the masters are fp32 shards of their
// own). Padding is at most one alignment block per unit and rank.
TEST_CASE("ZeRO-2 and ZeRO-3: each rank holds 1/N of gradients and optimizer state (ZeRO-3: of weights too)",
          "[zero3]") {
  const model::DecoderLM initial = test::tiny_model(9);
  int64_t total = 0;
  for (const auto& [name, p] : initial.named_parameters()) total += p.numel();
  const int64_t units = initial.config().num_hidden_layers + 1;
  const data::Batch batch = make_batch(initial);
  for (int zero_stage : {2, 3}) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      for (int32_t world : {2, 4}) {
        INFO("ZeRO-" << zero_stage << ", " << c10::toString(dtype) << ", " << world << " ranks");
        std::vector<train::TrainedModel::MemoryHeld> during(static_cast<size_t>(world)),
            after(static_cast<size_t>(world));
        std::vector<int64_t> whole_grads(static_cast<size_t>(world), -1);
        run_ranks(world, [&](const train::DataParallel& dp) {
          model::DecoderLM m = test::tiny_model(9);
          train::ActorConfig config = actor_config();
          config.param_dtype = dtype;
          train::Actor actor(m, config, train::LrSchedule::constant(1e-3));
          actor.set_data_parallel(dp, stage(zero_stage));
          train::TrainedModel& t = actor.trained_model();
          t.begin_update();
          t.zero_grad();
          const auto out =
              train::response_log_probs(t.compute(), batch.tensor("input_ids"), batch.tensor("attention_mask"),
                                        batch.tensor("position_ids"), kR, 1.0, false);
          t.backward(out.log_probs.sum());
          during[size_t(dp.rank())] = t.memory_held();
          int64_t whole = 0;
          for (const auto& [name, p] : t.compute().named_parameters())
            if (p.grad().defined()) whole += p.grad().numel();
          whole_grads[size_t(dp.rank())] = whole;
          t.step();
          after[size_t(dp.rank())] = t.memory_held();
        });
        const int64_t compute_bytes = dtype == at::kFloat ? 4 : 2;
        const int64_t share = (total + world - 1) / world, slack = units * 16;
        for (int32_t r = 0; r < world; ++r) {
          INFO("rank " << r);
          const auto& d = during[size_t(r)];
          const auto& a = after[size_t(r)];
          CHECK(d.master_weights == 0);  // the master model's memory is freed
          CHECK(whole_grads[size_t(r)] == 0);
          const int64_t weights = zero_stage == 3 ? share : total,
                        weights_slack = zero_stage == 3 ? slack : world * slack;
          CHECK(d.compute_weights >= compute_bytes * weights);
          CHECK(d.compute_weights <= compute_bytes * (weights + weights_slack));
          CHECK(d.gradients >= 4 * share);
          CHECK(d.gradients <= 4 * (share + slack));
          CHECK(a.gradients == 0);  // dropped by the step
          CHECK(a.optimizer_states >= 8 * share);
          CHECK(a.optimizer_states <= 8 * (share + slack));
          if (dtype == at::kFloat) {
            CHECK(a.masters_in_units == 0);
          } else {
            CHECK(a.masters_in_units >= 4 * share);
            CHECK(a.masters_in_units <= 4 * (share + slack));
          }
        }
      }
    }
  }
}

// A checkpoint holds every parameter's whole state at any stage: written at ZeRO-3 by 2 ranks it
// resumes on 1 rank (replicated), on 4 at ZeRO-3 and on 2 at ZeRO-2, and a ZeRO-2 checkpoint
// resumes at ZeRO-3; each then matches the uninterrupted one-rank run.
TEST_CASE("ZeRO-3 checkpoints resume on any rank count and stage", "[zero3]") {
  const double lr = 1e-3;
  const data::Batch batch = make_batch(test::tiny_model(9));
  const auto straight = two_updates(1, stage(0), actor_config(), batch, lr);
  const std::string base = "/tmp/verlpp-test-zero3-checkpoint-" + std::to_string(getpid());
  auto save_after_one = [&](int32_t world, const train::ShardingOptions& sharding, const std::string& dir) {
    REQUIRE(std::system(("rm -rf " + dir).c_str()) == 0);
    on_ranks(world, [&](const train::DataParallel& dp) {
      model::DecoderLM m = test::tiny_model(9);
      train::Actor actor(m, actor_config(), train::LrSchedule::constant(lr));
      actor.set_data_parallel(dp, sharding);
      actor.update_policy(batch);
      actor.trained_model().save(dir);
    });
  };
  auto resume = [&](int32_t world, const train::ShardingOptions& sharding, const std::string& dir) {
    std::vector<at::Tensor> rank0;
    on_ranks(world, [&](const train::DataParallel& dp) {
      model::DecoderLM m = test::tiny_model(21);  // other weights: the folder must replace them
      train::Actor actor(m, actor_config(), train::LrSchedule::constant(lr));
      actor.set_data_parallel(dp, sharding);
      actor.trained_model().load(dir);
      actor.set_updates(1);
      actor.update_policy(batch);
      actor.trained_model().materialize_master();
      if (dp.rank() == 0) rank0 = test::parameter_values(m);
    });
    return rank0;
  };
  const std::string zero3_dir = base + "-z3", zero2_dir = base + "-z2";
  save_after_one(2, stage(3), zero3_dir);
  save_after_one(2, stage(2, true), zero2_dir);
  struct Case {
    std::string dir;
    int32_t world;
    train::ShardingOptions sharding;
    const char* name;
  };
  for (const Case& c :
       {Case{zero3_dir, 1, stage(0), "1 rank, replicated"}, Case{zero3_dir, 4, stage(3), "4, ZeRO-3"},
        Case{zero3_dir, 2, stage(2), "2, ZeRO-2"}, Case{zero3_dir, 1, stage(3, true, true), "1, offloaded"},
        Case{zero2_dir, 2, stage(3), "2, ZeRO-3 from an offloaded ZeRO-2 checkpoint"}}) {
    const double worst = worst_diff(resume(c.world, c.sharding, c.dir), straight[0].params);
    INFO(c.dir << " resumed on " << c.name << ": worst |resumed - uninterrupted| " << worst);
    CHECK(worst < lr * 1e-3);
  }
  CHECK(std::system(("rm -rf " + zero3_dir + " " + zero2_dir).c_str()) == 0);
}

TEST_CASE("ZeRO-3: the critic's value update equals the replicated one", "[zero3]") {
  model::ModelConfig c = model::load_model_config(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/config.json");
  c.head = model::ModelHead::kTokenClassification;
  c.num_labels = 1;
  auto critic_model = [&] {
    model::DecoderLM m(c);
    m.init_weights(21);
    return m;
  };
  data::Batch b = test::ragged_batch(
      c.vocab_size, 8, 4, 5, 8, [](int64_t) { return 0; }, [](int64_t r) { return r % 4; });
  b.set("returns", at::randn({8, 5}));
  b.set("values", at::randn({8, 5}).mul(0.1));
  const double lr = 1e-3;
  auto update = [&](int32_t world, const train::ShardingOptions& sharding, bool checkpointing) {
    std::vector<at::Tensor> params;
    nlohmann::json metrics;
    on_ranks(world, [&](const train::DataParallel& dp) {
      model::DecoderLM m = critic_model();
      m.set_gradient_checkpointing(checkpointing);
      train::CriticConfig cc;
      cc.ppo_mini_batch_size = 4;
      cc.ppo_micro_batch_size = 2;
      train::Critic critic(m, cc, train::LrSchedule::constant(lr));
      critic.set_data_parallel(dp, sharding);
      const at::Tensor values = critic.compute_values(b);
      nlohmann::json got = critic.update_critic(b);
      critic.trained_model().materialize_master();
      if (dp.rank() == 0) {
        params = test::parameter_values(m);
        metrics = got;
        metrics["values_sum"] = values.sum().item<double>();
      }
    });
    return std::make_pair(params, metrics);
  };
  for (bool checkpointing : {false, true}) {
    for (int32_t world : {2, 4}) {
      INFO(world << " ranks, checkpointing " << checkpointing);
      const auto replicated = update(world, stage(0), checkpointing);
      const auto sharded = update(world, stage(3), checkpointing);
      CHECK(worst_relative(sharded.first, replicated.first) < 1e-6);
      CHECK(sharded.second["values_sum"].get<double>() == replicated.second["values_sum"].get<double>());
      CHECK(sharded.second["critic/vf_loss"].get<double>() ==
            Approx(replicated.second["critic/vf_loss"].get<double>()).epsilon(1e-6));
    }
  }
}

// The reference as frozen sharded weights: every forward gathers each layer and frees it again,
// and computes exactly what the whole model computes (the same ops on the same values); the
// unit-by-unit export (the rollout sync) hands over exactly the source's tensors.
TEST_CASE("a frozen sharded model forwards and exports as the whole model", "[zero3]") {
  const model::DecoderLM whole = test::tiny_model(9);
  const data::Batch batch = make_batch(whole);
  at::Tensor expected;
  {
    at::NoGradGuard no_grad;
    expected = train::response_log_probs(whole, batch.tensor("input_ids"), batch.tensor("attention_mask"),
                                         batch.tensor("position_ids"), kR, 1.0, false)
                   .log_probs;
  }
  for (int32_t world : {1, 2, 3}) {
    std::vector<at::Tensor> got(static_cast<size_t>(world));
    std::vector<int64_t> mismatched(static_cast<size_t>(world), -1), after_forward(static_cast<size_t>(world)),
        after_release(static_cast<size_t>(world));
    std::vector<std::string> offloaded_error(static_cast<size_t>(world));
    on_ranks(world, [&](const train::DataParallel& dp) {
      train::ShardedWeightsOptions o;
      o.dp = dp;
      train::ShardedWeights ref(whole, o);
      at::NoGradGuard no_grad;
      got[size_t(dp.rank())] =
          train::response_log_probs(ref.model(), batch.tensor("input_ids"), batch.tensor("attention_mask"),
                                    batch.tensor("position_ids"), kR, 1.0, false)
              .log_probs;
      after_forward[size_t(dp.rank())] = ref.resident_weight_bytes();
      ref.release_gathered();
      after_release[size_t(dp.rank())] = ref.resident_weight_bytes();
      int64_t bad = 0;
      ref.for_each_unit([&](const std::vector<std::pair<std::string, at::Tensor>>& unit) {
        for (const auto& [name, t] : unit)
          if (!t.equal(whole.parameter(name))) ++bad;
      });
      mismatched[size_t(dp.rank())] = bad;
      ref.offload();
      try {
        (void)train::response_log_probs(ref.model(), batch.tensor("input_ids"), batch.tensor("attention_mask"),
                                        batch.tensor("position_ids"), kR, 1.0, false);
      } catch (const std::exception& e) {
        offloaded_error[size_t(dp.rank())] = e.what();
      }
      ref.reload();
      const at::Tensor again =
          train::response_log_probs(ref.model(), batch.tensor("input_ids"), batch.tensor("attention_mask"),
                                    batch.tensor("position_ids"), kR, 1.0, false)
              .log_probs;
      if (!again.equal(got[size_t(dp.rank())])) mismatched[size_t(dp.rank())] += 1000;
    });
    for (int32_t r = 0; r < world; ++r) {
      INFO(world << " ranks, rank " << r);
      CHECK(got[size_t(r)].equal(expected));
      CHECK(mismatched[size_t(r)] == 0);
      CHECK(after_release[size_t(r)] == after_forward[size_t(r)]);  // only shards (or whole units) are resident
      CHECK(offloaded_error[size_t(r)].find("offloaded to host memory") != std::string::npos);
    }
  }
}

// Prefetching gathers the same bytes earlier, on the group's communication thread: the forward
// and the gradient shards equal those of gathering each layer when it runs, bit for bit, and
// every layer after the first (forward) or before the last (backward) was gathered that way.
TEST_CASE("ZeRO-3 prefetch: layers gathered in the background give the same passes bit for bit", "[zero3]") {
  const model::DecoderLM whole = test::tiny_model(9);
  const data::Batch batch = make_batch(whole);
  const int64_t layers = whole.config().num_hidden_layers;
  REQUIRE(layers >= 2);
  for (int32_t world : {2, 3}) {
    struct Pass {
      at::Tensor no_grad_log_probs, log_probs;
      std::vector<at::Tensor> gradients;
      int64_t prefetched_forward = 0, prefetched_total = 0, resident_before = 0, resident_after = 0;
    };
    std::vector<std::vector<Pass>> got(2, std::vector<Pass>(static_cast<size_t>(world)));
    for (int prefetch : {0, 1}) {
      on_ranks(world, [&](const train::DataParallel& dp) {
        train::ShardedWeightsOptions o;
        o.dp = dp;
        o.trainable = true;
        o.forward_prefetch = o.backward_prefetch = prefetch == 1;
        train::ShardedWeights w(whole, o);
        Pass& p = got[size_t(prefetch)][size_t(dp.rank())];
        p.resident_before = w.resident_weight_bytes();
        auto log_probs = [&] {
          return train::response_log_probs(w.model(), batch.tensor("input_ids"), batch.tensor("attention_mask"),
                                           batch.tensor("position_ids"), kR, 1.0, false)
              .log_probs;
        };
        {
          at::NoGradGuard no_grad;
          p.no_grad_log_probs = log_probs();
        }
        w.release_gathered();
        p.log_probs = log_probs();
        p.prefetched_forward = w.prefetched_units();
        p.log_probs.sum().backward();
        p.log_probs = p.log_probs.detach();
        w.collect_gradients();
        w.finish_gradients();
        for (int64_t u = 0; u < w.num_units(); ++u) p.gradients.push_back(w.gradient_shard(u).clone());
        p.prefetched_total = w.prefetched_units();
        w.release_gathered();
        p.resident_after = w.resident_weight_bytes();
      });
    }
    for (int32_t r = 0; r < world; ++r) {
      INFO(world << " ranks, rank " << r);
      const Pass &off = got[0][size_t(r)], &on = got[1][size_t(r)];
      CHECK(on.no_grad_log_probs.equal(off.no_grad_log_probs));
      CHECK(on.log_probs.equal(off.log_probs));
      REQUIRE(on.gradients.size() == off.gradients.size());
      for (size_t u = 0; u < on.gradients.size(); ++u) CHECK(on.gradients[u].equal(off.gradients[u]));
      CHECK(off.prefetched_total == 0);
      CHECK(on.prefetched_forward == 2 * (layers - 1));                  // the no-grad and the grad forward
      CHECK(on.prefetched_total == on.prefetched_forward + layers - 1);  // and the backward
      CHECK(on.resident_after == on.resident_before);                    // nothing left gathered
    }
  }
}

// Each layer's gradient reduce-scatter runs in the background from its backward (ZeRO-2 and 3)
// and is added to the shard later, in call order: two micro-batches' gradient shards equal those
// of waiting for each reduce-scatter where it starts, bit for bit, and every unit's reduction of
// every backward ran in the background.
TEST_CASE("ZeRO-2 and ZeRO-3: reduce-scatters overlapped with the backward give the same shards bit for bit",
          "[zero3]") {
  const model::DecoderLM whole = test::tiny_model(9);
  const data::Batch batch = make_batch(whole);
  const int64_t units = whole.config().num_hidden_layers + 1;
  for (int zero_stage : {2, 3}) {
    for (int32_t world : {2, 3}) {
      struct Pass {
        std::vector<at::Tensor> gradients;
        int64_t overlapped = 0, held_after_backward = 0, shard_bytes = 0;
      };
      std::vector<std::vector<Pass>> got(2, std::vector<Pass>(static_cast<size_t>(world)));
      for (int overlap : {0, 1}) {
        run_ranks(world, [&](const train::DataParallel& dp) {
          train::ShardedWeightsOptions o;
          o.dp = dp;
          o.trainable = true;
          o.gather_per_use = zero_stage == 3;
          o.overlap_reduce = overlap == 1;
          train::ShardedWeights w(whole, o);
          Pass& p = got[size_t(overlap)][size_t(dp.rank())];
          for (int micro = 0; micro < 2; ++micro) {
            const at::Tensor lp =
                train::response_log_probs(w.model(), batch.tensor("input_ids"), batch.tensor("attention_mask"),
                                          batch.tensor("position_ids"), kR, 1.0, false)
                    .log_probs;
            lp.mul(micro == 0 ? 1.0 : -0.5).sum().backward();
            w.collect_gradients();
          }
          p.held_after_backward = w.gradient_bytes();
          w.finish_gradients();
          for (int64_t u = 0; u < w.num_units(); ++u) {
            p.gradients.push_back(w.gradient_shard(u).clone());
            p.shard_bytes += 4 * w.shard_elements(u);
          }
          p.overlapped = w.overlapped_reductions();
          w.drop_gradients();
          w.release_gathered();
        });
      }
      for (int32_t r = 0; r < world; ++r) {
        INFO("ZeRO-" << zero_stage << ", " << world << " ranks, rank " << r);
        const Pass &off = got[0][size_t(r)], &on = got[1][size_t(r)];
        REQUIRE(on.gradients.size() == off.gradients.size());
        for (size_t u = 0; u < on.gradients.size(); ++u) CHECK(on.gradients[u].equal(off.gradients[u]));
        CHECK(off.overlapped == 0);
        CHECK(on.overlapped == 2 * units);
        // Every reduction has finished when a backward's collect_gradients returns: only the
        // shards are held.
        CHECK(on.held_after_backward == on.shard_bytes);
        CHECK(off.held_after_backward == off.shard_bytes);
      }
    }
  }
}

TEST_CASE("sharding options out of range are refused", "[zero3]") {
  model::DecoderLM m = test::tiny_model(9);
  train::Actor actor(m, actor_config(), train::LrSchedule::constant(1e-3));
  CHECK_THROWS_WITH(actor.set_data_parallel(train::DataParallel(), stage(4)), Catch::Contains("ZeRO stage 4"));
}

#endif  // VERLPP_CPU_REF_HAS_GLOO
