// result_json (result.h): the ExperimentResult as one JSON document, timing kept apart.
#include "experiments/result.h"

#include <algorithm>

#include "experiments/prereg.h"

namespace headcount::experiments {

using nlohmann::json;

namespace {

json validation_json(const train::ValidationPoint& v) {
  return {{"step", v.step},
          {"loss", v.metrics.loss},
          {"accuracy", v.metrics.accuracy},
          {"sequence_accuracy", v.metrics.sequence_accuracy},
          {"scored", v.metrics.scored}};
}

}  // namespace

json result_json(const ExperimentResult& r) {
  const Experiment& e = *r.experiment;
  json out{{"format", kResultFormat}};
  out["experiment"] = {{"name", e.name},
                       {"summary", e.summary},
                       {"claim", e.claim},
                       {"budget", e.budget},
                       {"metric", e.metric},
                       {"metric_kind", metric_kind_name(e.metric_kind)},
                       {"sweep_label", e.sweep_label},
                       {"series_label", e.series_label}};
  out["settings"] = {{"seeds", r.options.seeds},
                     {"first_seed", r.options.first_seed},
                     {"stage", stage_name(r.options.stage)},
                     {"steps", r.options.steps},
                     {"quick", r.options.quick},
                     {"threads", r.options.threads}};
  out["prereg"] = prereg_record(r.options.source_dir, e.prereg);
  if (!r.envelope.is_null()) out["envelope"] = r.envelope;
  out["task"] = r.task;
  json cells = json::array(), timing_cells = json::array();
  for (std::size_t i = 0; i < e.cells.size(); ++i) {
    const std::vector<const RunRecord*> runs = r.runs_of(i);
    json cell{{"id", e.cells[i].id}, {"labels", e.cells[i].labels}};
    if (!runs.empty()) {
      cell["model"] = runs.front()->config.at("model");
      cell["cost"] = to_json(runs.front()->cost);
      std::vector<double> medians;
      for (const RunRecord* run : runs) medians.push_back(run->timing.median_step_seconds);
      std::sort(medians.begin(), medians.end());
      timing_cells.push_back({{"id", e.cells[i].id},
                              {"median_step_seconds", medians[medians.size() / 2]},
                              {"min_step_seconds", medians.front()},
                              {"max_step_seconds", medians.back()}});
    }
    if (i < r.cells.size()) cell["stats"] = to_json(r.cells[i]);
    cells.push_back(cell);
  }
  out["cells"] = cells;
  json runs = json::array(), timing_runs = json::array();
  for (const RunRecord& run : r.runs) {
    json validation = json::array();
    for (const train::ValidationPoint& v : run.validation) validation.push_back(validation_json(v));
    runs.push_back({{"cell", e.cells[run.cell].id},
                    {"seed", run.seed},
                    {"config", run.config},
                    {"curve", {{"step", run.curve_step}, {"loss", run.curve_loss}}},
                    {"validation", validation},
                    {"final",
                     {{"validation_loss", run.final.loss},
                      {"validation_accuracy", run.final.accuracy},
                      {"validation_sequence_accuracy", run.final.sequence_accuracy},
                      {"train_loss", run.final_train_loss},
                      {"scored", run.final.scored}}},
                    {"cost", to_json(run.cost)},
                    {"measures", run.measures}});
    timing_runs.push_back({{"cell", e.cells[run.cell].id},
                           {"seed", run.seed},
                           {"seconds", run.timing.seconds},
                           {"median_step_seconds", run.timing.median_step_seconds},
                           {"p10_step_seconds", run.timing.p10_step_seconds},
                           {"p90_step_seconds", run.timing.p90_step_seconds}});
  }
  out["runs"] = runs;
  json verdicts = json::array();
  for (const ClaimVerdict& v : r.verdicts) verdicts.push_back(to_json(v));
  out["verdicts"] = verdicts;
  json extra = e.extra.is_object() ? e.extra : json::object();
  if (e.summarize) {
    const json more = e.summarize(r);
    for (const char* key : {"tables", "charts"})
      if (more.contains(key))
        for (const json& item : more.at(key)) extra[key].push_back(item);
  }
  out["extra"] = extra;
  out["timing"] = {{"seconds", r.seconds}, {"runs", timing_runs}, {"cells", timing_cells}};
  return out;
}

json without_timing(json result) {
  result.erase("timing");
  return result;
}

}  // namespace headcount::experiments
