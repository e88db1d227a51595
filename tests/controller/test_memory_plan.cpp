// The memory planner: its resident items against the bytes of the tensors a trained actor holds
// after an update (fp32 and bf16 compute), ZeRO-2's shard against the model's own parameter
// count, and the start-of-run check on model shapes that do not fit (the Qwen2.5-7B shape on
// one 140 GiB device, a 72B-like shape anywhere), with the settings that would make them fit.
#include <verlpp/controller/memory_plan.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/rollout/engine.hpp>
#include <verlpp/train/actor.hpp>
#include <verlpp/train/data_parallel.hpp>

#include "../model_shapes.hpp"
#include "../train/tiny_fixture.hpp"

#include <nlohmann/json.hpp>

#include <fstream>

#include <catch2/catch.hpp>

using namespace verlpp;
using Catch::Matchers::Contains;

namespace {

nlohmann::json tiny_config_json() {
  std::ifstream in(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/config.json");
  return nlohmann::json::parse(in);
}

model::ModelConfig shape(const nlohmann::json& changes) {
  nlohmann::json j = tiny_config_json();
  j.update(changes);
  return model::parse_model_config(j, "test shape");
}

model::ModelConfig qwen7b() { return shape(test::qwen2_5_7b_fields()); }

const controller::MemoryItem* find_item(const controller::MemoryPlan& plan, const std::string& name) {
  for (const auto& i : plan.resident)
    if (i.name == name) return &i;
  return nullptr;
}

uint64_t bytes_of(const at::Tensor& t) { return uint64_t(t.numel()) * uint64_t(t.element_size()); }

constexpr uint64_t kGiB = uint64_t(1) << 30;

}  // namespace

TEST_CASE("memory plan: resident items are the bytes of the tensors a trained actor holds", "[memory_plan]") {
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    INFO("param_dtype " << c10::toString(dtype));
    model::DecoderLM m = test::tiny_model(3);
    train::ActorConfig cfg;
    cfg.param_dtype = dtype;
    cfg.ppo_mini_batch_size = 8;
    cfg.ppo_micro_batch_size = 4;
    train::Actor actor(m, cfg, train::LrSchedule({1e-3, "constant", 0, 1, 0.0, 0.5}));
    actor.update_policy(test::policy_batch(
        m, 8, 5, 4, 1, [](int64_t r) { return r % 3; }, [](int64_t r) { return r % 2; }));
    // Measured from the tensors.
    uint64_t masters = 0, grads = 0, compute = 0;
    for (const auto& [name, p] : m.named_parameters()) {
      masters += bytes_of(p);
      if (p.grad().defined()) grads += bytes_of(p.grad());
    }
    const model::DecoderLM& copy = actor.trained_model().compute();
    if (&copy != &m)
      for (const auto& [name, p] : copy.named_parameters()) compute += bytes_of(p);
    const uint64_t moments = uint64_t(actor.optimizer().state_elements()) * 4;

    controller::MemoryPlanInputs in;
    in.model = m.config();
    in.param_dtype = dtype;
    in.rollout_dtype = dtype;
    in.accelerator = false;
    const controller::MemoryPlan plan = controller::plan_memory(in);
    REQUIRE(find_item(plan, "actor fp32 master weights"));
    CHECK(find_item(plan, "actor fp32 master weights")->bytes == masters);
    REQUIRE(find_item(plan, "actor fp32 gradients"));
    CHECK(find_item(plan, "actor fp32 gradients")->bytes == grads);
    REQUIRE(find_item(plan, "actor AdamW moments"));
    CHECK(find_item(plan, "actor AdamW moments")->bytes == moments);
    const auto* copy_item = find_item(plan, "actor compute copy (bfloat16)");
    CHECK((copy_item != nullptr) == (dtype == at::kBFloat16));
    if (copy_item) CHECK(copy_item->bytes == compute);
    CHECK(plan.resident_bytes() == masters + grads + moments + compute);
    // Every stage holds the resident state and adds its own.
    for (const auto& st : plan.stages) CHECK(st.total() >= plan.resident_bytes());
  }
}

