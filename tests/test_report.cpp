// The report module: escaping, chart geometry (a value lands where the axis says), and bad
// chart data refused with the series and point named.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "headcount/error.h"
#include "report/html.h"
#include "report/svg_chart.h"

namespace headcount::report {
namespace {

TEST(Report, EscapesMarkup) {
  EXPECT_EQ(escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  EXPECT_EQ(fixed(2.345, 1), "2.3");
  EXPECT_EQ(ramp(0, 8, 48, 107), "#ffffff");
  EXPECT_EQ(ramp(1, 8, 48, 107), "#08306b");
  EXPECT_EQ(ramp(7, 8, 48, 107), "#08306b");  // clamped
}

TEST(Report, LineChartPutsPointsOnTheirAxes) {
  LineChart chart{.id = "c", .title = "t", .x_label = "heads", .y_label = "loss", .log2_x = true};
  chart.series.push_back({.name = "mean",
                          .x = {1, 2, 4, 8},
                          .y = {2.0, 1.5, 1.25, 1.5},
                          .error = {0.1, 0.1, 0.05, 0.2}});
  const ChartFrame f = chart_frame(chart);
  // log2 axis: 1 at the left edge, 8 at the right edge, 2 one third of the way.
  EXPECT_DOUBLE_EQ(f.px(1), f.left);
  EXPECT_DOUBLE_EQ(f.px(8), f.left + f.plot_width);
  EXPECT_NEAR(f.px(2), f.left + f.plot_width / 3, 1e-9);
  // y range covers every point with its error bar.
  EXPECT_LE(f.y_min, 1.2);
  EXPECT_GE(f.y_max, 2.1);
  EXPECT_NEAR(f.py(f.y_min), f.top + f.plot_height, 1e-9);
  EXPECT_NEAR(f.py(f.y_max), f.top, 1e-9);
  const std::string svg = line_chart_svg(chart);
  EXPECT_NE(svg.find("data-name=\"mean\""), std::string::npos);
  std::size_t bars = 0;
  for (std::size_t at = svg.find("class=\"error-bar\""); at != std::string::npos;
       at = svg.find("class=\"error-bar\"", at + 1))
    ++bars;
  EXPECT_EQ(bars, 4u);
  // The first point's polyline coordinates are the frame's.
  EXPECT_NE(svg.find("points=\"" + fixed(f.px(1), 1) + "," + fixed(f.py(2.0), 1)),
            std::string::npos);
}

TEST(Report, BadChartDataNamesTheSeriesAndPoint) {
  LineChart chart{.id = "c", .log2_x = true};
  chart.series.push_back({.name = "s", .x = {1, 0}, .y = {1, 2}});
  try {
    line_chart_svg(chart);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chart c series s point 1"), std::string::npos)
        << e.what();
  }
  chart.log2_x = false;
  chart.series[0].y[0] = std::nan("");
  EXPECT_THROW(line_chart_svg(chart), Error);
  chart.series[0].y = {1};
  EXPECT_THROW(line_chart_svg(chart), Error);
}

TEST(Report, HeatmapHasOneCellPerValue) {
  Heatmap map{.id = "h", .rows = 2, .cols = 3, .values = {0, 0.5, 1, 1, 0.5, 0}};
  const std::string svg = heatmap_svg(map);
  std::size_t cells = 0;
  for (std::size_t at = svg.find("<rect"); at != std::string::npos; at = svg.find("<rect", at + 1))
    ++cells;
  EXPECT_EQ(cells, 6u);
  map.values.pop_back();
  EXPECT_THROW(heatmap_svg(map), Error);
}

}  // namespace
}  // namespace headcount::report
