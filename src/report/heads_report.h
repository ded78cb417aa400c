// `headcount heads` output: one self-contained HTML page (inline SVG and CSS, a few lines of
// inline script that only measure what rendered; nothing fetched) and the same numbers as JSON.
#pragma once

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
nlohmann::json heads_json(const HeadsReport& report);

}  // namespace headcount::report
