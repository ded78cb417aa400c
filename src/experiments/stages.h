// The claims protocol's stages (../shared/claims-protocol.md, summarised in
// docs/what-the-split-buys.md) for an experiment with a learning-rate grid:
//
//   probe  R10: 3 warm-up and 20 timed steps of every cell on one thread; the step count is the
//          largest multiple of 100 with  sum over the pilot's and test's runs of steps x t_cell
//          <= 0.85 x budget x 2 lanes.  Goes into the pre-registration before the pilot.
//   pilot  R4: every cell at every lr of the grid, pilot seed (101); each cell's lr picked on
//          the dev metric (lowest loss; highest accuracy, ties to the lower dev loss, then the
//          lower lr); a pick at an edge of the grid adds the next point (3e-4 or 3e-2) and picks
//          again. The envelope (the metric at every lr) is kept in the JSON.
//          R-pilot3 (Experiment::pilot_seeds = 3): each point is the mean over seeds 101-103;
//          every point whose mean is within the best mean's standard error (sd / sqrt(n)) of it
//          ties with it, and the tie goes to the lower mean dev loss (an accuracy metric) or to
//          the lower lr (a loss metric), then to the lower lr (pick_rpilot3).
//   test   each cell at its pilot lr, the evaluation seeds (1..n), the verdicts.
#pragma once

#include <string_view>

#include "experiments/experiment.h"
#include "experiments/runner.h"

namespace headcount::experiments {

// A registered long budget, NAME-long (`--budget long`): `base`, the default's design at the
// long budget's steps or rung, under its own name, summary and pre-registration, and with no
// probe (its steps are fixed by that registration, not by a timing).
Experiment as_long_budget(Experiment base, std::string name, std::string summary,
                          std::string prereg);
// Rewrites the part of `e.budget` (the page's and the JSON's description) that differs at the
// long budget: `from`, which must be there (an Error naming the experiment otherwise, so a
// default's reworded text cannot leave a long budget describing the default's steps or seeds).
void restate_budget(Experiment& e, std::string_view from, std::string_view to);

// One point of a pilot envelope: a cell at one lr, its dev metric and dev loss as means over
// the pilot's seeds, and the standard error of the metric's mean (0 for one seed).
struct PilotPoint {
  double lr = 0, metric = 0, loss = 0, standard_error = 0;
  std::vector<double> metrics;  // per seed, seed order
};
// The pick among `points` (ascending lr): R4's rule when every point has one seed, R-pilot3's
// otherwise (above). Throws Error on no points.
const PilotPoint& pick_pilot_point(const std::vector<PilotPoint>& points, MetricKind kind);

// The probe's JSON document ("format": kProbeFormat). Runs each cell on a 1-thread Context.
inline constexpr const char* kProbeFormat = "headcount-experiment-probe-v1";
nlohmann::json run_probe(const Experiment& experiment, const ExperimentOptions& options,
                         bool progress);

// The pilot. `grid` receives the experiment the result refers to (cells x lr, extensions
// appended; it must outlive the result). The result's envelope holds each cell's pick.
ExperimentResult run_pilot(Context& ctx, const Experiment& experiment,
                           const ExperimentOptions& options, bool progress, Experiment& grid);

// The test stage's experiment: `experiment` with each cell at the lr the pilot document
// (a result JSON of the same experiment at Stage::pilot) picked. Error naming --envelope when
// the document is of another experiment or stage, lacks a cell, or ran another step count.
Experiment with_envelope(const Experiment& experiment, const nlohmann::json& pilot);

// The test stage: with_envelope(experiment, options.pilot) run at the evaluation seeds; the
// judge can read the pilot's runs in result.options.pilot; the result's envelope is the pilot's.
ExperimentResult run_test(Context& ctx, const Experiment& experiment,
                          const ExperimentOptions& options, bool progress, Experiment& grid);

// R-counts' input: how many of a cell's test runs reached `threshold` final accuracy, of how
// many; and "k/n" for the verdicts' words.
struct SuccessCount {
  std::int64_t successes = 0, runs = 0;
};
SuccessCount success_count(const ExperimentResult& result, const std::string& cell,
                           double threshold);
std::string count_text(const SuccessCount& count);

// A cell's mean dev metric at its pilot pick, read from the pilot document a test result
// carries (options.pilot); without a pilot (a --quick run), the mean of its own runs. Error
// naming --envelope when the document has no point at the pick.
double pilot_metric_at_pick(const ExperimentResult& result, const std::string& cell);

// The host's 1-minute load average, or -1 where /proc/loadavg cannot be read: recorded beside
// every timing the protocol asks for on an idle host (R10), never used in a decision.
double load_average();

// The protocol's optimiser for a run of `steps` at `lr`: AdamW β (0.9, 0.99), eps 1e-8, gradient
// clipping 1.0, warm-up min(100, steps / 10), cosine to lr / 10, the given weight decay. Every
// protocol experiment builds its cells' optim from it (the pilot then sets each cell's lr).
train::OptimConfig protocol_optim(double lr, std::int64_t steps, double weight_decay);

// The default lr setter: optim.lr = lr, optim.min_lr = lr / 10 (cosine to lr / 10, R4).
void set_learning_rate(const Experiment& experiment, train::TrainConfig& config, double lr);

}  // namespace headcount::experiments
