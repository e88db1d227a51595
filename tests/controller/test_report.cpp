// The run report: the HTML is parsed back (one <svg> per panel with data, one polyline point per
// finite value, null/non-finite values split lines, absent ones do not, strings escaped), and
// read_metrics names file:line on bad input.
#include <verlpp/tracking/report.hpp>
#include <verlpp/core/error.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <unistd.h>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using Catch::Contains;
using nlohmann::json;
using verlpp::tracking::read_metrics;
using verlpp::tracking::ReportInfo;
using verlpp::tracking::write_report;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

std::string temp_path(const std::string& name) {
  return "/tmp/verlpp-report-test-" + std::to_string(getpid()) + "-" + name;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The value of attribute `name` in the tag text `tag` ("" if absent).
std::string attribute(const std::string& tag, const std::string& name) {
  const std::string key = " " + name + "=\"";
  const size_t at = tag.find(key);
  if (at == std::string::npos) return "";
  const size_t begin = at + key.size();
  return tag.substr(begin, tag.find('"', begin) - begin);
}

// Every polyline of the page as (data-series, points as (x, y) pixels), in document order.
std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>> polylines(const std::string& html) {
  std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>> out;
  for (size_t at = html.find("<polyline"); at != std::string::npos; at = html.find("<polyline", at + 1)) {
    const std::string tag = html.substr(at, html.find("/>", at) - at);
    std::vector<std::pair<double, double>> points;
    std::istringstream in(attribute(tag, "points"));
    std::string pair;
    while (in >> pair) {
      const size_t comma = pair.find(',');
      REQUIRE(comma != std::string::npos);
      points.emplace_back(std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1)));
    }
    out.emplace_back(attribute(tag, "data-series"), points);
  }
  return out;
}

std::string render(const std::vector<json>& rows, const ReportInfo& info = {}) {
  const std::string path = temp_path("report.html");
  write_report(rows, path, info);
  std::string html = read_all(path);
  std::remove(path.c_str());
  return html;
}

}  // namespace

TEST_CASE("report: one chart per panel that has a finite value", "[report]") {
  std::vector<json> rows;
  for (int step = 1; step <= 6; ++step) {
    json row = {{"step", step},
                {"critic/score/mean", 0.1 * step},
                {"actor/entropy", 2.0 - 0.1 * step},
                {"actor/pg_loss", 0.5},  // plotted by no panel: table only
                {"timing_s/gen", 1.5},
                {"timing_s/update_actor", 0.7},
                {"timing_s/step", 3.0},           // excluded from the timing panel
                {"actor/ppo_kl", nullptr},        // KL present but never finite: no chart
                {"response_length/mean", kNaN}};  // likewise
    if (step % 3 == 0) row["val/arith/acc"] = 0.2 * step / 3;
    rows.push_back(row);
  }
  // reward, validation accuracy, entropy, stage timings
  std::string html = render(rows);
  CHECK(count(html, "<svg") == 4);
  CHECK(count(html, "</svg>") == 4);
  CHECK(count(html, "data-series=\"timing_s/step\"") == 0);
  CHECK(count(html, "data-series=\"actor/ppo_kl\"") == 0);
  CHECK(count(html, "data-series=\"timing_s/gen\"") == 1);
  CHECK(count(html, "data-series=\"val/arith/acc\"") == 1);  // steps 3 and 6 joined: one line
  CHECK_THAT(html, Contains("actor/pg_loss"));               // the last-step table lists every metric
  CHECK(count(html, "<script") == 0);

  // Adding memory and a KL value brings two more panels.
  rows[2]["memory/rss_gib"] = 1.25;
  rows[4]["critic/kl"] = 0.01;
  html = render(rows);
  CHECK(count(html, "<svg") == 6);
}

