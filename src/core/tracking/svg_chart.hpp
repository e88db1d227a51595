// Line charts (the run report) and bar charts (verlpp-bench --html) as inline SVG. Each run of
// consecutive finite points of a series is one <polyline class="series" data-series="label">,
// so a non-finite value is a gap and a test can count a series' points in the markup. A series
// of few points also gets a dot per point (sparse validation metrics stay visible).
#pragma once

#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace verlpp::tracking::svg {

// One line: x[i], y[i] pairs in order; a non-finite x or y is a gap.
struct Series {
  std::string label;
  std::vector<double> x, y;
};

// One chart: a title, axis labels and its lines (colours from a fixed palette, in order).
struct LineChart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  double x_min = 0, x_max = -1;  // x range to cover besides the data (so charts align); none if min > max
};

// Horizontal grouped bars (svg_bars.cpp): one group per category, one bar per series in each.
// A non-finite value draws no bar but a note (`missing_note`, e.g. "skipped").
struct BarChart {
  std::string title, value_label;
  std::vector<std::string> series;          // legend, in colour order
  std::vector<std::string> categories;      // one group of bars each, top to bottom
  std::vector<std::vector<double>> values;  // [category][series]
  std::string missing_note = "n/a";
  double reference = std::numeric_limits<double>::quiet_NaN();  // a dashed line at this value, if finite
};

// `text` with & < > " ' replaced by entities: safe in element content and in quoted attributes.
std::string escape(std::string_view text);
// A number for a label or a table: up to 6 significant digits; "NaN", "inf", "-inf" otherwise.
std::string format_value(double value);
// "Nice" tick values (1, 2, 5 times a power of ten, spaced at least `min_step`) covering
// [lo, hi], about `target` of them; the first and last ticks bound the data.
std::vector<double> nice_ticks(double lo, double hi, int target, double min_step = 0.0);
// The <svg> element of `chart` (axes, ticks, tick labels, axis labels, title, legend).
std::string render(const LineChart& chart);
// The <svg> element of `chart` (value axis from 0 with ticks, category labels, legend).
std::string render(const BarChart& chart);

}  // namespace verlpp::tracking::svg
