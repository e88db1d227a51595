// Horizontal grouped bar charts as inline SVG (verlpp-bench's --html report). Decision: bars run
// left to right from 0 so that categories of any count stack downwards without crowding and long
// workload names fit as labels on the left; the value axis ends at the outermost "nice" tick.
#include "svg_chart.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace verlpp::controller::svg {
namespace {

constexpr const char* kBarPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                       "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr size_t kNumBarColours = sizeof(kBarPalette) / sizeof(kBarPalette[0]);
// Pixel layout: category labels, the plot, then the legend to its right.
constexpr double kLabelW = 230, kTop = 34, kPlotW = 400, kBar = 14, kGap = 10, kBottom = 48;
constexpr double kLegendW = 150, kRow = 18;

std::string num(double v) { return fmt::format("{:.2f}", v); }

}  // namespace

std::string render(const BarChart& chart) {
  const size_t num_series = std::max<size_t>(1, chart.series.size());
  const double group_h = double(num_series) * kBar + kGap;
  const double plot_h = std::max(group_h * double(chart.categories.size()), kRow * double(chart.series.size()));
  const double width = kLabelW + kPlotW + 24 + kLegendW, height = kTop + plot_h + kBottom;
  double hi = 0;
  for (const auto& row : chart.values)
    for (double v : row)
      if (std::isfinite(v)) hi = std::max(hi, v);
  if (std::isfinite(chart.reference)) hi = std::max(hi, chart.reference);
  const std::vector<double> ticks = nice_ticks(0.0, hi > 0 ? hi : 1.0, 5);
  const double top_value = ticks.empty() ? 1.0 : ticks.back();
  auto map_x = [&](double v) { return kLabelW + std::max(0.0, v) / top_value * kPlotW; };

  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" role=\"img\" aria-label=\"{2}\">\n<title>{2}</title>\n"
      "<text class=\"chart-title\" font-size=\"14\" font-weight=\"600\" x=\"8\" y=\"20\">{2}</text>\n",
      num(width), num(height), escape(chart.title));
  const double bottom = kTop + plot_h;
  for (double t : ticks)
    out += fmt::format(
        "<line class=\"grid\" stroke=\"#e6e6e6\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>"
        "<text class=\"tick\" font-size=\"11\" x=\"{0}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        num(map_x(t)), num(kTop), num(bottom), num(bottom + 16), escape(format_value(t)));
  out += fmt::format(
      "<line class=\"axis\" stroke=\"#444\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>"
      "<text class=\"axis-label\" font-size=\"12\" x=\"{3}\" y=\"{4}\" text-anchor=\"middle\">{5}</text>\n",
      num(kLabelW), num(kTop), num(bottom), num(kLabelW + kPlotW / 2), num(bottom + 36), escape(chart.value_label));
  for (size_t c = 0; c < chart.categories.size(); ++c) {
    const double y0 = kTop + group_h * double(c) + kGap / 2;
    out += fmt::format("<text class=\"tick\" font-size=\"11\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
                       num(kLabelW - 6), num(y0 + double(num_series) * kBar / 2 + 4), escape(chart.categories[c]));
    for (size_t s = 0; s < chart.series.size(); ++s) {
      const double v = c < chart.values.size() && s < chart.values[c].size() ? chart.values[c][s] : NAN;
      const double y = y0 + kBar * double(s);
      const char* colour = kBarPalette[s % kNumBarColours];
      if (!std::isfinite(v)) {
        out += fmt::format("<text class=\"note\" font-size=\"10\" fill=\"#888\" x=\"{}\" y=\"{}\">{}: {}</text>\n",
                           num(kLabelW + 4), num(y + kBar - 3), escape(chart.series[s]), escape(chart.missing_note));
        continue;
      }
      out += fmt::format(
          "<rect class=\"bar\" data-series=\"{0}\" x=\"{1}\" y=\"{2}\" width=\"{3}\" height=\"{4}\" fill=\"{5}\"/>"
          "<text class=\"value\" font-size=\"10\" x=\"{6}\" y=\"{7}\">{8}</text>\n",
          escape(chart.series[s]), num(kLabelW), num(y), num(map_x(v) - kLabelW), num(kBar - 2), colour,
          num(map_x(v) + 3), num(y + kBar - 4), escape(format_value(v)));
    }
  }
  if (std::isfinite(chart.reference))
    out += fmt::format("<line class=\"reference\" stroke=\"#444\" stroke-dasharray=\"4 3\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" "
                       "y2=\"{2}\"/>\n",
                       num(map_x(chart.reference)), num(kTop), num(bottom));
  const double legend_x = kLabelW + kPlotW + 24;
  for (size_t s = 0; s < chart.series.size(); ++s)
    out += fmt::format(
        "<rect x=\"{0}\" y=\"{1}\" width=\"12\" height=\"12\" fill=\"{2}\"/>"
        "<text class=\"legend\" font-size=\"11\" x=\"{3}\" y=\"{4}\">{5}</text>\n",
        num(legend_x), num(kTop + kRow * double(s)), kBarPalette[s % kNumBarColours], num(legend_x + 18),
        num(kTop + kRow * double(s) + 10), escape(chart.series[s]));
  return out + "</svg>\n";
}

}  // namespace verlpp::controller::svg
