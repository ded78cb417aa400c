// run_experiment (runner.h): the grid's runs spread over lanes (one thread and one Context each),
// one Trainer per run, records kept in grid order, timing kept apart from everything that must
// be reproducible.
#include "experiments/runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "headcount/error.h"

namespace headcount::experiments {

using detail::concat;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string duration(double seconds) {
  const auto s = static_cast<long long>(std::max(0.0, seconds) + 0.5);
  char text[32];
  if (s >= 3600)
    std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s / 60 % 60);
  else if (s >= 60)
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(text, sizeof text, "%llds", s);
  return text;
}

// The q-quantile of `values` by the nearest-rank rule on a sorted copy.
double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto i = static_cast<std::size_t>(std::lround(q * static_cast<double>(values.size() - 1)));
  return values[i];
}

void validate(const Experiment& e, const ExperimentOptions& o) {
  HEADCOUNT_CHECK(!e.cells.empty(), concat("experiment ", e.name), "at least one cell", "none");
  HEADCOUNT_CHECK(o.seeds >= 1 && o.seeds <= 1000, "--seeds", "in [1, 1000]", o.seeds);
  HEADCOUNT_CHECK(o.first_seed >= 1 && o.first_seed <= 1000000, "--first-seed", "in [1, 1000000]",
                  o.first_seed);
  HEADCOUNT_CHECK(e.eval_points >= 1, "eval_points", ">= 1", e.eval_points);
  HEADCOUNT_CHECK(e.curve_points >= 1, "curve_points", ">= 1", e.curve_points);
  std::set<std::string> ids;
  for (const Cell& c : e.cells) {
    HEADCOUNT_CHECK(!c.id.empty() && ids.insert(c.id).second,
                    concat("experiment ", e.name, " cell id"), "unique non-empty ids",
                    concat("\"", c.id, "\""));
    HEADCOUNT_CHECK(c.config.steps >= 1, concat("cell ", c.id, " steps"), ">= 1", c.config.steps);
  }
}

}  // namespace

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::run:
      return "run";
    case Stage::probe:
      return "probe";
    case Stage::pilot:
      return "pilot";
    case Stage::test:
      return "test";
  }
  return "?";
}

double final_metric(const RunRecord& run, const std::string& metric) {
  if (metric == "validation_loss") return run.final.loss;
  if (metric == "validation_accuracy") return run.final.accuracy;
  if (metric == "validation_sequence_accuracy") return run.final.sequence_accuracy;
  if (metric == "train_loss") return run.final_train_loss;
  fail("metric",
       concat("expected validation_loss, validation_accuracy, validation_sequence_accuracy or "
              "train_loss, got \"",
              metric, "\""));
}

std::vector<const RunRecord*> ExperimentResult::runs_of(std::size_t index) const {
  std::vector<const RunRecord*> out;
  for (const RunRecord& r : runs)
    if (r.cell == index) out.push_back(&r);
  return out;
}

std::size_t ExperimentResult::cell_index(const std::string& id) const {
  for (std::size_t i = 0; i < experiment->cells.size(); ++i)
    if (experiment->cells[i].id == id) return i;
  fail("cell", concat("expected a cell of ", experiment->name, ", got \"", id, "\""));
}

bool ExperimentResult::has_cell(const std::string& id) const {
  return std::any_of(experiment->cells.begin(), experiment->cells.end(),
                     [&](const Cell& c) { return c.id == id; });
}

ExperimentResult::Successes ExperimentResult::successes(const std::string& id,
                                                        const std::string& flag) const {
  Successes s;
  for (const RunRecord* run : runs_of(cell_index(id))) {
    ++s.runs;
    if (run->measures.at("final").at(flag).get<bool>()) ++s.successes;
  }
  return s;
}

train::TaskMetrics evaluate(Context& ctx, train::Model& model, const train::Task& task,
                            std::int64_t batch, std::int64_t count) {
  return train::evaluate_model(ctx, model, task, batch, count);
}