TEST_CASE("memory plan: the generation stage counts the buffers an engine sharing the actor's weights owns",
          "[memory_plan]") {
  for (const bool qkv_bias : {true, false}) {
    INFO("qkv_bias " << qkv_bias);
    model::ModelConfig c = shape({{"attention_bias", qkv_bias}});
    c.qkv_bias = qkv_bias;
    model::DecoderLM actor(c, model::ModelOptions{});
    rollout::RolloutEngine engine(actor, rollout::EngineOptions{});
    engine.update_weights(actor);
    // Measured: the engine's storages that are not the actor's.
    uint64_t owned = 0;
    for (const auto& [name, p] : engine.model().named_parameters())
      if (engine.model().is_fused(name)) owned += bytes_of(p);
    REQUIRE(owned > 0);
    controller::MemoryPlanInputs in;
    in.model = c;
    in.param_dtype = at::kFloat;
    in.rollout_dtype = at::kFloat;
    in.accelerator = false;
    const controller::MemoryPlan plan = controller::plan_memory(in);
    const controller::MemoryItem* item = nullptr;
    for (const auto& i : plan.stages.front().items)
      if (i.name == "rollout engine's fused q/k/v and gate/up") item = &i;
    REQUIRE(plan.stages.front().stage == "generation");
    REQUIRE(item != nullptr);
    CHECK(item->bytes == owned);
  }
}

// ZeRO-2 keeps its state in units (test_zero3.cpp measures what a rank holds): whole compute
// weights, a shard of the masters and moments, a gradient shard during the update, and the fp32
// buffers of the reduce-scatters in flight during the backward.
TEST_CASE("memory plan: ZeRO-2 holds ceil(P / N) of the masters, moments and gradient sums", "[memory_plan]") {
  const model::DecoderLM m = test::tiny_model(3);
  uint64_t p = 0;
  for (const auto& [name, t] : m.named_parameters()) p += uint64_t(t.numel());
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (const int64_t world : {2, 3, 4}) {
      INFO(c10::toString(dtype) << ", " << world << " ranks");
      controller::MemoryPlanInputs in;
      in.model = m.config();
      in.world_size = world;
      in.param_dtype = in.rollout_dtype = dtype;
      in.actor_layout.zero_stage = 2;
      in.accelerator = false;
      const controller::MemoryPlan plan = controller::plan_memory(in);
      const uint64_t shard = (p + uint64_t(world) - 1) / uint64_t(world), compute = dtype == at::kFloat ? 4 : 2;
      const std::string weights = std::string("actor weights (") + (dtype == at::kFloat ? "float32" : "bfloat16") + ")";
      REQUIRE(find_item(plan, weights));
      CHECK(find_item(plan, weights)->bytes == compute * p);
      REQUIRE(find_item(plan, "actor AdamW moments, shard"));
      CHECK(find_item(plan, "actor AdamW moments, shard")->bytes == 8 * shard);
      CHECK((find_item(plan, "actor fp32 masters, shard") != nullptr) == (dtype != at::kFloat));
      if (dtype != at::kFloat) CHECK(find_item(plan, "actor fp32 masters, shard")->bytes == 4 * shard);
      CHECK(find_item(plan, "actor fp32 gradients") == nullptr);
      CHECK(find_item(plan, "actor fp32 master weights") == nullptr);
      CHECK(plan.resident_bytes() == compute * p + 8 * shard + (dtype != at::kFloat ? 4 * shard : 0));
      // During the update: the gradient shard and the reduce-scatters in flight, not a whole gradient.
      const controller::StagePlan* update = nullptr;
      for (const auto& st : plan.stages)
        if (st.stage == "actor_update") update = &st;
      REQUIRE(update != nullptr);
      bool sums = false, in_flight = false;
      for (const auto& i : update->items) {
        sums |= i.name == "actor fp32 gradient sums, shard" && i.bytes == 4 * shard;
        in_flight |= i.name == "fp32 gradients of the reduce-scatters in flight";
        CHECK(i.name.find("fp32 gradients until") == std::string::npos);
      }
      CHECK(sums);
      CHECK(in_flight);
    }
  }
}

