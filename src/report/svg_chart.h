// Inline SVG charts for reports: a line chart (several series, optional error bars, linear or
// log2 x axis) and a heatmap of a matrix. Coordinates are computed here once, so a test can
// check that a value lands where the axis says it does.
#pragma once

#include <string>
#include <vector>

namespace headcount::report {

struct Series {
  std::string name;
  std::vector<double> x, y;
  std::vector<double> error;  // empty, or one half-height of an error bar per point (e.g. std)
  bool dashed = false;
};

struct LineChart {
  std::string id;  // the svg element's id (for tests and links)
  std::string title, x_label, y_label;
  std::vector<Series> series;
  bool log2_x = false;  // x axis in powers of two (head counts, head widths)
  int width = 520, height = 320;
};

// The plot area in pixels and the data range it shows, as line_chart_svg lays them out.
struct ChartFrame {
  double left = 0, top = 0, plot_width = 0, plot_height = 0;
  double x_min = 0, x_max = 0, y_min = 0, y_max = 0;
  bool log2_x = false;
  double px(double x) const;
  double py(double y) const;
};

// Checks every value is finite, x positive on a log axis, and error sizes match; throws Error
// naming the series and point otherwise.
ChartFrame chart_frame(const LineChart& chart);
std::string line_chart_svg(const LineChart& chart);

struct Heatmap {
  std::string id, title;
  int rows = 0, cols = 0;
  std::vector<double> values;  // rows x cols, row-major, in [0, 1] (probabilities)
  std::vector<std::string> row_labels, col_labels;  // empty, or one per row / column
  int cell = 8;
};
std::string heatmap_svg(const Heatmap& map);

}  // namespace headcount::report
