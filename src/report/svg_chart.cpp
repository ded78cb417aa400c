// See svg_chart.h. Axes get "nice" ticks (1, 2, 5 x 10^k) on y and on a linear x; a log2 x
// axis ticks at the powers of two the data spans.
#include "report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "headcount/error.h"
#include "report/html.h"

namespace headcount::report {

using detail::concat;

namespace {

constexpr double kLeft = 58, kRight = 130, kTop = 28, kBottom = 42;  // room for labels, legend

double nice_step(double range, int target_ticks) {
  const double raw = range / std::max(1, target_ticks);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * magnitude) return m * magnitude;
  return 10 * magnitude;
}

std::string number_label(double v, double step) {
  const int digits = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step)));
  return fixed(v, std::min(digits, 6));
}

}  // namespace

double ChartFrame::px(double x) const {
  const double a = log2_x ? std::log2(x_min) : x_min, b = log2_x ? std::log2(x_max) : x_max;
  const double v = log2_x ? std::log2(x) : x;
  return left + (b > a ? (v - a) / (b - a) : 0.5) * plot_width;
}

double ChartFrame::py(double y) const {
  return top + plot_height - (y_max > y_min ? (y - y_min) / (y_max - y_min) : 0.5) * plot_height;
}

ChartFrame chart_frame(const LineChart& chart) {
  ChartFrame f;
  f.log2_x = chart.log2_x;
  f.left = kLeft;
  f.top = kTop;
  f.plot_width = chart.width - kLeft - kRight;
  f.plot_height = chart.height - kTop - kBottom;
  HEADCOUNT_CHECK(f.plot_width > 0 && f.plot_height > 0, concat("chart ", chart.id, " size"),
                  concat("at least ", kLeft + kRight + 1, " x ", kTop + kBottom + 1),
                  concat(chart.width, " x ", chart.height));
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (const Series& s : chart.series) {
    HEADCOUNT_CHECK(s.x.size() == s.y.size(),
                    concat("chart ", chart.id, " series ", s.name, " points"),
                    concat(s.x.size(), " y values (one per x)"), s.y.size());
    HEADCOUNT_CHECK(s.error.empty() || s.error.size() == s.y.size(),
                    concat("chart ", chart.id, " series ", s.name, " error bars"),
                    concat("none or ", s.y.size()), s.error.size());
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      const double e = s.error.empty() ? 0 : s.error[i];
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || !std::isfinite(e) || e < 0 ||
          (chart.log2_x && s.x[i] <= 0))
        fail(concat("chart ", chart.id, " series ", s.name, " point ", i),
             concat("expected finite values", chart.log2_x ? " and x > 0" : "",
                    " and error >= 0, got x ", s.x[i], " y ", s.y[i], " error ", e));
      x_lo = std::min(x_lo, s.x[i]);
      x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i] - e);
      y_hi = std::max(y_hi, s.y[i] + e);
    }
  }
  if (!(x_lo <= x_hi)) x_lo = x_hi = chart.log2_x ? 1 : 0;  // no points: an empty frame
  if (!(y_lo <= y_hi)) y_lo = y_hi = 0;
  if (y_hi == y_lo) {
    y_lo -= 0.5;
    y_hi += 0.5;
  }
  const double pad = 0.05 * (y_hi - y_lo);
  const double step = nice_step(y_hi - y_lo + 2 * pad, 5);
  f.y_min = std::floor((y_lo - pad) / step) * step;
  f.y_max = std::ceil((y_hi + pad) / step) * step;
  f.x_min = x_lo;
  f.x_max = x_hi;
  return f;
}

