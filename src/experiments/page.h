// One self-contained HTML page of an experiment, drawn from its result JSON (result.h) and
// nothing else, so the page can only show what the JSON holds:
//   the claim, the budget and the settings; one box per verdict (the rule, the verdict, the
//   comparisons with every number); the metric against the swept label on a log2 axis with
//   ± std error bars (one series per series label); a table per cell (mean ± std, seeds' values,
//   the cost model's weights and multiply-adds per step, the measured median time per step and
//   its spread); the mean training-loss curve per cell; every numeric per-run measure as
//   mean ± std per cell; the attention maps runs recorded ("attention_maps" measures); and the
//   experiment's extra tables and charts.
// Elements carry data- attributes (data-claim, data-verdict, data-runs, data-cells) for tests.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace headcount::experiments {

// Throws Error if `result` is not a headcount.experiment.v1 document.
std::string experiment_page(const nlohmann::json& result);
// The page of cost-measured's document (cost_measured.h): the gate, the verdicts, one table per
// measured series. Throws Error on another document.
std::string cost_measured_page(const nlohmann::json& document);

}  // namespace headcount::experiments
