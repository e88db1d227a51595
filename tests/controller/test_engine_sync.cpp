// The trainer -> engine sync (controller/engine_sync.hpp) across layouts, on cpu_ref's Gloo
// communicator with ranks as threads: ZeRO-3 shards over 4 ranks into whole engines, into two
// engines of 2 ranks and into one engine of 4; a whole model into a split engine. Each rank's
// engine parameters are compared bit for bit with the slices cut from the whole weights by
// model::tensor_parallel_slice; the report's bytes against sums over the units' own layout (a
// split engine's point-to-point bytes against the slices of a tensor of flat positions).
#include <verlpp/controller/engine_sync.hpp>
#include <verlpp/model/tensor_parallel.hpp>
#include <verlpp/hw/tensor_storage.hpp>
#include <verlpp/rollout/engine.hpp>
#include <verlpp/rollout/tensor_parallel.hpp>
#include <verlpp/train/data_parallel.hpp>
#include <verlpp/train/sharded_weights.hpp>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>

#include "../group_ranks.hpp"

#include <catch2/catch.hpp>

#include <algorithm>

using namespace verlpp;

#if VERLPP_CPU_REF_HAS_GLOO

namespace {

// The tiny model with an untied LM head over a vocabulary 4 ranks do not divide (the last
// rank's slice is padded), seeded alike on every rank.
model::DecoderLM whole_model() {
  model::ModelConfig c = model::load_model_config(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny");
  c.tie_word_embeddings = false;
  c.vocab_size = 381;
  model::DecoderLM m(c);
  m.init_weights(11);
  return m;
}

rollout::EngineOptions small_pool() {
  rollout::EngineOptions o;
  o.kv_token_budget = 256;
  return o;
}

// What each rank found: mismatching parameters, and its report.
struct RankResult {
  std::vector<std::string> mismatches;
  controller::EngineSyncReport report;
  int64_t engine_param_bytes = 0;
  std::vector<std::string> kept_after_release;  // engine tensors release_weights left allocated
};

// Compares the engine's parameters with the slices of `whole` for tensor-parallel rank `tp_rank`
// of `tp` (whole tensors when tp = 1).
std::vector<std::string> compare_to_slices(const rollout::RolloutEngine& engine, const model::DecoderLM& whole,
                                           int64_t tp, int64_t tp_rank) {
  std::vector<std::string> bad;
  const model::ModelConfig& c = whole.config();
  const model::TensorParallelLayout layout = model::tensor_parallel_layout(c, tp);
  for (const auto& [name, p] : engine.model().named_parameters()) {
    const at::Tensor full = whole.parameter(name).detach();
    const at::Tensor want = tp > 1 ? model::tensor_parallel_slice(c, layout, name, full, tp_rank) : full;
    if (!at::equal(p.detach().contiguous(), want.contiguous())) bad.push_back(name);
  }
  return bad;
}

// The elements of rank `rank`'s slices (engine rank rank % tp) that lie outside its own ZeRO-3
// shard of each unit over `world` ranks: found by slicing a tensor of flat positions (1-based,
// so that the zero padding of the last vocabulary slice is told apart) with
// model::tensor_parallel_slice, independently of the sync's own range arithmetic.
int64_t slice_elements_held_elsewhere(const model::ModelConfig& c, int64_t tp, int64_t rank, int64_t world) {
  const model::TensorParallelLayout layout = model::tensor_parallel_layout(c, tp);
  const std::vector<model::ParamSpec> specs = model::parameter_specs(c);
  train::ShardedWeightsOptions o;
  o.dtype = at::kFloat;
  train::ShardedWeights one(whole_model(), o);  // the units' flat layout (it does not depend on the ranks)
  int64_t elsewhere = 0;
  for (int64_t u = 0; u < one.num_units(); ++u) {
    const int64_t shard = (one.padded_elements(u) + world - 1) / world;
    for (const train::ShardedWeights::Placement& place : one.placements(u)) {
      const model::ParamSpec& spec = specs.at(place.param);
      const at::Tensor positions =
          at::arange(1, place.numel + 1, at::TensorOptions().dtype(at::kLong)).view(spec.shape);
      const at::Tensor slice = model::tensor_parallel_slice(c, layout, spec.name, positions, rank % tp).flatten();
      const at::Tensor flat = slice.masked_select(slice.gt(0)).sub(1 - place.offset);  // unit positions
      elsewhere += flat.lt(rank * shard).logical_or(flat.ge((rank + 1) * shard)).sum().item<int64_t>();
    }
  }
  return elsewhere;
}

int64_t parameter_bytes(const model::DecoderLM& m) {
  int64_t b = 0;
  for (const auto& [name, p] : m.named_parameters()) b += p.numel() * int64_t(p.element_size());
  return b;
}

// Four ranks, ZeRO-3 shards of the whole model, engines of `tp` ranks each.
std::vector<RankResult> sync_from_shards(int64_t tp) {
  constexpr int32_t kWorld = 4;
  const model::DecoderLM whole = whole_model();
  std::vector<RankResult> results(kWorld);
  test::run_group_ranks(kWorld, [&](const hw::ProcessGroup& group) {
    at::NoGradGuard no_grad;
    train::ShardedWeightsOptions o;
    o.dtype = at::kFloat;
    o.dp = train::DataParallel(&group, c10::Device(c10::kCPU));
    o.shard = true;
    o.gather_per_use = true;
    o.trainable = false;
    train::ShardedWeights units(whole_model(), o);
    const std::unique_ptr<hw::ProcessGroup> engine_group = rollout::engine_group(group, tp, "sync-test");
    model::ModelOptions mo;
    rollout::RolloutEngine eng(tp > 1 ? rollout::tensor_parallel_engine_model(whole.config(), mo, *engine_group)
                                      : model::DecoderLM(whole.config(), mo),
                               small_pool());
    RankResult& r = results[size_t(group.rank())];
    r.report = controller::sync_engine_from_units(units, eng);
    r.mismatches = compare_to_slices(eng, whole, tp, group.rank() % tp);
    r.engine_param_bytes = parameter_bytes(eng.model());
    // The reverse direction: the engine gives its memory back until the next sync.
    eng.release_weights();
    for (const auto& [name, p] : eng.model().named_parameters())
      if (!hw::is_storage_released(p)) r.kept_after_release.push_back(name);
  });
  return results;
}

}  // namespace

TEST_CASE("engine sync: ZeRO-3 shards give each rank exactly its tensor-parallel slices", "[controller][tp]") {
  const model::DecoderLM whole = whole_model();
  const int64_t whole_bytes = parameter_bytes(whole);
  // The units' own layout: 4 layers and the outer unit, each padded to a multiple of 4 ranks.
  int64_t padded_total = 0, largest_unit = 0;
  {
    train::ShardedWeightsOptions o;
    o.dtype = at::kFloat;
    train::ShardedWeights one(whole_model(), o);
    for (int64_t u = 0; u < one.num_units(); ++u) {
      const int64_t padded = (one.padded_elements(u) + 3) / 4 * 4;
      padded_total += padded;
      largest_unit = std::max(largest_unit, padded * 4);
    }
  }
  for (const int64_t tp : {1, 2, 4}) {
    INFO("engines of " << tp << " rank(s) over 4 ranks");
    const std::vector<RankResult> results = sync_from_shards(tp);
    for (size_t rank = 0; rank < results.size(); ++rank) {
      const RankResult& r = results[rank];
      CHECK(r.mismatches.empty());
      if (!r.mismatches.empty()) FAIL_CHECK("first mismatching parameter: " << r.mismatches.front());
      CHECK(r.report.shared == 0);
      CHECK(r.report.source_bytes == whole_bytes);
      if (tp == 1) {
        // A whole engine: every unit was all-gathered, 3 of its 4 shards from the other ranks,
        // and no more than one unit held at a time.
        CHECK(r.report.received_bytes == padded_total / 4 * 3 * 4);
        CHECK(r.report.peak_held_bytes == largest_unit);
      } else {
        // Split engines: exactly the elements of this rank's slices that other ranks' shards hold.
        CHECK(r.report.received_bytes == slice_elements_held_elsewhere(whole.config(), tp, int64_t(rank), 4) * 4);
        CHECK(r.report.peak_held_bytes < largest_unit);
      }
      CHECK(r.report.peak_held_bytes < whole_bytes / 2);
      // The engine keeps its slice of the split tensors (plus the norms, whole everywhere).
      CHECK(r.report.engine_bytes == r.engine_param_bytes);
      if (tp == 1) CHECK(r.report.engine_bytes == whole_bytes);
      // (the shape of one rank's part: its heads, KV heads, MLP width and padded vocabulary)
      const model::ModelConfig part =
          model::rank_config(whole.config(), model::tensor_parallel_layout(whole.config(), tp));
      CHECK(r.report.engine_bytes == model::parameter_count(part) * 4);
      // About 1/tp of the model (the norms whole, the KV heads replicated at tp = 4).
      CHECK(double(r.report.engine_bytes * tp) < 1.1 * double(whole_bytes));
      INFO("kept after release_weights: " << (r.kept_after_release.empty() ? "" : r.kept_after_release.front()));
      CHECK(r.kept_after_release.empty());
    }
  }
}

TEST_CASE("engine sync: a whole model gives a split engine its slices, nothing moving between ranks",
          "[controller][tp]") {
  const model::DecoderLM whole = whole_model();
  std::vector<RankResult> results(2);
  test::run_group_ranks(2, [&](const hw::ProcessGroup& group) {
    rollout::RolloutEngine eng(rollout::tensor_parallel_engine_model(whole.config(), model::ModelOptions{}, group),
                               small_pool());
    RankResult& r = results[size_t(group.rank())];
    r.report = controller::sync_engine_from_model(whole, eng);
    r.mismatches = compare_to_slices(eng, whole, 2, group.rank());
    r.engine_param_bytes = parameter_bytes(eng.model());
  });
  for (const RankResult& r : results) {
    CHECK(r.mismatches.empty());
    CHECK(r.report.received_bytes == 0);
    CHECK(r.report.shared == 0);  // a split engine never aliases the trainer's tensors
    CHECK(r.report.engine_bytes == r.engine_param_bytes);
  }
  // A whole engine in the source's dtype shares every tensor but the ones it fuses.
  rollout::RolloutEngine shared(model::DecoderLM(whole.config(), model::ModelOptions{}), small_pool());
  const controller::EngineSyncReport report = controller::sync_engine_from_model(whole, shared);
  CHECK(report.shared > 0);
  CHECK(report.shared + report.copied == int64_t(whole.named_parameters().size()));
  CHECK(report.engine_bytes < parameter_bytes(whole));
  CHECK(compare_to_slices(shared, whole, 1, 0).empty());
}

#endif  // VERLPP_CPU_REF_HAS_GLOO