TEST_CASE("memory plan: a plan larger than the device is refused, naming what would fit", "[memory_plan]") {
  controller::MemoryPlanInputs in;
  in.model = qwen7b();
  in.param_dtype = in.rollout_dtype = at::kBFloat16;
  in.reference = true;
  in.update_micro_batch = 4;
  in.device_total_bytes = 140 * kGiB;
  // 18 B per parameter for the actor (fp32 masters, gradients and moments, bf16 copy) and 2 for
  // the reference: about 142 GiB for the 7.6B parameters.
  const controller::MemoryPlan plan = controller::plan_memory(in);
  CHECK(double(plan.resident_bytes()) / double(kGiB) ==
        Approx(20.0 * double(model::parameter_count(in.model)) / double(kGiB)));
  CHECK(plan.largest_resident().name == "actor AdamW moments");
  CHECK_THROWS_WITH(controller::check_memory_plan(in, "cuda:0"),
                    Contains("the generation stage needs") && Contains("more than cuda:0's 140.00 GiB") &&
                        Contains("largest item: actor AdamW moments, 56.") &&
                        Contains("it would fit with actor_rollout_ref.actor.fsdp_config.optimizer_offload=true") &&
                        Contains("trainer.zero_stage=3 on 2 ranks"));
  // The optimizer state in host memory: 12 B per parameter there, the weights (2 B) on the device.
  controller::MemoryPlanInputs offload = in;
  offload.actor_layout.optimizer_offload = true;
  const controller::MemoryPlan offloaded = controller::plan_memory(offload);
  const double p = double(model::parameter_count(in.model));
  CHECK(double(offloaded.host_bytes()) == Approx(12.0 * p).epsilon(1e-3));
  CHECK(double(offloaded.resident_bytes()) == Approx(4.0 * p).epsilon(1e-3));  // actor + reference weights
  CHECK_NOTHROW(controller::check_memory_plan(offload, "cuda:0"));
  // ZeRO-3 on 2 ranks: a shard of everything.
  controller::MemoryPlanInputs sharded = in;
  sharded.actor_layout.zero_stage = sharded.ref_layout.zero_stage = 3;
  sharded.world_size = 2;
  // Per parameter: 2 B of weights, 4 of masters, 8 of moments, 2 of reference, halved.
  CHECK(double(controller::plan_memory(sharded).resident_bytes()) == Approx(8.0 * p).epsilon(1e-3));
  CHECK_NOTHROW(controller::check_memory_plan(sharded, "cuda:0"));
  // A 72B-like shape: its training state shards, but a whole engine alone takes the device; the
  // hint splits the engine as well, and the plan it names fits.
  controller::MemoryPlanInputs huge = in;
  huge.model = shape(test::qwen_72b_like_fields());
  std::string hint;
  try {
    controller::check_memory_plan(huge, "cuda:0");
  } catch (const verlpp::Error& e) {
    hint = e.what();
  }
  INFO(hint);
  const std::string split_key = "actor_rollout_ref.rollout.tensor_model_parallel_size=";
  REQUIRE(hint.find("it would fit with trainer.zero_stage=3 " + split_key) != std::string::npos);
  const size_t at = hint.find(split_key) + split_key.size();
  const int64_t tp = std::stoll(hint.substr(at));
  const size_t ranks_at = hint.find(" on ", at) + 4;
  const int64_t ranks = std::stoll(hint.substr(ranks_at));
  CHECK(ranks % tp == 0);
  controller::MemoryPlanInputs split = huge;
  split.actor_layout.zero_stage = split.ref_layout.zero_stage = split.critic_layout.zero_stage = 3;
  split.world_size = ranks;
  split.rollout_tp = tp;
  CHECK_NOTHROW(controller::check_memory_plan(split, "cuda:0"));
  split.rollout_tp = 1;  // the same ranks with whole engines do not fit
  CHECK_THROWS(controller::check_memory_plan(split, "cuda:0"));
  // On a device smaller than the most split engine's part, nothing fits; the reason names the engine.
  controller::MemoryPlanInputs tiny_device = huge;
  tiny_device.device_total_bytes = 2 * kGiB;
  CHECK_THROWS_WITH(controller::check_memory_plan(tiny_device, "cuda:0"),
                    Contains("no offload, micro-batch, KV budget, ZeRO-3 rank count or engine split makes it fit") &&
                        Contains("the rollout engine holds the whole model on every rank (135."));
  // An engine in another dtype than the compute copy holds its own weights; the hint says so.
  controller::MemoryPlanInputs cast = offload;
  cast.rollout_dtype = at::kFloat;
  bool engine_copy = false;
  for (const auto& st : controller::plan_memory(cast).stages)
    for (const auto& i : st.items) engine_copy |= i.name == "rollout engine weights (own float32 copy)";
  CHECK(engine_copy);
  // An unknown device size checks nothing.
  huge.device_total_bytes = 0;
  CHECK_NOTHROW(controller::check_memory_plan(huge, "cuda:0"));
}

