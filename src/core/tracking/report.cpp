// The run report: metrics.jsonl in, one HTML page out. Panels pick their series by metric name
// (fixed lists, or a prefix for val-core/*, timing_s/* and memory/*), so a stage timing or memory
// metric added to the trainer later shows up without a change here; every metric of the last row
// is in the closing table whether or not a panel plots it.
#include <verlpp/tracking/report.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/json_limits.hpp>
#include <verlpp/core/strings.hpp>

#include "../util/files.hpp"
#include "svg_chart.hpp"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>

namespace verlpp::tracking {
namespace {

using nlohmann::json;

// Python's json writes NaN / Infinity / -Infinity bare, which is not JSON. They are quoted as
// "\u0001verlpp:<token>" before parsing and turned back into doubles after.
const std::string kNonFinite = "\x01verlpp:";
constexpr const char* kNonFiniteTokens[] = {"-Infinity", "Infinity", "NaN"};

std::string quote_non_finite(const std::string& line) {
  std::string out;
  JsonStringScan strings;
  for (size_t i = 0; i < line.size();) {
    bool matched = false;
    if (!strings.in_string())
      for (std::string token : kNonFiniteTokens)
        if (line.compare(i, token.size(), token) == 0) {
          out += "\"\\u0001verlpp:" + token + "\"";
          i += token.size();
          matched = true;
          break;
        }
    if (matched) continue;
    strings.feed(line[i]);
    out += line[i++];
  }
  return out;
}

void restore_non_finite(json& value) {
  if (value.is_structured()) {
    for (auto& item : value) restore_non_finite(item);
  } else if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    if (s.rfind(kNonFinite, 0) != 0) return;
    const std::string token = s.substr(kNonFinite.size());
    const double inf = std::numeric_limits<double>::infinity();
    value = token == "NaN" ? std::numeric_limits<double>::quiet_NaN() : token == "Infinity" ? inf : -inf;
  }
}

// The metric `key` of `row` as a double; NaN when absent, null or not a number.
double number_of(const json& row, const std::string& key) {
  if (!row.is_object()) return std::numeric_limits<double>::quiet_NaN();
  auto it = row.find(key);
  if (it == row.end() || !it->is_number()) return std::numeric_limits<double>::quiet_NaN();
  return it->get<double>();
}

// The x of row `index`: its "step", or its 1-based position when it has none.
double step_of(const json& row, size_t index) {
  const double step = number_of(row, "step");
  return std::isfinite(step) ? step : static_cast<double>(index + 1);
}

// One chart's worth of metric names.
struct Panel {
  std::string title, y_label;
  std::vector<std::string> keys;
};

std::vector<Panel> panels_for(const std::set<std::string>& keys) {
  std::vector<Panel> panels = {
      {"Reward", "mean per sequence", {"critic/score/mean", "critic/rewards/mean"}},
      {"Validation", "mean over prompts", {}},
      {"KL", "KL", {"actor/ppo_kl", "actor/kl_loss", "critic/kl"}},
      {"Entropy", "entropy (nats/token)", {"actor/entropy"}},
      {"Response length", "tokens", {"response_length/mean"}},
      {"Stage timings", "seconds", {}},
      {"Memory", "GiB", {}},
      // verlpp train-rm's runs
      {"Reward model loss", "Bradley-Terry loss", {"rm/loss", "val/rm/loss"}},
      {"Reward model accuracy", "pairs ranked right", {"rm/accuracy", "val/rm/accuracy"}},
  };
  // Validation: verl's val-core/... figures but their spreads; a file from before those names
  // (val/<source>/acc only) plots those instead.
  for (const auto& key : keys)
    if (starts_with(key, "val-core/") && !ends_with(key, "/std")) panels[1].keys.push_back(key);
  const bool has_core = !panels[1].keys.empty();
  for (const auto& key : keys) {
    if (!has_core && starts_with(key, "val/") && ends_with(key, "/acc")) panels[1].keys.push_back(key);
    if (starts_with(key, "timing_s/") && key != "timing_s/step") panels[5].keys.push_back(key);
    if (starts_with(key, "memory/")) panels[6].keys.push_back(key);
  }
  return panels;
}

// A table cell for any JSON value (numbers as the report prints them, strings escaped).
std::string cell(const json& value) {
  if (value.is_number_integer()) return value.dump();
  if (value.is_number()) return svg::escape(svg::format_value(value.get<double>()));
  if (value.is_string()) return svg::escape(value.get_ref<const std::string&>());
  return svg::escape(value.dump(-1, ' ', false, json::error_handler_t::replace));
}

constexpr const char* kStyle =
    R"(body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:24px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
td.num{text-align:right;font-family:ui-monospace,Menlo,Consolas,monospace}
pre{background:#f6f6f6;padding:10px;font-size:12px;overflow:auto}
figure{margin:12px 0}svg.chart{background:#fff;border:1px solid #eee}
svg .chart-title{font-size:14px;font-weight:600}svg .tick,svg .legend{font-size:11px;fill:#333}
svg .axis-label{font-size:12px;fill:#333}svg .axis{stroke:#444}svg .grid{stroke:#e6e6e6}
svg .legend-line{stroke-width:3})";

// trainer.log_val_generations: one table of samples (input, output, score) per evaluation.
std::string val_generations_html(const std::vector<json>& evaluations) {
  if (evaluations.empty()) return "";
  std::string html = "<h2>Validation generations</h2>\n";
  for (const json& e : evaluations) {
    if (!e.is_object() || !e.contains("samples") || !e["samples"].is_array()) continue;
    html += fmt::format(
        "<h3>Step {}</h3>\n<table class=\"metrics\">\n<tr><th>input</th><th>output</th><th>score</th></tr>\n",
        svg::escape(e.contains("step") ? e["step"].dump() : "?"));
    for (const json& g : e["samples"]) {
      auto text = [&](const char* key) {
        return g.contains(key) && g[key].is_string() ? g[key].get<std::string>() : std::string();
      };
      html += fmt::format("<tr><td><pre>{}</pre></td><td><pre>{}</pre></td><td class=\"num\">{}</td></tr>\n",
                          svg::escape(text("input")), svg::escape(text("output")),
                          g.contains("score") ? cell(g["score"]) : std::string());
    }
    html += "</table>\n";
  }
  return html;
}

}  // namespace

std::vector<nlohmann::json> read_metrics(const std::string& metrics_path) {
  if (!files::is_file(metrics_path)) VERLPP_FAIL_AT(metrics_path, "no such metrics file");
  std::ifstream in(metrics_path, std::ios::binary);
  if (!in) VERLPP_FAIL_AT(metrics_path, "cannot open the metrics file");
  std::vector<json> rows;
  std::string line;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    rows.push_back(parse_metrics_line(line, fmt::format("{}:{}", metrics_path, line_no)));
  }
  return rows;
}

nlohmann::json parse_metrics_line(const std::string& line, const std::string& where) {
  json row;
  try {
    row = json::parse(quote_non_finite(line));
  } catch (const json::exception& e) {
    VERLPP_FAIL_AT(where, "malformed metrics line ({}): {}", e.what(), line.substr(0, 120));
  }
  if (!row.is_object()) VERLPP_FAIL_AT(where, "a metrics line must be a JSON object, got {}", row.type_name());
  restore_non_finite(row);
  return row;
}

void write_report(const std::vector<nlohmann::json>& rows, const std::string& html_path, const ReportInfo& info) {
  std::set<std::string> keys;
  for (const auto& row : rows)
    if (row.is_object())
      for (auto it = row.begin(); it != row.end(); ++it) keys.insert(it.key());

  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{0}</title>\n"
      "<style>\n{1}\n</style>\n</head>\n<body>\n<h1>{0}</h1>\n",
      svg::escape(info.title), kStyle);

  // Summary: the caller's lines, then what the rows themselves say.
  auto summary = info.summary;
  summary.emplace_back("metric rows", std::to_string(rows.size()));
  if (!rows.empty())
    summary.emplace_back("steps", svg::format_value(step_of(rows.front(), 0)) + " to " +
                                      svg::format_value(step_of(rows.back(), rows.size() - 1)));
  html += "<table class=\"summary\">\n";
  for (const auto& [key, value] : summary)
    html += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", svg::escape(key), svg::escape(value));
  html += "</table>\n";
  if (!info.config.is_null())
    html += fmt::format("<details><summary>Resolved config</summary>\n<pre>{}</pre>\n</details>\n",
                        svg::escape(info.config.dump(2, ' ', false, json::error_handler_t::replace)));

  // Charts: only the series with a finite point, only the panels with such a series.
  html += "<h2>Metrics</h2>\n";
  double first_step = 0, last_step = -1;  // every chart spans the run's steps, so they align
  for (size_t i = 0; i < rows.size(); ++i) {
    const double step = step_of(rows[i], i);
    first_step = i == 0 ? step : std::min(first_step, step);
    last_step = i == 0 ? step : std::max(last_step, step);
  }
  size_t num_charts = 0;
  for (const Panel& panel : panels_for(keys)) {
    svg::LineChart chart{panel.title, "step", panel.y_label, {}, first_step, last_step};
    for (const auto& key : panel.keys) {
      svg::Series series{key, {}, {}};
      bool any_finite = false;
      for (size_t i = 0; i < rows.size(); ++i) {
        // Absent: no point (val/* appears only on validation steps, and its line joins them).
        // Present but null or not finite: a point that is a gap.
        if (!rows[i].is_object() || !rows[i].contains(key)) continue;
        series.x.push_back(step_of(rows[i], i));
        series.y.push_back(number_of(rows[i], key));
        any_finite = any_finite || std::isfinite(series.y.back());
      }
      if (any_finite) chart.series.push_back(std::move(series));
    }
    if (chart.series.empty()) continue;
    html += "<figure>\n" + svg::render(chart) + "</figure>\n";
    ++num_charts;
  }
  if (num_charts == 0) html += "<p>No plottable metrics.</p>\n";

  // The last row, every metric.
  if (rows.empty()) {
    html += "<h2>Last step</h2>\n<p>No metric rows.</p>\n";
  } else {
    const json& last = rows.back();
    html += fmt::format("<h2>Last step ({})</h2>\n<table class=\"metrics\">\n<tr><th>metric</th><th>value</th></tr>\n",
                        svg::escape(svg::format_value(step_of(last, rows.size() - 1))));
    if (last.is_object())
      for (auto it = last.begin(); it != last.end(); ++it)
        html += fmt::format("<tr><td>{}</td><td class=\"num\">{}</td></tr>\n", svg::escape(it.key()), cell(it.value()));
    html += "</table>\n";
  }
  html += val_generations_html(info.val_generations);
  html += "</body>\n</html>\n";
  files::write_text(html_path, html);
}

}  // namespace verlpp::tracking