TEST_CASE("report: validation plots verl's val-core figures but their spreads", "[report]") {
  std::vector<json> rows;
  for (int step = 0; step <= 4; step += 2)
    rows.push_back({{"step", step},
                    {"critic/score/mean", 0.1 * step},
                    {"val-core/arith/reward/mean@4", 0.1 * step},
                    {"val-core/arith/reward/best@4/mean", 0.2 * step},
                    {"val-core/arith/reward/best@4/std", 0.01},
                    {"val-aux/arith/reward/worst@4/mean", 0.05 * step},
                    {"val/arith/acc", 0.1 * step}});
  const std::string html = render(rows);
  CHECK(count(html, "<svg") == 2);  // reward, validation
  CHECK(count(html, "data-series=\"val-core/arith/reward/mean@4\"") == 1);
  CHECK(count(html, "data-series=\"val-core/arith/reward/best@4/mean\"") == 1);
  CHECK(count(html, "data-series=\"val-core/arith/reward/best@4/std\"") == 0);
  CHECK(count(html, "data-series=\"val-aux/arith/reward/worst@4/mean\"") == 0);
  CHECK(count(html, "data-series=\"val/arith/acc\"") == 0);  // the older name: table only
  CHECK_THAT(html, Contains("val-aux/arith/reward/worst@4/mean"));
}

TEST_CASE("report: a series' polylines hold exactly its finite points, split at gaps", "[report]") {
  // step:  1    2     3    4   5   6    7   8 (key absent)  9
  const std::vector<double> score = {1.0, kNaN, kNaN, 2.0, 3.0, kInf, 4.0, kNaN, 2.5};
  std::vector<json> rows;
  for (size_t i = 0; i < score.size(); ++i) {
    json row = {{"step", static_cast<int>(i + 1)}};
    if (i == 1)
      row["critic/score/mean"] = nullptr;
    else if (i != 7)
      row["critic/score/mean"] = score[i];  // NaN / inf held as doubles
    rows.push_back(row);
  }
  const std::string html = render(rows);
  REQUIRE(count(html, "<svg") == 1);
  size_t num_points = 0, num_lines = 0;
  std::vector<std::pair<double, double>> all;
  for (const auto& [series, points] : polylines(html)) {
    REQUIRE(series == "critic/score/mean");
    ++num_lines;
    num_points += points.size();
    all.insert(all.end(), points.begin(), points.end());
  }
  size_t finite = 0;
  for (double v : score) finite += std::isfinite(v);
  CHECK(num_points == finite);
  CHECK(num_lines == 3);  // runs {1}, {2, 3}, {4, 2.5}: null, NaN and inf cut; an absent key does not
  // x grows with the step; a larger value is drawn higher (smaller pixel y).
  REQUIRE(all.size() == 5);
  for (size_t i = 1; i < all.size(); ++i) CHECK(all[i].first > all[i - 1].first);
  CHECK(all[1].second < all[0].second);  // 2.0 above 1.0
  CHECK(all[3].second < all[2].second);  // 4.0 above 3.0
  CHECK(all[4].second > all[3].second);  // 2.5 below 4.0
  // Every point inside the drawing.
  const std::string svg = html.substr(html.find("<svg"));
  const double width = std::stod(attribute(svg.substr(0, svg.find('>')), "width"));
  const double height = std::stod(attribute(svg.substr(0, svg.find('>')), "height"));
  for (const auto& [x, y] : all) {
    CHECK(x > 0);
    CHECK(x < width);
    CHECK(y > 0);
    CHECK(y < height);
  }
}

