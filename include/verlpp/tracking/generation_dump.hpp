// Generated samples written as verl writes them: trainer.rollout_data_dir gets each training
// step's samples and trainer.validation_data_dir each evaluation's, as <dir>/<step>.jsonl, one
// JSON object per sample with verl's keys in verl's order (_dump_generations):
//   input (the prompt, decoded without special tokens), output (the response, likewise),
//   gts (reward_model.ground_truth), score (the sequence's reward), step, then the extra keys
//   (verl's reward extra infos: "reward" for validation; verlpp adds "advantage" for training).
// trainer.log_val_generations picks N validation samples per evaluation as verl does.
#pragma once

#include <verlpp/tracking/loggers.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace verlpp::tracking {

// One sample of a dump.
struct GenerationRecord {
  std::string input, output;
  nlohmann::json gts;  // null when the row has none
  double score = 0;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // keys after "step", in order
};

// Writes `records` to <dir>/<step>.jsonl (the folder made if needed; a file of the same step is
// replaced, as when a resumed run repeats a step); returns the file's path.
std::string dump_generations(const std::string& dir, int64_t step, const std::vector<GenerationRecord>& records);

// verl's _maybe_log_val_generations: the samples sorted by input (stable), shuffled as numpy's
// RandomState(42).shuffle does, and the first `n` kept (all when fewer; none when n <= 0).
std::vector<ValGeneration> pick_val_generations(std::vector<ValGeneration> samples, int64_t n);

}  // namespace verlpp::tracking
