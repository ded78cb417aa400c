// An experiment: a named grid of cells (each one TrainConfig plus labels such as {"heads": 8})
// trained for several seeds, the per-run measures it adds (hooks), and the claims it judges
// from the aggregated numbers (verdict.h). The runner (runner.h) turns an Experiment into an
// ExperimentResult; result_json (result.h) writes it; the page (page.h) is drawn from that JSON.
//
//   Experiment --run_experiment--> ExperimentResult --result_json--> JSON --experiment_page--> HTML
//
// Experiments are built by a factory from the command line's options (seeds, steps, quick), so
// `--quick` can shrink a grid without the experiment's code knowing about the CLI.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "experiments/verdict.h"
#include "headcount/context.h"
#include "headcount/train/trainer.h"
#include "nlohmann/json.hpp"

namespace headcount::experiments {

struct Cell {
  std::string id;             // unique within the experiment, e.g. "h=8"
  nlohmann::json labels;      // what the cell varies, e.g. {"series": "d/h", "heads": 8}
  train::TrainConfig config;  // the seed is set per run; steps as the experiment decided
  // This cell's pilot grid where it differs from the experiment's (ascending; empty: the
  // experiment's lr_grid), e.g. an arm whose grid a registration extends down from the start.
  std::vector<double> lr_grid;
};

// The claims protocol's stages (rules R4 and R10, stages.h). `run` is the earlier designs'
// single stage: every cell at the experiment's own learning rate.
enum class Stage { run, probe, pilot, test };
const char* stage_name(Stage stage);  // "run" | "probe" | "pilot" | "test"

struct ExperimentOptions {
  int seeds = 3;           // seeds first_seed .. first_seed + seeds - 1
  int first_seed = 1;      // 1: evaluation seeds; the pilot uses 101, fresh re-runs 201 (R2)
  std::int64_t steps = 0;  // 0: the experiment's default (or its quick value)
  bool quick = false;      // a smoke-sized run (<= 60 s on 2 cores)
  int threads = 1;
  Stage stage = Stage::run;
  // Stage::test: the pilot's result document (its "envelope" gives each cell's learning rate).
  nlohmann::json pilot = nullptr;
  // A result of the same design at another budget, for a judge across budgets (--compare-with).
  nlohmann::json compare_with = nullptr;
  // Where the pre-registration files are found (the source tree; the CLI passes its own).
  std::string source_dir;
};

// What a hook sees: the run's trainer (model, task, curve so far) and its place in the grid.
struct RunView {
  Context& ctx;
  train::Trainer& trainer;
  const Cell& cell;
  std::uint64_t seed = 0;
  int seed_index = 0;  // 0-based position of the seed in 1..seeds
};
// A hook returns a JSON object of measures; they land in the run's "measures" under the
// hook's phase ("init": before the first step, "final": after the last evaluation).
using RunHook = std::function<nlohmann::json(RunView&)>;

struct RunRecord;
struct ExperimentResult;

// The claims an experiment judges, from its aggregated results.
using Judge = std::function<std::vector<ClaimVerdict>(const ExperimentResult&)>;
// Tables and charts built from the results (e.g. the numbers beside a paper's rows): a JSON
// object whose "tables" and "charts" arrays are appended to Experiment::extra's in the result.
// A table: {"title", "columns": [...], "rows": [[...]], "note"}; a chart: {"title", "x_label",
// "y_label", "log2_x", "series": [{"name", "x", "y", "error"?, "dashed"?}]}.
using Summarize = std::function<nlohmann::json(const ExperimentResult&)>;

struct Experiment {
  std::string name;     // the CLI name, e.g. "head-sweep"
  std::string summary;  // one line for --list
  std::string claim;    // the claim under test, in words (the page's header)
  std::string budget;   // what a default run costs and why (steps, batch, seeds): shown on the page
  std::vector<Cell> cells;
  MetricKind metric_kind = MetricKind::loss;
  std::string metric = "validation_loss";  // one of final_metric()'s keys
  std::string sweep_label = "heads";       // the label plotted on the (log2) x axis
  std::string series_label = "series";     // the label that splits cells into series
  std::int64_t eval_points = 4;   // validation points over the run (the last one uses every batch)
  std::int64_t eval_batches = 8;  // batches of the intermediate validation points
  std::int64_t curve_points = 200;  // the training-loss curve is thinned to about this many means
  RunHook at_init, at_final;        // optional per-run measures
  Judge judge;                      // the verdicts
  Summarize summarize;              // optional result tables and charts
  // Optional extra JSON ({"tables": [...], "charts": [...]}, the formats of Summarize)
  // copied into the result before summarize's.
  nlohmann::json extra = nlohmann::json::object();

  // The protocol's stages (stages.h); an experiment without an lr grid runs Stage::run only.
  std::vector<double> lr_grid;  // the pilot's learning rates per cell (R4), ascending
  std::vector<double> lr_extension = {3e-4, 3e-2};  // added below / above when a pick is at an edge
  std::string prereg;         // its pre-registration file, relative to the source tree (R8)
  double budget_seconds = 0;  // the default budget the probe sizes the steps for (R10)
  int evaluation_seeds = 0;   // n of the test stage (R2), fixed in the pre-registration
  int pilot_seed = 101;
  // Seeds per pilot point, pilot_seed onwards: 1 (R4, the registrations before the third
  // edition), or 3 (R-pilot3: each point is the mean over seeds 101-103, and picks within the
  // best mean's standard error tie; stages.h).
  int pilot_seeds = 1;
  // Sets a cell's learning rate (default: optim.lr = lr, optim.min_lr = lr / 10).
  std::function<void(train::TrainConfig&, double lr)> set_lr;
};

struct ExperimentSpec {
  std::string name, summary;
  std::function<Experiment(const ExperimentOptions&)> make;
};

// Every experiment `headcount experiment` knows, in --list order (built on each call).
std::vector<ExperimentSpec> experiment_specs();
// The spec named `name`; Error listing the names otherwise.
const ExperimentSpec& find_experiment(const std::vector<ExperimentSpec>& specs,
                                      const std::string& name);

}  // namespace headcount::experiments