namespace {

// What the lanes share: the grid's step count for the time-left estimate, and stderr.
struct Progress {
  bool enabled = false;
  Clock::time_point start;
  std::int64_t total_steps = 0;
  std::size_t total_runs = 0;
  std::mutex mutex;
  std::int64_t steps_done = 0;  // under mutex
  std::size_t runs_done = 0;    // under mutex
};

// One run (cell ci, seed index si) on `ctx`, as the file comment of runner.h describes.
RunRecord train_run(Context& ctx, const Experiment& e, const ExperimentOptions& options,
                    std::size_t ci, int si, Progress& progress, json* task_description) {
  const Cell& cell = e.cells[ci];
  const auto run_start = Clock::now();
  train::TrainConfig config = cell.config;
  config.seed = static_cast<std::uint64_t>(options.first_seed + si);
  config.log_every = 0;
  config.eval_every = 0;
  config.checkpoint_every = 0;
  train::Trainer trainer(ctx, config);
  if (task_description) *task_description = trainer.task().describe();
  RunRecord run{.cell = ci, .seed = config.seed, .config = train::to_json(trainer.config())};
  run.cost = model_cost(trainer.config().model, config.batch, trainer.task().seq_len());
  RunView view{.ctx = ctx, .trainer = trainer, .cell = cell, .seed = config.seed, .seed_index = si};
  if (e.at_init) run.measures["init"] = e.at_init(view);

  const std::int64_t steps = config.steps;
  const std::int64_t window =
      std::max<std::int64_t>(1, (steps + e.curve_points - 1) / e.curve_points);
  std::vector<std::int64_t> eval_at;  // eval_points - 1 intermediate points, evenly spaced
  for (std::int64_t k = 1; k < e.eval_points; ++k) eval_at.push_back(steps * k / e.eval_points);
  std::vector<double> step_seconds;
  step_seconds.reserve(static_cast<std::size_t>(steps));
  double window_sum = 0;
  std::int64_t window_count = 0, unreported = 0;
  auto last_report = Clock::now();
  const std::size_t run_number =
      ci * static_cast<std::size_t>(options.seeds) + static_cast<std::size_t>(si) + 1;
  for (std::int64_t s = 0; s < steps; ++s) {
    const auto t0 = Clock::now();
    const double loss = trainer.train_step();
    step_seconds.push_back(seconds_since(t0));
    window_sum += loss;
    ++window_count;
    const std::int64_t done = s + 1;
    if (done % window == 0 || done == steps) {
      run.curve_step.push_back(done);
      run.curve_loss.push_back(window_sum / static_cast<double>(window_count));
      window_sum = 0;
      window_count = 0;
    }
    if (std::find(eval_at.begin(), eval_at.end(), done) != eval_at.end() && done > 0)
      run.validation.push_back({.step = done,
                                .metrics = evaluate(ctx, trainer.model(), trainer.task(),
                                                    config.batch, e.eval_batches)});
    ++unreported;
    if (seconds_since(last_report) >= 5.0 || done == steps) {
      last_report = Clock::now();
      const std::lock_guard<std::mutex> lock(progress.mutex);
      progress.steps_done += unreported;
      unreported = 0;
      if (progress.enabled) {
        const double elapsed = seconds_since(progress.start);
        const double left = elapsed / static_cast<double>(progress.steps_done) *
                            static_cast<double>(progress.total_steps - progress.steps_done);
        std::fprintf(stderr,
                     "%s: run %zu/%zu  cell %s  seed %llu  step %lld/%lld  loss %.4f  %s left\n",
                     e.name.c_str(), run_number, progress.total_runs, cell.id.c_str(),
                     static_cast<unsigned long long>(config.seed), static_cast<long long>(done),
                     static_cast<long long>(steps), loss, duration(left).c_str());
      }
    }
  }
  run.final_train_loss = run.curve_loss.empty() ? 0 : run.curve_loss.back();
  run.final = evaluate(ctx, trainer.model(), trainer.task(), config.batch, 0);
  run.validation.push_back({.step = steps, .metrics = run.final});
  HEADCOUNT_CHECK(std::isfinite(run.final.loss), concat("cell ", cell.id, " seed ", config.seed),
                  "a finite validation loss", run.final.loss);
  if (e.at_final) run.measures["final"] = e.at_final(view);
  run.timing = {.seconds = seconds_since(run_start),
                .median_step_seconds = quantile(step_seconds, 0.5),
                .p10_step_seconds = quantile(step_seconds, 0.1),
                .p90_step_seconds = quantile(step_seconds, 0.9)};
  const std::lock_guard<std::mutex> lock(progress.mutex);
  ++progress.runs_done;
  if (progress.enabled)
    std::fprintf(stderr,
                 "%s: run %zu/%zu (%zu done)  cell %s  seed %llu  done: validation loss %.4f  "
                 "accuracy %.4f  (%.1f s, %.2f ms/step)\n",
                 e.name.c_str(), run_number, progress.total_runs, progress.runs_done,
                 cell.id.c_str(), static_cast<unsigned long long>(config.seed), run.final.loss,
                 run.final.accuracy, run.timing.seconds, 1e3 * run.timing.median_step_seconds);
  return run;
}

}  // namespace

