// The run report: metrics.jsonl (one JSON object per training step, verl's metric names) read
// back and rendered as one self-contained HTML page of inline SVG line charts plus a table of the
// last step. Nothing is fetched (no scripts, fonts or styles from elsewhere), so the file can be
// opened offline or attached to an issue. A null or non-finite value is a gap in its line; a
// metric absent from a row (val/* between validation steps) is no point, so its line goes on.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace verlpp::tracking {

// What the report shows besides the plots.
struct ReportInfo {
  std::string title = "verlpp run";
  std::vector<std::pair<std::string, std::string>> summary;  // key/value lines shown at the top
  nlohmann::json config;                                     // the resolved config, shown collapsed (may be null)
  // trainer.log_val_generations: rows {"step": N, "samples": [{input, output, score}, ...]}
  // (val_generations.jsonl), shown as one table per evaluation.
  std::vector<nlohmann::json> val_generations;
};

// Reads metrics.jsonl at `metrics_path` (a malformed line is an Error naming file and line).
// Blank lines are skipped; Python's bare NaN / Infinity / -Infinity tokens are read as doubles.
std::vector<nlohmann::json> read_metrics(const std::string& metrics_path);
// One line of a metrics file as read_metrics reads it; an Error naming `where` (file:line) if it
// is not a JSON object.
nlohmann::json parse_metrics_line(const std::string& line, const std::string& where);

// Writes a self-contained HTML report (inline SVG plots; no scripts or fonts fetched) of `rows` to `html_path`.
// One chart per panel (reward, validation accuracy, KL, entropy, response length, stage timings,
// memory; a reward model's loss and pairwise accuracy) that has at least one finite point; x is each row's "step" (its
// 1-based index if absent).
void write_report(const std::vector<nlohmann::json>& rows, const std::string& html_path, const ReportInfo& info);

}  // namespace verlpp::tracking
