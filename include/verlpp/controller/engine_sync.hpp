// The hybrid engine's transition: the trainer's current weights into a rollout engine, from
// whatever layout the trainer keeps them in to whatever layout the engine runs (the 3D reshard).
//
// - Trainer layouts: a whole model on every rank (replicated, ZeRO-1), or flat per-unit shards
//   (train::ShardedWeights: ZeRO-2/3, offload).
// - Engine layouts: the whole model, or one rank's tensor-parallel slices (rollout/tensor_parallel.hpp).
//
// From units sharded over the ranks (ZeRO-3), unit by unit (one decoder layer, or the
// embedding/norm/head unit):
// - into a whole engine, each unit is all-gathered (every rank needs every element), handed to
//   the engine and freed before the next;
// - into engines split over consecutive blocks of t of the units' ranks (rollout::engine_group),
//   each rank receives, point to point, exactly the elements of its own slices that other ranks'
//   shards hold, and sends each other rank what it needs of its own shard: a rank receives
//   about (N - 1) / N of its slices (1/t of the unit), not of the whole unit. The pairs meet in
//   the rounds of a round-robin tournament (N - 1 rounds; in each, the lower rank sends first).
// No rank ever holds the whole model besides the engine's own part; the extra memory at any
// moment is one unit (whole engine) or its slices of one unit plus one round's buffers (split).
// From a whole model nothing moves between ranks; a split engine cuts its slices one tensor at
// a time.
#pragma once

#include <cstdint>
#include <vector>

namespace verlpp::model {
class DecoderLM;
}
namespace verlpp::rollout {
class RolloutEngine;
}
namespace verlpp::train {
class ShardedWeights;
}

namespace verlpp::controller {

// What one sync did on this rank.
struct EngineSyncReport {
  int64_t shared = 0;          // engine parameters now sharing the trainer's storage (no copy)
  int64_t copied = 0;          // engine parameters written into the engine's own buffers
  int64_t received_bytes = 0;  // bytes this rank received from the other ranks
  int64_t engine_bytes = 0;    // bytes written into the engine's own buffers (its slices, or whole tensors)
  int64_t source_bytes = 0;    // bytes of the whole weights the engine was given (every unit, every tensor)
  // The most transient memory at once beyond the engine and the shards: a gathered unit, or one
  // unit's slices with a round's send and receive buffers.
  int64_t peak_held_bytes = 0;
  double seconds = 0;
  std::vector<double> unit_seconds;          // from units: each unit's gather, slicing and copy, in unit order
  std::vector<int64_t> unit_received_bytes;  // from units: each unit's share of received_bytes
};

// Unit by unit from sharded or offloaded weights (collective over the units' ranks); the engine
// copies what it keeps. Offloaded units must have been reloaded by the caller. Point to point
// when the engine is split over consecutive blocks of the units' ranks (the rank's engine rank
// is its units rank mod t), else through the all-gather.
EngineSyncReport sync_engine_from_units(train::ShardedWeights& units, rollout::RolloutEngine& engine);

// From a whole model on this rank. A whole engine in `source`'s dtype and device shares its
// tensors and tracks its version (RolloutEngine::update_weights(model)); a split engine copies
// its slices.
EngineSyncReport sync_engine_from_model(const model::DecoderLM& source, rollout::RolloutEngine& engine);

}  // namespace verlpp::controller