std::string line_chart_svg(const LineChart& chart) {
  const ChartFrame f = chart_frame(chart);
  std::string s = concat("<svg id=\"", escape(chart.id), "\" class=\"chart\" width=\"", chart.width,
                         "\" height=\"", chart.height, "\" viewBox=\"0 0 ", chart.width, ' ',
                         chart.height, "\" xmlns=\"http://www.w3.org/2000/svg\">");
  s += concat("<text x=\"", f.left, "\" y=\"16\" font-weight=\"600\">", escape(chart.title),
              "</text>");
  // y grid and ticks
  const double y_step = nice_step(f.y_max - f.y_min, 5);
  for (double y = f.y_min; y <= f.y_max + 1e-9 * y_step; y += y_step) {
    const std::string py = fixed(f.py(y), 1);
    s += concat("<line x1=\"", f.left, "\" x2=\"", f.left + f.plot_width, "\" y1=\"", py,
                "\" y2=\"", py, "\" stroke=\"#e8e8e8\"/><text x=\"", f.left - 6, "\" y=\"",
                fixed(f.py(y) + 4, 1), "\" text-anchor=\"end\">", number_label(y, y_step),
                "</text>");
  }
  // x ticks
  std::vector<double> x_ticks;
  if (chart.log2_x) {
    for (double x = std::exp2(std::ceil(std::log2(f.x_min))); x <= f.x_max * (1 + 1e-12); x *= 2)
      x_ticks.push_back(x);
  } else if (f.x_max > f.x_min) {
    const double step = nice_step(f.x_max - f.x_min, 6);
    for (double x = std::ceil(f.x_min / step) * step; x <= f.x_max + 1e-9 * step; x += step)
      x_ticks.push_back(x);
  } else {
    x_ticks.push_back(f.x_min);
  }
  const double x_step = x_ticks.size() > 1 ? x_ticks[1] - x_ticks[0] : 1;
  for (double x : x_ticks)
    s += concat("<text x=\"", fixed(f.px(x), 1), "\" y=\"", fixed(f.top + f.plot_height + 15, 1),
                "\" text-anchor=\"middle\">",
                chart.log2_x ? number_label(x, 1) : number_label(x, x_step), "</text>");
  s += concat("<rect x=\"", f.left, "\" y=\"", f.top, "\" width=\"", f.plot_width, "\" height=\"",
              f.plot_height, "\" fill=\"none\" stroke=\"#999\"/>");
  s += concat("<text x=\"", fixed(f.left + f.plot_width / 2, 1), "\" y=\"", chart.height - 6,
              "\" text-anchor=\"middle\">", escape(chart.x_label), "</text>");
  s += concat("<text transform=\"translate(14,", fixed(f.top + f.plot_height / 2, 1),
              ") rotate(-90)\" text-anchor=\"middle\">", escape(chart.y_label), "</text>");
  // series
  for (std::size_t k = 0; k < chart.series.size(); ++k) {
    const Series& se = chart.series[k];
    const char* colour = series_colour(static_cast<int>(k));
    std::string points;
    for (std::size_t i = 0; i < se.x.size(); ++i) {
      const std::string px = fixed(f.px(se.x[i]), 1), py = fixed(f.py(se.y[i]), 1);
      points += concat(i ? " " : "", px, ",", py);
      if (!se.error.empty() && se.error[i] > 0)
        s += concat("<line class=\"error-bar\" x1=\"", px, "\" x2=\"", px, "\" y1=\"",
                    fixed(f.py(se.y[i] - se.error[i]), 1), "\" y2=\"",
                    fixed(f.py(se.y[i] + se.error[i]), 1), "\" stroke=\"", colour, "\"/>");
      s += concat("<circle cx=\"", px, "\" cy=\"", py, "\" r=\"", se.x.size() > 60 ? 0 : 2.5,
                  "\" fill=\"", colour, "\"><title>", escape(se.name), ": x ", se.x[i], ", y ",
                  se.y[i], se.error.empty() ? std::string() : concat(" &#177; ", se.error[i]),
                  "</title></circle>");
    }
    s += concat("<polyline class=\"series\" data-name=\"", escape(se.name),
                "\" fill=\"none\" stroke=\"", colour, "\" stroke-width=\"1.8\"",
                se.dashed ? " stroke-dasharray=\"5,3\"" : "", " points=\"", points, "\"/>");
    const double ly = f.top + 8 + 16.0 * static_cast<double>(k);
    s += concat("<line x1=\"", f.left + f.plot_width + 10, "\" x2=\"", f.left + f.plot_width + 28,
                "\" y1=\"", ly, "\" y2=\"", ly, "\" stroke=\"", colour, "\" stroke-width=\"2\"",
                se.dashed ? " stroke-dasharray=\"5,3\"" : "", "/><text x=\"",
                f.left + f.plot_width + 32, "\" y=\"", ly + 4, "\">", escape(se.name), "</text>");
  }
  return s + "</svg>";
}

std::string heatmap_svg(const Heatmap& map) {
  HEADCOUNT_CHECK(map.rows >= 0 && map.cols >= 0 &&
                      map.values.size() == static_cast<std::size_t>(map.rows) * map.cols,
                  concat("heatmap ", map.id, " values"), concat(map.rows, " x ", map.cols),
                  map.values.size());
  HEADCOUNT_CHECK(
      map.row_labels.empty() || map.row_labels.size() == static_cast<std::size_t>(map.rows),
      concat("heatmap ", map.id, " row labels"), concat("none or ", map.rows),
      map.row_labels.size());
  HEADCOUNT_CHECK(
      map.col_labels.empty() || map.col_labels.size() == static_cast<std::size_t>(map.cols),
      concat("heatmap ", map.id, " column labels"), concat("none or ", map.cols),
      map.col_labels.size());
  const int label = (map.row_labels.empty() && map.col_labels.empty()) ? 0 : 28;
  const int title = map.title.empty() ? 0 : 16;
  const int w = label + map.cols * map.cell + 2, h = title + label + map.rows * map.cell + 2;
  std::string s =
      concat("<svg id=\"", escape(map.id), "\" class=\"heatmap\" width=\"", w, "\" height=\"", h,
             "\" viewBox=\"0 0 ", w, ' ', h, "\" xmlns=\"http://www.w3.org/2000/svg\">");
  if (title) s += concat("<text x=\"0\" y=\"12\">", escape(map.title), "</text>");
  const int y0 = title + label;
  for (int i = 0; i < map.rows && !map.row_labels.empty(); ++i)
    s += concat("<text x=\"", label - 2, "\" y=\"", y0 + i * map.cell + map.cell - 1,
                "\" text-anchor=\"end\" font-size=\"", std::max(6, map.cell), "\">",
                escape(map.row_labels[i]), "</text>");
  for (int j = 0; j < map.cols && !map.col_labels.empty(); ++j)
    s += concat("<text font-size=\"", std::max(6, map.cell), "\" transform=\"translate(",
                label + j * map.cell + map.cell - 1, ",", y0 - 2, ") rotate(-90)\">",
                escape(map.col_labels[j]), "</text>");
  for (int i = 0; i < map.rows; ++i)
    for (int j = 0; j < map.cols; ++j) {
      const double v = map.values[static_cast<std::size_t>(i) * map.cols + j];
      if (!std::isfinite(v))
        fail(concat("heatmap ", map.id, " value (", i, ", ", j, ")"),
             concat("expected finite, got ", v));
      s += concat("<rect x=\"", label + j * map.cell, "\" y=\"", y0 + i * map.cell, "\" width=\"",
                  map.cell, "\" height=\"", map.cell, "\" fill=\"", ramp(v, 8, 48, 107), "\"/>");
    }
  return s + "</svg>";
}

}  // namespace headcount::report
