// verlpp-bench's shared helpers and output: the suite list, repetition timing (each ends with
// the plugin's device_synchronize, so queued device work is inside the time), the statistics of
// a Measurement, the terminal table, the JSON document and the self-contained HTML report
// (inline SVG bar charts from the tracking layer's svg_chart, no external assets).
// Decision: rows are grouped by workload (shape printed once) with one line per plugin, so the
// plugins being compared sit next to each other; the ratio is baseline median / this median
// (above 1: faster than the baseline).
#include "bench.hpp"
#include "tracking/svg_chart.hpp"  // src/core: escape, format_value, BarChart

#include <verlpp/hw/device.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>

namespace verlpp::bench {

void Target::sync() const {
  if (plugin != nullptr) hw::Device(*plugin, device.has_index() ? device.index() : 0).synchronize();
}

const char* status_name(Status s) {
  switch (s) {
    case Status::ok:
      return "ok";
    case Status::skipped:
      return "skipped";
    case Status::wrong:
      return "wrong";
    case Status::error:
      return "error";
  }
  return "?";
}

namespace {
std::vector<double> sorted(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v;
}
}  // namespace

double Measurement::min_s() const { return seconds.empty() ? 0 : sorted(seconds).front(); }
double Measurement::max_s() const { return seconds.empty() ? 0 : sorted(seconds).back(); }
double Measurement::median_s() const {
  if (seconds.empty()) return 0;
  const std::vector<double> s = sorted(seconds);
  const size_t n = s.size();
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

std::vector<double> time_reps(const Options& o, const Target& t, const std::function<void()>& fn) {
  for (int i = 0; i < o.warmup; ++i) {
    fn();
    t.sync();
  }
  std::vector<double> out;
  for (int i = 0; i < o.reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.sync();
    out.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return out;
}

Measurement make_measurement(const std::string& suite, const std::string& workload, const std::string& shape,
                             const Target& t) {
  Measurement m;
  m.suite = suite;
  m.workload = workload;
  m.shape = shape;
  m.plugin = t.name;
  return m;
}

Measurement skipped(const std::string& suite, const std::string& workload, const std::string& shape, const Target& t,
                    const std::string& reason) {
  Measurement m = make_measurement(suite, workload, shape, t);
  m.status = Status::skipped;
  m.reason = reason;
  return m;
}

const std::vector<Suite>& all_suites() {
  static const std::vector<Suite> suites = {
      {"kernels", "the plugin's kernel table on its device, each checked against LibTorch math first", run_kernels},
      {"algo", "advantage estimators and the policy loss on the plugin's torch device", run_algo},
      {"train", "one actor update (forward, backward, AdamW) of the tiny model on the plugin's device", run_train},
      {"rollout", "RolloutEngine::generate on the plugin's device with its kernels", run_rollout},
      {"collectives", "all_reduce / all_gather through the plugin communicator, ranks as threads", run_collectives},
      {"e2e", "a short GRPO run (RlTrainer, tiny model), per stage from its timing_s/* metrics", run_e2e},
  };
  return suites;
}

double speedup(const std::vector<Measurement>& all, const Measurement& m, const std::string& baseline) {
  if (m.status != Status::ok || m.seconds.empty()) return 0;
  for (const Measurement& b : all)
    if (b.plugin == baseline && b.suite == m.suite && b.workload == m.workload && b.shape == m.shape)
      return b.status == Status::ok && m.median_s() > 0 ? b.median_s() / m.median_s() : 0;
  return 0;
}

namespace {

namespace svg = verlpp::tracking::svg;

// The workloads in order of first appearance: (suite, workload, shape) and their rows.
struct Group {
  std::string suite, workload, shape;
  std::vector<const Measurement*> rows;
};
std::vector<Group> group_rows(const std::vector<Measurement>& all) {
  std::vector<Group> groups;
  for (const Measurement& m : all) {
    Group* g = nullptr;
    for (Group& x : groups)
      if (x.suite == m.suite && x.workload == m.workload && x.shape == m.shape) g = &x;
    if (g == nullptr) g = &groups.emplace_back(Group{m.suite, m.workload, m.shape, {}});
    g->rows.push_back(&m);
  }
  return groups;
}

// "1234 tokens/s", "1.23 GB/s" or "".
std::string throughput(const Measurement& m) {
  if (m.status != Status::ok || m.work <= 0 || m.median_s() <= 0) return "";
  const double rate = m.work / m.median_s();
  if (m.work_unit == "bytes") return fmt::format("{:.3f} GB/s", rate / 1e9);
  return fmt::format("{:.0f} {}/s", rate, m.work_unit);
}

std::string outcome(const Measurement& m) {
  if (m.status == Status::ok) return "ok";
  if (m.status == Status::wrong)
    return fmt::format("WRONG (not timed; worst error {:.3e}): {}", m.worst_error, m.reason);
  return fmt::format("{}: {}", m.status == Status::skipped ? "skipped" : "ERROR", m.reason);
}

}  // namespace

void print_table(const std::vector<Measurement>& all, const std::string& baseline) {
  std::cout << fmt::format("\n{:<14} {:>10} {:>10} {:>10} {:>18} {:>9}  {}\n", "plugin", "min ms", "median ms",
                           "max ms", "throughput", "vs " + baseline, "status");
  std::string suite, shape;
  for (const Group& g : group_rows(all)) {
    if (g.suite != suite) {
      std::cout << "\n[" << (suite = g.suite) << "]\n";
      shape.clear();
    }
    // The shape once per run of workloads that share it (e2e's stages all do).
    const std::string note = g.shape.empty() ? "" : g.shape == shape ? "  (same shape)" : "  (" + g.shape + ")";
    std::cout << g.workload << note << "\n";
    shape = g.shape;
    for (const Measurement* m : g.rows) {
      if (m->status != Status::ok) {
        std::cout << fmt::format("  {:<12} {:>10} {:>10} {:>10} {:>18} {:>9}  {}\n", m->plugin, "-", "-", "-", "", "",
                                 outcome(*m));
        continue;
      }
      const double ratio = speedup(all, *m, baseline);
      std::cout << fmt::format("  {:<12} {:>10.3f} {:>10.3f} {:>10.3f} {:>18} {:>9}  ok\n", m->plugin, m->min_s() * 1e3,
                               m->median_s() * 1e3, m->max_s() * 1e3, throughput(*m),
                               ratio > 0 ? fmt::format("{:.2f}x", ratio) : "");
    }
  }
  std::cout << std::flush;
}

nlohmann::json to_json(const std::vector<Measurement>& all, const Options& o, const std::string& baseline,
                       const nlohmann::json& machine) {
  nlohmann::json results = nlohmann::json::array();
  for (const Measurement& m : all) {
    nlohmann::json r = {{"suite", m.suite},    {"workload", m.workload},          {"shape", m.shape},
                        {"plugin", m.plugin},  {"status", status_name(m.status)}, {"reason", m.reason},
                        {"seconds", m.seconds}};
    if (m.suite == "kernels") r["worst_error"] = m.worst_error;
    if (m.status == Status::ok) {
      r.update({{"min_s", m.min_s()}, {"median_s", m.median_s()}, {"max_s", m.max_s()}});
      const double ratio = speedup(all, m, baseline);
      r["speedup_vs_baseline"] = ratio > 0 ? nlohmann::json(ratio) : nlohmann::json(nullptr);
      if (m.work > 0) r.update({{"work", m.work}, {"work_unit", m.work_unit}, {"work_per_s", m.work / m.median_s()}});
    }
    results.push_back(r);
  }
  return {{"bench", "verlpp-bench"},
          {"machine", machine},
          {"options",
           {{"suites", o.suites},
            {"plugins", o.plugins},
            {"reps", o.reps},
            {"warmup", o.warmup},
            {"ranks", o.ranks},
            {"quick", o.quick}}},
          {"baseline", baseline},
          {"results", results}};
}

void write_html(const std::string& path, const std::vector<Measurement>& all, const std::string& baseline,
                const nlohmann::json& machine) {
  std::vector<std::string> plugins;
  for (const Measurement& m : all)
    if (std::find(plugins.begin(), plugins.end(), m.plugin) == plugins.end()) plugins.push_back(m.plugin);
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>verlpp-bench</title>\n<style>"
      "body{{font-family:sans-serif;margin:24px;color:#222}}table{{border-collapse:collapse;font-size:13px}}"
      "td,th{{border:1px solid #ddd;padding:3px 8px;text-align:left}}td.num{{text-align:right;font-family:monospace}}"
      "svg.chart{{background:#fff;border:1px solid #eee;margin:8px "
      "0}}</style>\n</head>\n<body>\n<h1>verlpp-bench</h1>\n"
      "<table>\n<tr><th>command</th><td>{}</td></tr>\n<tr><th>date</th><td>{}</td></tr>\n"
      "<tr><th>machine</th><td>{} cores, {} ATen threads, LibTorch {}</td></tr>\n<tr><th>ratio</th><td>median of {} / "
      "median of the plugin (above 1: faster)</td></tr>\n</table>\n",
      svg::escape(machine.value("command", "")), svg::escape(machine.value("date", "")), machine.value("cores", 0),
      machine.value("aten_threads", 0), svg::escape(machine.value("libtorch", "")), svg::escape(baseline));
  const std::vector<Group> groups = group_rows(all);
  std::vector<std::string> suites;
  for (const Group& g : groups)
    if (std::find(suites.begin(), suites.end(), g.suite) == suites.end()) suites.push_back(g.suite);
  for (const std::string& suite : suites) {
    html += fmt::format("<h2>{}</h2>\n", svg::escape(suite));
    svg::BarChart times{suite + ": median time per repetition", "milliseconds", plugins, {}, {}, "not run"};
    svg::BarChart ratios{
        suite + ": speedup against " + baseline, "x (baseline median / median)", plugins, {}, {}, "not run", 1.0};
    std::string rows;
    for (const Group& g : groups) {
      if (g.suite != suite) continue;
      std::vector<double> t(plugins.size(), NAN), r(plugins.size(), NAN);
      for (const Measurement* m : g.rows) {
        const size_t p = size_t(std::find(plugins.begin(), plugins.end(), m->plugin) - plugins.begin());
        const double ratio = speedup(all, *m, baseline);
        if (m->status == Status::ok) t[p] = m->median_s() * 1e3;
        if (ratio > 0) r[p] = ratio;
        rows += fmt::format(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
            "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
            svg::escape(g.workload), svg::escape(g.shape), svg::escape(m->plugin), svg::escape(outcome(*m)),
            m->status == Status::ok ? fmt::format("{:.3f}", m->min_s() * 1e3) : "",
            m->status == Status::ok ? fmt::format("{:.3f}", m->median_s() * 1e3) : "",
            m->status == Status::ok ? fmt::format("{:.3f}", m->max_s() * 1e3) : "", svg::escape(throughput(*m)),
            ratio > 0 ? fmt::format("{:.2f}x", ratio) : "");
      }
      times.categories.push_back(g.workload);
      times.values.push_back(t);
      ratios.categories.push_back(g.workload);
      ratios.values.push_back(r);
    }
    html += "<figure>\n" + svg::render(times) + "</figure>\n";
    if (plugins.size() > 1) html += "<figure>\n" + svg::render(ratios) + "</figure>\n";
    html +=
        "<table>\n<tr><th>workload</th><th>shape</th><th>plugin</th><th>status</th><th>min ms</th><th>median ms</th>"
        "<th>max ms</th><th>throughput</th><th>vs " +
        svg::escape(baseline) + "</th></tr>\n" + rows + "</table>\n";
  }
  html += "</body>\n</html>\n";
  std::ofstream out(path);
  if (!(out << html)) throw Error("--html", fmt::format("cannot write '{}'", path));
}

}  // namespace verlpp::bench
