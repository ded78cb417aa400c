// scale (issue 11, claim 3: scores scaled by 1/sqrt(d/h), not 1/sqrt(d)). head-sweep's model at
// h = 8 and h = 32 with the score scale 1/sqrt(head_dim) (the default) against 1/sqrt(d_model),
// judged on final validation loss at both h; beside it, at initialisation (and after training),
// the row-wise standard deviation of the attention logits and the attention entropy on the
// first validation batch (probes.h).
#include <cmath>

#include "experiments/char_lm_grid.h"
#include "experiments/experiments.h"
#include "experiments/probes.h"
#include "experiments/runner.h"
#include "headcount/error.h"
#include "report/html.h"

namespace headcount::experiments {

using detail::concat;
using nlohmann::json;

namespace {

constexpr const char* kHeadDim = "1/sqrt(head_dim)";
constexpr const char* kDModel = "1/sqrt(d_model)";

std::vector<std::int64_t> scale_heads(bool quick) {
  if (quick) return {2, 8};
  return {8, 32};
}

std::string cell_id(std::int64_t h, const char* scale) {
  return concat("h=", h, ",", scale == kHeadDim ? "head_dim" : "d_model");
}

json attention_at(RunView& run) {
  const train::Batch batch = run.trainer.task().validation_batch(0, run.trainer.config().batch);
  return {{"attention", to_json(attention_stats(run.ctx, run.trainer.model(), batch))}};
}

// Mean over a cell's seeds of measures[phase].attention[key].
double mean_measure(const ExperimentResult& r, std::size_t cell, const char* phase,
                    const char* key) {
  double sum = 0;
  int n = 0;
  for (const RunRecord* run : r.runs_of(cell))
    if (run->measures.contains(phase))
      sum += run->measures.at(phase).at("attention").at(key).get<double>(), ++n;
  return n > 0 ? sum / n : 0;
}

// The verdict's numbers beside the attention statistics at initialisation and after training.
json summarize(const ExperimentResult& r) {
  json rows = json::array();
  for (std::size_t i = 0; i < r.experiment->cells.size(); ++i) {
    const Cell& c = r.experiment->cells[i];
    rows.push_back(
        {c.id, c.labels.at("heads"), c.labels.at("head_dim"), c.labels.at("series"),
         c.labels.at("scale"),
         concat(report::fixed(r.cells[i].mean, 4), " ± ", report::fixed(r.cells[i].std, 4)),
         mean_measure(r, i, "init", "logit_std"), mean_measure(r, i, "init", "entropy"),
         mean_measure(r, i, "init", "uniform_entropy"), mean_measure(r, i, "final", "logit_std"),
         mean_measure(r, i, "final", "entropy")});
  }
  json table = {
      {"title", "Scale: validation loss beside the attention statistics"},
      {"columns",
       {"cell", "h", "head_dim", "scale rule", "scale", "validation loss (mean ± std)",
        "logit std at init", "entropy at init (nats)", "uniform entropy (max)", "logit std trained",
        "entropy trained"}},
      {"rows", rows},
      {"note",
       "Statistics on the first validation batch, every layer, head and query row with >= 2 keys, "
       "averaged over rows and then over seeds. Logit std: the row-wise standard deviation of the "
       "scores (computed from log p, which differs from the scores by one constant per row)."}};
  return {{"tables", {table}}};
}

}  // namespace

Experiment make_scale(const ExperimentOptions& options) {
  const CharLmShape shape = char_lm_shape(options);
  const std::vector<std::int64_t> heads = scale_heads(options.quick);
  Experiment e{
      .name = "scale",
      .summary =
          "head-sweep's model at h = 8 and 32: score scale 1/sqrt(head_dim) vs 1/sqrt(d_model)",
      .claim =
          "Scores should be scaled by 1/sqrt(head_dim) = 1/sqrt(d/h), not by 1/sqrt(d_model): with "
          "the wider scale the logits of narrow heads start too flat and train worse."};
  for (const std::int64_t h : heads)
    for (const char* scale : {kHeadDim, kDModel}) {
      const double width = scale == kHeadDim ? static_cast<double>(shape.d_model / h)
                                             : static_cast<double>(shape.d_model);
      const auto value = static_cast<float>(1.0 / std::sqrt(width));
      e.cells.push_back({.id = cell_id(h, scale),
                         .labels = {{"series", scale},
                                    {"heads", h},
                                    {"head_dim", shape.d_model / h},
                                    {"scale", value}},
                         .config = char_lm_config(shape, h, 0, value)});
    }
  e.budget = char_lm_budget(shape, options, e.cells.size());
  e.metric = "validation_loss";
  e.metric_kind = MetricKind::loss;
  e.sweep_label = "heads";
  e.series_label = "series";
  e.eval_points = 3;
  e.eval_batches = 4;
  e.at_init = attention_at;
  e.at_final = attention_at;
  e.summarize = summarize;
  e.judge = [heads](const ExperimentResult& r) {
    std::vector<CellStats> a, b;
    std::vector<std::string> labels;
    for (const std::int64_t h : heads) {
      a.push_back(r.stats(cell_id(h, kHeadDim)));
      b.push_back(r.stats(cell_id(h, kDModel)));
      labels.push_back(concat("h = ", h));
    }
    return std::vector<ClaimVerdict>{all_pairs_verdict(
        "scale.head-dim-scale",
        concat("1/sqrt(head_dim) beats 1/sqrt(d_model) on final validation loss at h = ", heads[0],
               " and h = ", heads[1]),
        "CONFIRMED if 1/sqrt(head_dim) beats 1/sqrt(d_model) (|mean gap| > 2 max(std) and > 0.01 "
        "nats) at both h; "
        "REFUTED if 1/sqrt(d_model) beats it at both; else NOT SHOWN (the reason says which h "
        "showed what)",
        a, b, labels, MetricKind::loss)};
  };
  return e;
}

}  // namespace headcount::experiments
