// The trainer's weights into a rollout engine (see the header): from units or from a whole model.
#include <verlpp/controller/engine_sync.hpp>

#include <verlpp/model/decoder.hpp>
#include <verlpp/rollout/engine.hpp>
#include <verlpp/train/sharded_weights.hpp>

#include <chrono>
#include <set>

namespace verlpp::controller {

namespace {

int64_t bytes_of(const at::Tensor& t) { return t.numel() * int64_t(t.element_size()); }

// Bytes of the engine's parameters whose storage is not among `shared_storages` (its own).
int64_t own_engine_bytes(const rollout::RolloutEngine& engine, const std::set<const void*>& shared_storages) {
  int64_t bytes = 0;
  std::set<const void*> counted;  // a tied head is the embedding: once
  for (const auto& [name, t] : engine.model().named_parameters()) {
    const void* storage = t.storage().data();
    if (shared_storages.count(storage) == 0 && counted.insert(t.data_ptr()).second) bytes += bytes_of(t);
  }
  return bytes;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

EngineSyncReport sync_engine_from_units(train::ShardedWeights& units, rollout::RolloutEngine& engine) {
  const auto start = std::chrono::steady_clock::now();
  EngineSyncReport report;
  const bool gathers = units.gathers_per_use();
  int64_t unit = 0;
  auto unit_start = std::chrono::steady_clock::now();  // for_each_unit gathers before each call
  units.for_each_unit([&](const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
    int64_t whole = 0;
    for (const auto& [name, t] : tensors) whole += bytes_of(t);
    report.source_bytes += whole;
    if (gathers) {
      // The all-gather brought every shard but this rank's (the padding travels too).
      const int64_t element = tensors.empty() ? 0 : int64_t(tensors.front().second.element_size());
      report.received_bytes += (units.padded_elements(unit) - units.shard_elements(unit)) * element;
      report.peak_held_bytes = std::max(report.peak_held_bytes, units.padded_elements(unit) * element);
    }
    report.copied += engine.update_weights(tensors, rollout::WeightSharing::kCopy).num_copied;
    report.unit_seconds.push_back(seconds_since(unit_start));
    unit_start = std::chrono::steady_clock::now();
    ++unit;
  });
  report.engine_bytes = own_engine_bytes(engine, {});
  report.seconds = seconds_since(start);
  return report;
}

EngineSyncReport sync_engine_from_model(const model::DecoderLM& source, rollout::RolloutEngine& engine) {
  const auto start = std::chrono::steady_clock::now();
  EngineSyncReport report;
  const bool split = engine.model().tensor_parallel() != nullptr;
  // A split engine keeps its slice of each tensor in buffers of its own (cut one at a time).
  const rollout::WeightUpdateReport r =
      split ? engine.update_weights(source.named_parameters(), rollout::WeightSharing::kCopy)
            : engine.update_weights(source);
  report.shared = r.num_shared;
  report.copied = r.num_copied;
  std::set<const void*> storages;
  for (const auto& [name, t] : source.named_parameters()) {
    report.source_bytes += bytes_of(t);
    storages.insert(t.storage().data());
  }
  report.engine_bytes = own_engine_bytes(engine, storages);
  report.seconds = seconds_since(start);
  return report;
}

}  // namespace verlpp::controller