ExperimentResult run_experiment(Context& ctx, const Experiment& e, const ExperimentOptions& options,
                                bool progress) {
  validate(e, options);
  ExperimentResult result{.experiment = &e, .options = options};
  Progress shared{.enabled = progress, .start = Clock::now()};
  for (const Cell& c : e.cells) shared.total_steps += c.config.steps * options.seeds;
  shared.total_runs = e.cells.size() * static_cast<std::size_t>(options.seeds);

  // The runs are independent, so they go to lanes: min(ctx.threads(), runs) worker threads,
  // each with a 1-thread Context of its own, taking the next run index as they finish. These
  // shapes are too small for two threads to share one step well (bench --suite train, 2-core
  // EPYC: 113 ms a step with 2 threads vs 121 ms with 1), so two runs at once finish the grid
  // in about half the time. Every run computes on one thread whatever --threads is, so the
  // results do not depend on the thread count; a run's record depends only on its cell and
  // seed, and the records are kept in grid order.
  const std::size_t lanes = std::min<std::size_t>(
      static_cast<std::size_t>(std::max(1, ctx.threads())), shared.total_runs);
  std::vector<RunRecord> runs(shared.total_runs);
  std::vector<std::exception_ptr> errors(shared.total_runs);
  std::atomic<std::size_t> next{0};
  auto lane = [&](Context& lane_ctx) {
    for (std::size_t i = next++; i < shared.total_runs; i = next++) {
      try {
        const std::size_t ci = i / static_cast<std::size_t>(options.seeds);
        const int si = static_cast<int>(i % static_cast<std::size_t>(options.seeds));
        runs[i] = train_run(lane_ctx, e, options, ci, si, shared, i == 0 ? &result.task : nullptr);
      } catch (...) {
        errors[i] = std::current_exception();
        next = shared.total_runs;  // the others stop after their current run
      }
    }
  };
  if (lanes <= 1 && ctx.threads() == 1) {
    lane(ctx);
  } else {
    std::vector<std::unique_ptr<Context>> contexts;
    for (std::size_t l = 0; l < lanes; ++l)
      contexts.push_back(std::make_unique<Context>(ContextOptions{.threads = 1, .isa = ctx.isa()}));
    std::vector<std::thread> threads;
    for (std::size_t l = 1; l < lanes; ++l) threads.emplace_back(lane, std::ref(*contexts[l]));
    lane(*contexts[0]);
    for (std::thread& t : threads) t.join();
  }
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
  result.runs = std::move(runs);
  for (std::size_t ci = 0; ci < e.cells.size(); ++ci) {
    std::vector<double> values;
    for (const RunRecord* r : result.runs_of(ci)) values.push_back(final_metric(*r, e.metric));
    result.cells.push_back(cell_stats(e.cells[ci].id, values));
  }
  if (e.judge) result.verdicts = e.judge(result);
  result.seconds = seconds_since(shared.start);
  return result;
}

}  // namespace headcount::experiments
