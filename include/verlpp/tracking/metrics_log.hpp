// The durability rules of metrics.jsonl (one JSON row per step, appended as the run goes): a
// step's row is on disk (fsync'd) before that step's checkpoint is committed, and a resumed run
// first cuts the file back to the rows of the steps its checkpoint covers, so that after any
// interruption the file holds the rows of the uninterrupted run: the same steps, in order, each
// once. The appending itself is the trainer's (rl_steps.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace verlpp::tracking {

// fsync(2) of the file at `path`: what was written to it (through any descriptor or stream, once
// flushed) survives a crash of the machine. Error naming the file if it cannot be synced.
void sync_file(const std::string& path);

// What cutting a metrics file back to a checkpoint found.
struct MetricsTrim {
  std::vector<int64_t> kept_steps;      // the "step" of each row kept, in file order
  std::vector<int64_t> dropped_steps;   // rows past the checkpoint, removed (the run writes them again)
  bool torn_last_line = false;          // an unterminated last line (a kill mid-write) was removed
  std::vector<int64_t> missing_steps;   // steps 1..step without a row (lost before rows were durable)
  std::vector<int64_t> repeated_steps;  // steps with more than one row kept
  // One line per finding above, for the run's log (empty when the file was already exact).
  std::vector<std::string> notes(const std::string& path, int64_t step) const;
};

// Rewrites the metrics file at `path` (absent: nothing to do) to its rows of steps <= `step`,
// byte for byte, dropping an unterminated last line, and syncs it. The rewrite goes through a
// temporary file and a rename, so a kill during it leaves the old file or the new one. A
// complete line that is not a JSON object with an integer "step" is an Error naming file:line
// (the file is left as it was: such a line is not one the trainer writes).
MetricsTrim trim_metrics(const std::string& path, int64_t step);

}  // namespace verlpp::tracking
