// The console backend: one line per step (the metrics a reader watches first) and, with
// trainer.log_val_generations, each evaluation's samples as a small table, both through the
// run's message hook (the `verlpp` command prints them above its progress bar).
#include "logger_backends.hpp"

#include <fmt/format.h>

namespace verlpp::tracking {
namespace {

using json = nlohmann::json;

std::string fixed(const json& row, const char* key, int precision = 3) {
  if (!row.contains(key) || !row[key].is_number()) return "-";
  return fmt::format("{:.{}f}", row[key].get<double>(), precision);
}

// `text` on one line, cut to `width` characters (UTF-8 sequences kept whole).
std::string one_line(const std::string& text, size_t width) {
  std::string out;
  size_t shown = 0;
  for (size_t i = 0; i < text.size() && shown < width;) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (c == '\n' || c == '\r' || c == '\t')
      out += ' ';
    else
      out.append(text, i, len);
    i += len;
    ++shown;
    if (shown == width && i < text.size()) out += "...";
  }
  return out;
}

class ConsoleLogger : public MetricsLogger {
 public:
  explicit ConsoleLogger(const LoggerRun& run) : run_(run) {}

  void log(const json& metrics, int64_t step) override {
    if (run_.message) run_.message(console_step_line(metrics, step, run_.total_steps));
  }

  void log_val_generations(const std::vector<ValGeneration>& samples, int64_t step) override {
    if (!run_.message || samples.empty()) return;
    run_.message(fmt::format("validation generations at step {} ({} samples):", step, samples.size()));
    for (size_t i = 0; i < samples.size(); ++i) {
      const ValGeneration& g = samples[i];
      run_.message(fmt::format("  [{}] score {:g} | input: {}", i + 1, g.score, one_line(g.input, 100)));
      run_.message(fmt::format("       output: {}", one_line(g.output, 100)));
    }
  }

 private:
  LoggerRun run_;
};

}  // namespace

std::string console_step_line(const json& row, int64_t step, int64_t total_steps) {
  std::string line = step == 0 ? "before RL" : fmt::format("step {:>3}/{}", step, total_steps);
  if (row.contains("critic/score/mean")) line += " | score " + fixed(row, "critic/score/mean");
  if (row.contains("val/acc")) line += " | val/acc " + fixed(row, "val/acc");
  // verl's headline validation figures (val-core/<source>/<var>/<metric>), their spreads left to
  // the files and the report's table.
  for (const auto& [key, value] : row.items())
    if (key.rfind("val-core/", 0) == 0 && value.is_number() &&
        !(key.size() >= 4 && key.compare(key.size() - 4, 4, "/std") == 0))
      line += " | " + key + " " + fixed(row, key.c_str());
  if (row.contains("actor/pg_loss")) line += " | pg_loss " + fixed(row, "actor/pg_loss", 4);
  if (row.contains("actor/kl_loss")) line += " | kl " + fixed(row, "actor/kl_loss", 4);
  if (row.contains("actor/entropy")) line += " | entropy " + fixed(row, "actor/entropy");
  if (row.contains("response_length/mean")) line += " | len " + fixed(row, "response_length/mean", 1);
  if (row.contains("timing_s/step")) line += " | " + fixed(row, "timing_s/step", 1) + " s";
  return line;
}

// trainer.logger's "console", registered when the library loads.
[[maybe_unused]] const bool kRegistered = logger_factories().add(
    "console",
    [](const LoggerRun& run) -> std::unique_ptr<MetricsLogger> { return std::make_unique<ConsoleLogger>(run); });

}  // namespace verlpp::tracking
