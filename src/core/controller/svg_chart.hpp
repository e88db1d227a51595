// Line charts as inline SVG for the run report (internal to the controller layer). Each run of
// consecutive finite points of a series is one <polyline class="series" data-series="label">,
// so a non-finite value is a gap and a test can count a series' points in the markup. A series
// of few points also gets a dot per point (sparse validation metrics stay visible).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace verlpp::controller::svg {

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

// `text` with & < > " ' replaced by entities: safe in element content and in quoted attributes.
std::string escape(std::string_view text);
// A number for a label or a table: up to 6 significant digits; "NaN", "inf", "-inf" otherwise.
std::string format_value(double value);
// "Nice" tick values (1, 2, 5 times a power of ten, spaced at least `min_step`) covering
// [lo, hi], about `target` of them; the first and last ticks bound the data.
std::vector<double> nice_ticks(double lo, double hi, int target, double min_step = 0.0);
// The <svg> element of `chart` (axes, ticks, tick labels, axis labels, title, legend).
std::string render(const LineChart& chart);

}  // namespace verlpp::controller::svg
