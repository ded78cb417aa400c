// The runner: every cell × seed of an Experiment trained with train::Trainer, min(threads, runs)
// runs at a time on one thread each (so a run's numbers do not depend on --threads), and what
// each run leaves behind (RunRecord, in grid order); then the per-cell statistics and verdicts.
//
// One run (cell c, seed s):
//   config = c.config with seed s, log_every 0;  Trainer(ctx, config)
//   measures.init  = at_init(run)                      (before the first step)
//   for step in [0, steps): train_step(), timed;  validation on eval_batches at eval_points - 1
//                            evenly spaced steps
//   final = validation on every validation batch of the task;  measures.final = at_final(run)
// Progress goes to stderr (run i/N, cell, seed, step, loss, time left for the whole grid).
// Nothing timed enters RunRecord except RunTiming, which result_json keeps apart so that two
// runs of the same command, seeds and thread count can be compared byte for byte without it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "experiments/experiment.h"
#include "experiments/model_cost.h"
#include "headcount/train/task.h"

namespace headcount::experiments {

struct RunTiming {
  double seconds = 0;              // the whole run, validation and hooks included
  double median_step_seconds = 0;  // median over its training steps
  double p10_step_seconds = 0, p90_step_seconds = 0;  // the spread of the step times
};

struct RunRecord {
  std::size_t cell = 0;  // index into the experiment's cells
  std::uint64_t seed = 0;
  nlohmann::json config;  // the resolved TrainConfig (train::to_json)
  // The training loss, thinned: curve_loss[i] = mean loss of steps (curve_step[i-1],
  // curve_step[i]].
  std::vector<std::int64_t> curve_step;
  std::vector<double> curve_loss;
  std::vector<train::ValidationPoint> validation;  // intermediate points, then the final one
  train::TaskMetrics final;                        // every validation batch, after the last step
  double final_train_loss = 0;                     // mean training loss of the last curve window
  ModelCost cost;
  nlohmann::json measures =
      nlohmann::json::object();  // {"init": {...}, "final": {...}} from the hooks
  RunTiming timing;
};

// The final metric named `metric` ("validation_loss", "validation_accuracy",
// "validation_sequence_accuracy", "train_loss"); Error otherwise.
double final_metric(const RunRecord& run, const std::string& metric);

struct ExperimentResult {
  const Experiment* experiment = nullptr;  // what was run (outlives the result)
  ExperimentOptions options;
  nlohmann::json task;           // the first cell's task description (Task::describe)
  std::vector<RunRecord> runs;   // cell-major, then seed
  std::vector<CellStats> cells;  // one per experiment cell, in order, of the metric
  std::vector<ClaimVerdict> verdicts;
  // Stage::pilot and Stage::test: each cell's learning-rate envelope and pick (stages.h),
  // the pilot's runs included, so a test-stage judge can read the pilot's numbers too.
  nlohmann::json envelope = nullptr;
  double seconds = 0;  // the whole grid (timing)

  // The runs of cell `index`, in seed order.
  std::vector<const RunRecord*> runs_of(std::size_t index) const;
  // The cell index whose id is `id`; Error otherwise.
  std::size_t cell_index(const std::string& id) const;
  // Whether the experiment has a cell `id` (a --quick grid runs a subset).
  bool has_cell(const std::string& id) const;
  // The runs of cell `id` whose final measure `flag` (a boolean from the at_final hook, e.g.
  // "solved") is true, of how many: the success counts the protocol's Fisher rules compare.
  struct Successes {
    std::int64_t successes = 0, runs = 0;
  };
  Successes successes(const std::string& id, const std::string& flag) const;
  const CellStats& stats(const std::string& id) const { return cells[cell_index(id)]; }
};

// Mean metrics over validation batches [0, count) (count 0: all), weighted as Trainer::evaluate
// weights them (scored positions; sequences for sequence_accuracy).
train::TaskMetrics evaluate(Context& ctx, train::Model& model, const train::Task& task,
                            std::int64_t batch, std::int64_t count);

// Runs the grid. `progress`: lines on stderr. Throws Error on a bad experiment (no cells,
// duplicate ids, seeds < 1) before anything trains.
ExperimentResult run_experiment(Context& ctx, const Experiment& experiment,
                                const ExperimentOptions& options, bool progress);

}  // namespace headcount::experiments