TEST_CASE("report: every string is HTML-escaped", "[report]") {
  ReportInfo info;
  info.title = "<script>alert('x')</script> & co";
  info.summary = {{"model <b>", "a \"quoted\" & <i>value</i>"}};
  info.config = {{"trainer", {{"experiment_name", "</pre><script>bad()</script>"}}}};
  std::vector<json> rows = {{{"step", 1}, {"val/<img>/acc", 0.5}, {"note", "<script>x</script>"}},
                            {{"step", 2}, {"val/<img>/acc", 0.75}, {"note", "<script>x</script>"}}};
  const std::string html = render(rows, info);
  CHECK(count(html, "<script") == 0);
  CHECK(count(html, "<b>") == 0);
  CHECK(count(html, "<i>") == 0);
  CHECK(count(html, "<img") == 0);
  CHECK_THAT(html, Contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; co"));
  CHECK_THAT(html, Contains("a &quot;quoted&quot; &amp; &lt;i&gt;value&lt;/i&gt;"));
  CHECK_THAT(html, Contains("data-series=\"val/&lt;img&gt;/acc\""));
  CHECK_THAT(html, Contains("<details>"));  // the config is shown, collapsed
  CHECK(count(html, "</pre>") == 1);        // the config's own "</pre>" was escaped
  CHECK(count(html, "<svg") == 1);
}

TEST_CASE("report: read_metrics reads rows, Python's NaN/Infinity, and names file:line of a bad one", "[report]") {
  const std::string path = temp_path("metrics.jsonl");
  {
    std::ofstream out(path);
    out << R"({"step": 1, "actor/pg_loss": 0.5, "actor/grad_norm": NaN, "x": -Infinity, "s": "NaN, Infinity"})"
        << "\n"
        << "\n"
        << R"({"step": 2, "actor/pg_loss": null, "actor/grad_norm": Infinity})"
        << "\r\n";
  }
  const auto rows = read_metrics(path);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0]["step"] == 1);
  CHECK(rows[0]["actor/pg_loss"].get<double>() == 0.5);
  CHECK(std::isnan(rows[0]["actor/grad_norm"].get<double>()));
  CHECK(rows[0]["x"].get<double>() == -kInf);
  CHECK(rows[0]["s"] == "NaN, Infinity");  // inside a string: untouched
  CHECK(rows[1]["actor/pg_loss"].is_null());
  CHECK(rows[1]["actor/grad_norm"].get<double>() == kInf);

  {
    std::ofstream out(path);
    out << R"({"step": 1, "a": 1.0})"
        << "\n"
        << R"({"step": 2, "a": 2.0})"
        << "\n"
        << R"({"step": 3, "a": )"
        << "\n";  // truncated, as after a crash mid-write
  }
  try {
    read_metrics(path);
    FAIL("a malformed line must be an error");
  } catch (const verlpp::Error& e) {
    CHECK(e.where() == path + ":3");
    CHECK_THAT(e.what(), Contains(path + ":3"));
  }
  {
    std::ofstream out(path);
    out << R"({"step": 1})"
        << "\n"
        << "[1, 2]\n";
  }
  CHECK_THROWS_WITH(read_metrics(path), Contains(path + ":2") && Contains("object"));
  std::remove(path.c_str());
  CHECK_THROWS_WITH(read_metrics(path), Contains(path));  // absent file
  CHECK_THROWS_WITH(read_metrics("/tmp"), Contains("/tmp") && Contains("no such metrics file"));
}

TEST_CASE("report: missing, null, non-finite and odd rows do not crash", "[report]") {
  std::vector<json> rows = {
      json::object(),  // no step: x is its position
      {{"step", nullptr}, {"critic/score/mean", nullptr}},
      {{"step", 3}, {"critic/score/mean", kNaN}, {"actor/entropy", "not a number"}},
      json::array({1, 2}),  // not an object: skipped
      {{"step", 5}, {"critic/score/mean", -kInf}, {"memory/rss_gib", true}},
  };
  std::string html;
  REQUIRE_NOTHROW(html = render(rows));
  CHECK(count(html, "<svg") == 0);
  CHECK_THAT(html, Contains("No plottable metrics"));
  CHECK_THAT(html, Contains("</html>"));

  REQUIRE_NOTHROW(html = render({}));
  CHECK(count(html, "<svg") == 0);

  // One finite point: a chart with a one-point line (and a dot so it is visible).
  rows.push_back({{"step", 6}, {"critic/score/mean", 0.25}});
  REQUIRE_NOTHROW(html = render(rows));
  CHECK(count(html, "<svg") == 1);
  const auto lines = polylines(html);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].second.size() == 1);
  CHECK(count(html, "<circle") == 1);
}

TEST_CASE("report: a metrics file round-trips into a report", "[report]") {
  const std::string metrics = temp_path("roundtrip.jsonl");
  {
    std::ofstream out(metrics);
    for (int step = 1; step <= 20; ++step)
      out << json{{"step", step},
                  {"critic/rewards/mean", std::sin(step * 0.3)},
                  {"response_length/mean", 100 + step},
                  {"perf/throughput", 1234.5}}
                 .dump()
          << "\n";
  }
  const std::string html_path = temp_path("roundtrip.html");
  ReportInfo info;
  info.summary = {{"algorithm", "grpo"}};
  write_report(read_metrics(metrics), html_path, info);
  const std::string html = read_all(html_path);
  CHECK(count(html, "<svg") == 2);  // reward, response length
  size_t points = 0;
  for (const auto& line : polylines(html)) points += line.second.size();
  CHECK(points == 40);
  CHECK_THAT(html, Contains("Last step (20)"));
  CHECK_THAT(html, Contains("perf/throughput"));
  CHECK_THAT(html, Contains("grpo"));
  std::remove(metrics.c_str());
  std::remove(html_path.c_str());
}
