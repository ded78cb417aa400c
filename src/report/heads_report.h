// `headcount heads` output: one self-contained HTML page (inline SVG and CSS, a few lines of
// inline script that only measure what rendered; nothing fetched) and the same numbers as JSON.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "headcount/head_analysis.h"

namespace headcount::report {

struct HeadsReport {
  std::string model_dir;
  std::vector<std::string> corpus;  // where the sentences came from
  HeadAnalysis analysis;
  std::optional<HeadAblation> ablation;
  std::string sts_file;               // the ablation's pairs
  std::vector<PruningPoint> pruning;  // least important heads removed together, on prune_file
  std::string prune_file;
  std::string text;  // the heatmaps' sentence
  AttentionMaps maps;
  std::string cost_table;  // format_cost_table for the model at the sentence's length
  Kernel stats_kernel = Kernel::streaming;
  double stats_seconds = 0, ablation_seconds = 0;
  nlohmann::json prune_curve;    // a saved `headcount prune-curve` result; null: none
  nlohmann::json convert_sweep;  // a saved `headcount convert-sweep` result; null: none
};

std::string render_heads_html(const HeadsReport& report);

// Pieces the decoder's page (decoder_heads_report.h) shares with this one.
inline constexpr int kHeadsGridCell = 56;  // px per head in the grids
// A layers x heads grid of kHeadsGridCell cells with H/L axis labels; cell(layer, head, x, y)
// returns each cell's SVG at its top-left corner.
std::string heads_grid_svg(
    const char* id, std::int64_t layers, std::int64_t heads,
    const std::function<std::string(std::int64_t, std::int64_t, int, int)>& cell);
// One head's probabilities as an n x n heatmap (<svg class="heatmap">), tokens on both axes.
std::string attention_heatmap_svg(const AttentionMaps& maps, std::int64_t layer, std::int64_t head);
const char* heads_page_style();  // the page's CSS
// The script that measures, after layout, the heatmaps and grid cells (id role-grid,
// importance-grid) that rendered, into <output id="render-check"> (the page must have both).
const char* heads_render_check_script();
nlohmann::json heads_json(const HeadsReport& report);

}  // namespace headcount::report
