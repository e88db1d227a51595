// The run report's SVG line charts and verlpp-bench's bar charts. Coordinates are computed here,
// in pixels, with the axis range widened to the outermost "nice" ticks, so every point lies
// inside the plot and the grid. Bars run left to right from 0, so categories of any count stack
// downwards and long workload names fit as labels on the left.
#include "svg_chart.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace verlpp::tracking::svg {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr int kNumColours = sizeof(kPalette) / sizeof(kPalette[0]);

// Pixel layout: the plot area, then the legend to its right.
constexpr double kLeft = 72, kTop = 34, kPlotW = 460, kPlotH = 230, kBottom = 52;
constexpr size_t kMaxDotted = 12;  // series with at most this many points get a dot per point
constexpr double kLegendX = kLeft + kPlotW + 24, kLegendRow = 18, kWidth = 800;

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) { lo = std::min(lo, v), hi = std::max(hi, v); }
  bool empty() const { return lo > hi; }
};

bool finite_point(const Series& s, size_t i) { return std::isfinite(s.x[i]) && std::isfinite(s.y[i]); }

std::string px(double v) { return fmt::format("{:.2f}", v); }

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0) return "0";  // also -0
  return fmt::format("{:.6g}", value);
}

std::vector<double> nice_ticks(double lo, double hi, int target, double min_step) {
  if (!(lo <= hi) || !std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (hi == lo) {  // one value: a small symmetric band around it
    const double pad = lo == 0 ? 1.0 : std::abs(lo) * 0.1;
    lo -= pad, hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude * 10;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  step = std::max(step, min_step);
  const double first = std::floor(lo / step), last = std::ceil(hi / step);
  std::vector<double> ticks;
  for (double k = first; k <= last + 0.5; k += 1) {
    const double v = k * step;
    ticks.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  }
  if (ticks.size() == 1) ticks.push_back(ticks[0] + step);
  return ticks;
}

std::string render(const LineChart& chart) {
  Range xr, yr;
  bool integer_x = true;
  for (const auto& s : chart.series)
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
      if (finite_point(s, i)) {
        xr.add(s.x[i]), yr.add(s.y[i]);
        integer_x = integer_x && s.x[i] == std::floor(s.x[i]);
      }
  const double height =
      std::max(kTop + kPlotH + kBottom, kTop + kLegendRow * static_cast<double>(chart.series.size()) + 16);
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" role=\"img\" aria-label=\"{2}\">\n<title>{2}</title>\n"
      "<text class=\"chart-title\" font-size=\"14\" font-weight=\"600\" x=\"{3}\" y=\"20\">{2}</text>\n",
      kWidth, px(height), escape(chart.title), px(kLeft));
  if (xr.empty()) return out + "<text x=\"80\" y=\"80\">no finite values</text>\n</svg>\n";
  if (chart.x_min <= chart.x_max) {
    xr.add(chart.x_min), xr.add(chart.x_max);
    integer_x = integer_x && chart.x_min == std::floor(chart.x_min) && chart.x_max == std::floor(chart.x_max);
  }

  const std::vector<double> xt = nice_ticks(xr.lo, xr.hi, 8, integer_x ? 1.0 : 0.0);
  const std::vector<double> yt = nice_ticks(yr.lo, yr.hi, 5);
  const double x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
  auto map_x = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * kPlotW; };
  auto map_y = [&](double y) { return kTop + kPlotH - (y - y0) / (y1 - y0) * kPlotH; };
  const double bottom = kTop + kPlotH;

  // Grid and ticks.
  for (double y : yt)
    out += fmt::format(
        "<line class=\"grid\" stroke=\"#e6e6e6\" x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>"
        "<text class=\"tick\" font-size=\"11\" x=\"{3}\" y=\"{4}\" text-anchor=\"end\">{5}</text>\n",
        px(kLeft), px(map_y(y)), px(kLeft + kPlotW), px(kLeft - 6), px(map_y(y) + 4), escape(format_value(y)));
  for (double x : xt)
    out += fmt::format(
        "<line class=\"axis\" stroke=\"#444\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>"
        "<text class=\"tick\" font-size=\"11\" x=\"{0}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        px(map_x(x)), px(bottom), px(bottom + 5), px(bottom + 18), escape(format_value(x)));
  // Axes and their labels.
  out += fmt::format(
      "<line class=\"axis\" stroke=\"#444\" x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>"
      "<line class=\"axis\" stroke=\"#444\" x1=\"{0}\" y1=\"{3}\" x2=\"{0}\" y2=\"{1}\"/>\n"
      "<text class=\"axis-label\" font-size=\"12\" x=\"{4}\" y=\"{5}\" text-anchor=\"middle\">{6}</text>\n"
      "<text class=\"axis-label\" font-size=\"12\" transform=\"translate(16 {7}) rotate(-90)\" "
      "text-anchor=\"middle\">{8}</text>\n",
      px(kLeft), px(bottom), px(kLeft + kPlotW), px(kTop), px(kLeft + kPlotW / 2), px(bottom + 40),
      escape(chart.x_label), px(kTop + kPlotH / 2), escape(chart.y_label));

  // Lines: one polyline per run of finite points; dots too where points are few or alone.
  for (size_t k = 0; k < chart.series.size(); ++k) {
    const Series& s = chart.series[k];
    const char* colour = kPalette[k % kNumColours];
    const size_t n = std::min(s.x.size(), s.y.size());
    size_t num_finite = 0;
    for (size_t i = 0; i < n; ++i) num_finite += finite_point(s, i);
    for (size_t i = 0; i < n;) {
      if (!finite_point(s, i)) {
        ++i;
        continue;
      }
      std::vector<std::string> points;
      size_t j = i;
      for (; j < n && finite_point(s, j); ++j) points.push_back(px(map_x(s.x[j])) + "," + px(map_y(s.y[j])));
      std::string joined;
      for (const auto& p : points) joined += (joined.empty() ? "" : " ") + p;
      out += fmt::format(
          "<polyline class=\"series\" data-series=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\" "
          "points=\"{}\"/>\n",
          escape(s.label), colour, joined);
      if (j - i == 1 || num_finite <= kMaxDotted)
        for (size_t d = i; d < j; ++d)
          out += fmt::format("<circle class=\"dot\" cx=\"{}\" cy=\"{}\" r=\"2.5\" fill=\"{}\"/>\n", px(map_x(s.x[d])),
                             px(map_y(s.y[d])), colour);
      i = j;
    }
    // Legend entry.
    const double ly = kTop + kLegendRow * static_cast<double>(k);
    out += fmt::format(
        "<line class=\"legend-line\" stroke-width=\"3\" x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\"/>"
        "<text class=\"legend\" font-size=\"11\" x=\"{4}\" y=\"{5}\">{6}</text>\n",
        px(kLegendX), px(ly + 6), px(kLegendX + 18), colour, px(kLegendX + 24), px(ly + 10), escape(s.label));
  }
  return out + "</svg>\n";
}

// ---- bar charts (verlpp-bench --html)
// Bar chart layout: category labels, the plot, then the legend to its right.
constexpr double kBarLabelW = 230, kBarTop = 34, kBarPlotW = 400, kBarH = 14, kBarGap = 10, kBarBottom = 48;
constexpr double kBarLegendW = 150, kBarRow = 18;

std::string render(const BarChart& chart) {
  const size_t num_series = std::max<size_t>(1, chart.series.size());
  const double group_h = double(num_series) * kBarH + kBarGap;
  const double plot_h = std::max(group_h * double(chart.categories.size()), kBarRow * double(chart.series.size()));
  const double width = kBarLabelW + kBarPlotW + 24 + kBarLegendW, height = kBarTop + plot_h + kBarBottom;
  double hi = 0;
  for (const auto& row : chart.values)
    for (double v : row)
      if (std::isfinite(v)) hi = std::max(hi, v);
  if (std::isfinite(chart.reference)) hi = std::max(hi, chart.reference);
  const std::vector<double> ticks = nice_ticks(0.0, hi > 0 ? hi : 1.0, 5);
  const double top_value = ticks.empty() ? 1.0 : ticks.back();
  auto map_x = [&](double v) { return kBarLabelW + std::max(0.0, v) / top_value * kBarPlotW; };

  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" role=\"img\" aria-label=\"{2}\">\n<title>{2}</title>\n"
      "<text class=\"chart-title\" font-size=\"14\" font-weight=\"600\" x=\"8\" y=\"20\">{2}</text>\n",
      px(width), px(height), escape(chart.title));
  const double bottom = kBarTop + plot_h;
  for (double t : ticks)
    out += fmt::format(
        "<line class=\"grid\" stroke=\"#e6e6e6\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>"
        "<text class=\"tick\" font-size=\"11\" x=\"{0}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        px(map_x(t)), px(kBarTop), px(bottom), px(bottom + 16), escape(format_value(t)));
  out += fmt::format(
      "<line class=\"axis\" stroke=\"#444\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>"
      "<text class=\"axis-label\" font-size=\"12\" x=\"{3}\" y=\"{4}\" text-anchor=\"middle\">{5}</text>\n",
      px(kBarLabelW), px(kBarTop), px(bottom), px(kBarLabelW + kBarPlotW / 2), px(bottom + 36),
      escape(chart.value_label));
  for (size_t c = 0; c < chart.categories.size(); ++c) {
    const double y0 = kBarTop + group_h * double(c) + kBarGap / 2;
    out += fmt::format("<text class=\"tick\" font-size=\"11\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
                       px(kBarLabelW - 6), px(y0 + double(num_series) * kBarH / 2 + 4), escape(chart.categories[c]));
    for (size_t s = 0; s < chart.series.size(); ++s) {
      const double v = c < chart.values.size() && s < chart.values[c].size() ? chart.values[c][s] : NAN;
      const double y = y0 + kBarH * double(s);
      const char* colour = kPalette[s % kNumColours];
      if (!std::isfinite(v)) {
        out += fmt::format("<text class=\"note\" font-size=\"10\" fill=\"#888\" x=\"{}\" y=\"{}\">{}: {}</text>\n",
                           px(kBarLabelW + 4), px(y + kBarH - 3), escape(chart.series[s]), escape(chart.missing_note));
        continue;
      }
      out += fmt::format(
          "<rect class=\"bar\" data-series=\"{0}\" x=\"{1}\" y=\"{2}\" width=\"{3}\" height=\"{4}\" fill=\"{5}\"/>"
          "<text class=\"value\" font-size=\"10\" x=\"{6}\" y=\"{7}\">{8}</text>\n",
          escape(chart.series[s]), px(kBarLabelW), px(y), px(map_x(v) - kBarLabelW), px(kBarH - 2), colour,
          px(map_x(v) + 3), px(y + kBarH - 4), escape(format_value(v)));
    }
  }
  if (std::isfinite(chart.reference))
    out += fmt::format(
        "<line class=\"reference\" stroke=\"#444\" stroke-dasharray=\"4 3\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" "
        "y2=\"{2}\"/>\n",
        px(map_x(chart.reference)), px(kBarTop), px(bottom));
  const double legend_x = kBarLabelW + kBarPlotW + 24;
  for (size_t s = 0; s < chart.series.size(); ++s)
    out += fmt::format(
        "<rect x=\"{0}\" y=\"{1}\" width=\"12\" height=\"12\" fill=\"{2}\"/>"
        "<text class=\"legend\" font-size=\"11\" x=\"{3}\" y=\"{4}\">{5}</text>\n",
        px(legend_x), px(kBarTop + kBarRow * double(s)), kPalette[s % kNumColours], px(legend_x + 18),
        px(kBarTop + kBarRow * double(s) + 10), escape(chart.series[s]));
  return out + "</svg>\n";
}

}  // namespace verlpp::tracking::svg