// Flat units (offload, ZeRO-3): the plan's items against what a trained actor holds, measured
// from its tensors (TrainedModel::memory_held); the units' alignment adds at most 16 elements per
// parameter.
TEST_CASE("memory plan: offloaded and sharded items are the bytes a trained actor holds", "[memory_plan]") {
  model::DecoderLM m = test::tiny_model(3);
  const uint64_t slack = 16 * uint64_t(m.named_parameters().size());
  auto near = [&](uint64_t planned, int64_t held, uint64_t bytes_per_element) {
    return uint64_t(held) >= planned && uint64_t(held) <= planned + bytes_per_element * slack;
  };
  train::ActorConfig cfg;
  cfg.param_dtype = at::kBFloat16;
  cfg.ppo_mini_batch_size = 8;
  cfg.ppo_micro_batch_size = 4;
  const data::Batch batch = test::policy_batch(
      m, 8, 5, 4, 1, [](int64_t r) { return r % 3; }, [](int64_t r) { return r % 2; });
  train::Actor actor(m, cfg, train::LrSchedule({1e-3, "constant", 0, 1, 0.0, 0.5}));
  train::ShardingOptions o;
  o.optimizer_offload = true;
  actor.set_data_parallel(train::DataParallel(), o);
  actor.update_policy(batch);
  // The master model's weights moved into the units: a forward on it is refused, not a crash.
  CHECK_NOTHROW(actor.compute_log_prob(batch, false));
  CHECK_THROWS_WITH(train::response_log_probs(m, batch.tensor("input_ids"), batch.tensor("attention_mask"),
                                              batch.tensor("position_ids"), 4, 1.0, false),
                    Contains("sharded units"));
  const train::TrainedModel::MemoryHeld held = actor.trained_model().memory_held();

  controller::MemoryPlanInputs in;
  in.model = m.config();
  in.param_dtype = in.rollout_dtype = at::kBFloat16;
  in.accelerator = false;
  in.actor_layout.optimizer_offload = true;
  const controller::MemoryPlan plan = controller::plan_memory(in);
  auto item = [&](const std::vector<controller::MemoryItem>& items, const std::string& name) -> uint64_t {
    for (const auto& i : items)
      if (i.name == name) return i.bytes;
    FAIL("no item " << name);
    return 0;
  };
  CHECK(held.master_weights == 0);
  CHECK(near(item(plan.resident, "actor weights (bfloat16)"), held.compute_weights, 2));
  CHECK(near(item(plan.host, "actor fp32 masters"), held.masters_in_units, 4));
  CHECK(near(item(plan.host, "actor AdamW moments"), held.optimizer_states, 8));
  CHECK(held.gradients == 0);  // dropped by the step: the sums are an update-stage item
}
