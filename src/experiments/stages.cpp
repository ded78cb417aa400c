// stages.h: the probe, the pilot with its envelope, and the test stage's learning rates.
#include "experiments/stages.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "experiments/prereg.h"
#include "experiments/result.h"
#include "headcount/error.h"

namespace headcount::experiments {

using detail::concat;
using nlohmann::json;

namespace {

constexpr int kProbeWarmup = 3, kProbeTimed = 20;
constexpr double kBudgetShare = 0.85;  // R10: 15 % kept for validation, hooks and noise
constexpr int kLanes = 2;              // the 2-core host the budgets are written for

void require_grid(const Experiment& e, Stage stage) {
  HEADCOUNT_CHECK(!e.lr_grid.empty(), "--stage",
                  concat("run (experiment ", e.name, " has no learning-rate grid, so no stages)"),
                  stage_name(stage));
}

std::string lr_text(double lr) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", lr);
  return text;
}

// The pilot grid of `cell`: its own where it has one, else the experiment's.
const std::vector<double>& grid_of(const Experiment& e, const Cell& cell) {
  return cell.lr_grid.empty() ? e.lr_grid : cell.lr_grid;
}

// The pilot's cells: every cell of `e` at each lr of `lrs`, "<id> lr=<lr>".
std::vector<Cell> lr_cells(const Experiment& e, const Cell& cell, const std::vector<double>& lrs) {
  std::vector<Cell> out;
  for (double lr : lrs) {
    Cell c = cell;
    c.id = concat(cell.id, " lr=", lr_text(lr));
    c.labels["lr"] = lr;
    c.labels["cell"] = cell.id;
    set_learning_rate(e, c.config, lr);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

const PilotPoint& pick_pilot_point(const std::vector<PilotPoint>& points, MetricKind kind) {
  HEADCOUNT_CHECK(!points.empty(), "pilot", "at least one lr point per cell", "none");
  const auto better_metric = [kind](double a, double b) {
    return kind == MetricKind::loss ? a < b : a > b;
  };
  // R4: the best metric, an accuracy's exact ties to the lower dev loss, then the lower lr.
  const PilotPoint* best = &points.front();
  for (const PilotPoint& p : points) {
    const bool better =
        better_metric(p.metric, best->metric) ||
        (kind == MetricKind::accuracy && p.metric == best->metric && p.loss < best->loss);
    if (better) best = &p;
  }
  const bool several_seeds = std::any_of(points.begin(), points.end(),
                                         [](const PilotPoint& p) { return p.metrics.size() > 1; });
  if (!several_seeds) return *best;
  // R-pilot3: every point within the best mean's standard error ties with it; the tie goes to
  // the lower dev loss (accuracy) or straight to the lower lr (loss), then the lower lr.
  const double reach = best->standard_error;
  const PilotPoint* chosen = nullptr;
  for (const PilotPoint& p : points) {
    if (!(std::abs(p.metric - best->metric) <= reach)) continue;  // a NaN never ties
    if (chosen == nullptr || (kind == MetricKind::accuracy && p.loss < chosen->loss)) chosen = &p;
  }
  return *chosen;
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  if (!(in >> load)) return -1;
  return load;
}

train::OptimConfig protocol_optim(double lr, std::int64_t steps, double weight_decay) {
  return {.lr = lr,
          .min_lr = lr / 10,
          .warmup_steps = std::min<std::int64_t>(100, steps / 10),
          .decay_steps = steps,
          .beta1 = 0.9,
          .beta2 = 0.99,
          .eps = 1e-8,
          .weight_decay = weight_decay,
          .grad_clip = 1.0};
}

void set_learning_rate(const Experiment& e, train::TrainConfig& config, double lr) {
  if (e.set_lr) {
    e.set_lr(config, lr);
    return;
  }
  config.optim.lr = lr;
  config.optim.min_lr = lr / 10;
}

json run_probe(const Experiment& e, const ExperimentOptions& options, bool progress) {
  require_grid(e, Stage::probe);
  HEADCOUNT_CHECK(e.budget_seconds > 0 && e.evaluation_seeds >= 1, concat("experiment ", e.name),
                  "a budget and an evaluation seed count",
                  concat(e.budget_seconds, " s, ", e.evaluation_seeds, " seeds"));
  Context ctx({.threads = 1});
  const double load_before = load_average();
  json cells = json::array();
  double seconds_per_step_of_grid = 0;  // sum over every run of the grid of one step's time
  for (const Cell& cell : e.cells) {
    train::TrainConfig config = cell.config;
    config.seed = static_cast<std::uint64_t>(e.pilot_seed);
    config.log_every = config.eval_every = config.checkpoint_every = 0;
    config.steps = std::max<std::int64_t>(config.steps, kProbeWarmup + kProbeTimed);
    train::Trainer trainer(ctx, config);
    for (int s = 0; s < kProbeWarmup; ++s) trainer.train_step();
    std::vector<double> times;
    for (int s = 0; s < kProbeTimed; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      trainer.train_step();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    const auto runs_per_cell =
        static_cast<double>(grid_of(e, cell).size() * e.pilot_seeds) + e.evaluation_seeds;
    seconds_per_step_of_grid += median * runs_per_cell;
    cells.push_back({{"id", cell.id}, {"median_step_seconds", median}});
    if (progress)
      std::fprintf(stderr, "%s probe: %s  %.3f ms/step\n", e.name.c_str(), cell.id.c_str(),
                   1e3 * median);
  }
  const double available = kBudgetShare * e.budget_seconds * kLanes;
  const auto steps =
      static_cast<std::int64_t>(std::floor(available / seconds_per_step_of_grid / 100.0)) * 100;
  return {{"format", kProbeFormat},
          {"experiment", e.name},
          {"prereg", prereg_record(options.source_dir, e.prereg)},
          {"rule",
           concat("steps = the largest multiple of 100 with sum over runs of steps x t_cell <= ",
                  kBudgetShare, " x budget x ", kLanes, " lanes")},
          {"budget_seconds", e.budget_seconds},
          {"runs_per_cell",
           {{"pilot", e.lr_grid.size() * e.pilot_seeds}, {"test", e.evaluation_seeds}}},
          {"cells", cells},
          {"load_average_before", load_before},
          {"load_average_after", load_average()},
          {"steps", steps},
          {"estimated_seconds", static_cast<double>(steps) * seconds_per_step_of_grid / kLanes}};
}

ExperimentResult run_pilot(Context& ctx, const Experiment& e, const ExperimentOptions& options,
                           bool progress, Experiment& grid) {
  require_grid(e, Stage::pilot);
  grid = e;
  grid.cells.clear();
  grid.judge = nullptr;
  grid.summarize = nullptr;
  for (const Cell& cell : e.cells)
    for (Cell& c : lr_cells(e, cell, grid_of(e, cell))) grid.cells.push_back(std::move(c));
  ExperimentOptions pilot_options = options;
  pilot_options.seeds = e.pilot_seeds;
  pilot_options.first_seed = e.pilot_seed;
  ExperimentResult result = run_experiment(ctx, grid, pilot_options, progress);

  // Each cell's points in ascending lr; cells picked at an edge get the next point (R4).
  const auto points_of = [&](const ExperimentResult& r, const Experiment& g, const Cell& cell) {
    std::vector<PilotPoint> points;
    for (std::size_t i = 0; i < g.cells.size(); ++i) {
      if (g.cells[i].labels.at("cell") != cell.id) continue;
      PilotPoint p{.lr = g.cells[i].labels.at("lr").get<double>()};
      double loss = 0;
      for (const RunRecord* run : r.runs_of(i)) {
        p.metrics.push_back(final_metric(*run, e.metric));
        loss += run->final.loss;
      }
      // Plain sums, not cell_stats: a diverged pilot run (a non-finite loss) is a point that is
      // never picked, not an error that ends the pilot.
      const auto n = static_cast<double>(p.metrics.size());
      double sum = 0;
      for (double m : p.metrics) sum += m;
      p.metric = sum / n;
      p.loss = loss / n;
      double squares = 0;
      for (double m : p.metrics) squares += (m - p.metric) * (m - p.metric);
      p.standard_error = n > 1 ? std::sqrt(squares / (n - 1)) / std::sqrt(n) : 0;
      points.push_back(std::move(p));
    }
    std::sort(points.begin(), points.end(),
              [](const PilotPoint& a, const PilotPoint& b) { return a.lr < b.lr; });
    return points;
  };
  Experiment extension = grid;
  extension.cells.clear();
  for (const Cell& cell : e.cells) {
    const std::vector<PilotPoint> points = points_of(result, grid, cell);
    const double chosen = pick_pilot_point(points, e.metric_kind).lr;
    std::vector<double> more;
    const std::vector<double>& own = grid_of(e, cell);
    if (chosen == own.front() && e.lr_extension.front() < chosen)
      more.push_back(e.lr_extension.front());
    if (chosen == own.back() && e.lr_extension.back() > chosen)
      more.push_back(e.lr_extension.back());
    for (Cell& c : lr_cells(e, cell, more)) extension.cells.push_back(std::move(c));
  }
  if (!extension.cells.empty()) {
    if (progress)
      std::fprintf(stderr, "%s pilot: %zu picks at an edge of the lr grid; adding the next point\n",
                   e.name.c_str(), extension.cells.size());
    ExperimentResult more = run_experiment(ctx, extension, pilot_options, progress);
    const std::size_t offset = grid.cells.size();
    for (Cell& c : extension.cells) grid.cells.push_back(std::move(c));
    for (RunRecord& run : more.runs) {
      run.cell += offset;
      result.runs.push_back(std::move(run));
    }
    for (CellStats& s : more.cells) result.cells.push_back(std::move(s));
    result.seconds += more.seconds;
  }
  result.experiment = &grid;
  result.options = options;
  result.options.seeds = e.pilot_seeds;
  result.options.first_seed = e.pilot_seed;

  const bool r_pilot3 = e.pilot_seeds > 1;
  json cells = json::object();
  for (const Cell& cell : e.cells) {
    const std::vector<PilotPoint> points = points_of(result, grid, cell);
    const PilotPoint& chosen = pick_pilot_point(points, e.metric_kind);
    json listed = json::array();
    for (const PilotPoint& p : points) {
      json point = {{"lr", p.lr}, {"metric", p.metric}, {"validation_loss", p.loss}};
      if (r_pilot3) {
        point["standard_error"] = p.standard_error;
        point["per_seed"] = p.metrics;
      }
      listed.push_back(std::move(point));
    }
    cells[cell.id] = {{"lr", chosen.lr},
                      {"at_edge", chosen.lr == points.front().lr || chosen.lr == points.back().lr},
                      {"points", listed}};
    if (!cell.lr_grid.empty()) cells[cell.id]["grid"] = cell.lr_grid;
  }
  result.envelope = {{"metric", e.metric},
                     {"metric_kind", metric_kind_name(e.metric_kind)},
                     {"seed", e.pilot_seed},
                     {"grid", e.lr_grid},
                     {"rule",
                      "lowest loss, or highest accuracy with ties to the lower validation loss, "
                      "then the lower lr; a pick at an edge adds the next point and picks again"},
                     {"cells", cells}};
  if (r_pilot3) {
    result.envelope["seeds"] = e.pilot_seeds;
    result.envelope["rule"] = concat(
        "R-pilot3: each point the mean over seeds ", e.pilot_seed, "-",
        e.pilot_seed + e.pilot_seeds - 1,
        "; the best mean, and every point within its standard error ties with it: the tie goes "
        "to the lower mean validation loss (an accuracy metric), then the lower lr; a pick at an "
        "edge adds the next point and picks again");
  }
  return result;
}

namespace {

Experiment apply_envelope(const Experiment& e, const json& pilot) {
  const auto bad = [](const std::string& expected, const std::string& got) {
    fail("--envelope", concat("expected ", expected, ", got ", got));
  };
  if (!pilot.is_object() || pilot.value("format", "") != kResultFormat)
    bad(concat("a ", kResultFormat, " result of a pilot"), "another document");
  const std::string name = pilot.at("experiment").value("name", "");
  if (name != e.name) bad(concat("the pilot of ", e.name), concat("the result of ", name));
  const std::string stage = pilot.at("settings").value("stage", "run");
  if (stage != "pilot") bad("a pilot result (--stage pilot)", concat("stage ", stage));
  if (!pilot.contains("envelope") || !pilot.at("envelope").contains("cells"))
    bad("a pilot result with an envelope", "none");
  const json& cells = pilot.at("envelope").at("cells");
  std::map<std::string, std::int64_t> pilot_steps;
  for (const json& run : pilot.at("runs"))
    pilot_steps[run.at("cell").get<std::string>()] =
        run.at("config").at("train").at("steps").get<std::int64_t>();
  Experiment out = e;
  for (Cell& cell : out.cells) {
    if (!cells.contains(cell.id)) bad(concat("a pick for cell ", cell.id), "none");
    const double lr = cells.at(cell.id).at("lr").get<double>();
    const std::string pilot_id = concat(cell.id, " lr=", lr_text(lr));
    if (pilot_steps.count(pilot_id) == 1 && pilot_steps.at(pilot_id) != cell.config.steps)
      bad(concat("a pilot at the test's ", cell.config.steps,
                 " steps (R10: steps never change "
                 "after a result is seen)"),
          concat(pilot_steps.at(pilot_id), " steps in cell ", pilot_id));
    set_learning_rate(e, cell.config, lr);
    cell.labels["lr"] = lr;
  }
  return out;
}

}  // namespace

// A document that is JSON but lacks a field the pilot result has gives one error naming the
// option, not nlohmann's exception.
Experiment with_envelope(const Experiment& e, const json& pilot) {
  require_grid(e, Stage::test);
  try {
    return apply_envelope(e, pilot);
  } catch (const json::exception& x) {
    fail("--envelope", concat("expected a pilot result JSON, got a document that does not parse "
                              "as one (",
                              x.what(), ")"));
  }
}

ExperimentResult run_test(Context& ctx, const Experiment& e, const ExperimentOptions& options,
                          bool progress, Experiment& grid) {
  grid = with_envelope(e, options.pilot);
  ExperimentResult result = run_experiment(ctx, grid, options, progress);
  result.envelope = options.pilot.at("envelope");
  result.envelope["pilot_prereg"] = options.pilot.value("prereg", json(nullptr));
  return result;
}

Experiment as_long_budget(Experiment base, std::string name, std::string summary,
                          std::string prereg) {
  base.name = std::move(name);
  base.summary = std::move(summary);
  base.prereg = std::move(prereg);
  base.budget_seconds = 0;
  return base;
}

void restate_budget(Experiment& e, std::string_view from, std::string_view to) {
  const auto at = e.budget.find(from);
  HEADCOUNT_CHECK(at != std::string::npos, concat("experiment ", e.name),
                  concat("a budget text containing \"", from, "\""), e.budget);
  e.budget.replace(at, from.size(), to);
}

SuccessCount success_count(const ExperimentResult& result, const std::string& cell,
                           double threshold) {
  SuccessCount c;
  for (const RunRecord* run : result.runs_of(result.cell_index(cell))) {
    ++c.runs;
    c.successes += run->final.accuracy >= threshold;
  }
  return c;
}

std::string count_text(const SuccessCount& count) {
  return detail::concat(count.successes, "/", count.runs);
}

double pilot_metric_at_pick(const ExperimentResult& result, const std::string& cell) {
  if (!result.options.pilot.is_object()) return result.stats(cell).mean;
  const nlohmann::json& c = result.options.pilot.at("envelope").at("cells").at(cell);
  const double lr = c.at("lr").get<double>();
  for (const nlohmann::json& point : c.at("points"))
    if (point.at("lr").get<double>() == lr) return point.at("metric").get<double>();
  fail("--envelope", detail::concat("expected a point at the pick of ", cell, ", got none"));
}

}  // namespace headcount::experiments
