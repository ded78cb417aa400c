// retrieval-learnability: the claims protocol's E-B (bench/prereg/retrieval-learnability-v1.md).
// Several heads help gradient descent find a solution that needs two relations, one
// content-addressed and one at a fixed offset: a training claim, not an expressivity claim
// (E-A carries the theorem).
//   task    multi-retrieval "key-value" (src/train/tasks/retrieval.cpp): 8 keys x 8 values,
//           offset 1, seq 32; y_t = (value of the last earlier token with x_t's key, value of
//           x_{t-1}) as one of 64 classes. Control: the ordered "pair" (offsets 1 and 4, p 8),
//           which one head can take at the budget (blur's pilot: every h at 1.0 by step 200).
//   splits  the pilot picks each cell's lr on dev; the test stage keeps dev for the curve (a
//           point every 100 steps, for the steps to 0.95) and scores test once, in at_final.
//           dev and test are disjoint halves of the held-out side (synthetic_task.h).
//   models  1 layer, d_model 64, h in {1, 2, 4, 8} of head_dim 64/h; attention + MLP (d_ff 256)
//           and attention-only. Batch 32, AdamW, weight decay 0.01, warm-up then cosine to lr/10.
//   stages  probe -> pilot (seed 101 x lr {1e-3, 3e-3, 1e-2}) -> test (seeds 1..8).
// Success = final test accuracy >= 0.95. The judge applies the registered rule: primary
// attention + MLP, h = 2 vs h = 1 success counts, one-sided Fisher.
#include <algorithm>
#include <cmath>
#include <map>

#include "experiments/experiments.h"
#include "experiments/runner.h"
#include "experiments/stages.h"
#include "headcount/error.h"

namespace headcount::experiments {
namespace {

using detail::concat;
using nlohmann::json;

constexpr std::int64_t kDModel = 64, kFfnWidth = 256, kSeqLen = 32, kBatch = 32;
constexpr std::int64_t kHeads[] = {1, 2, 4, 8};
constexpr std::int64_t kControlHeads[] = {1, 8};
constexpr double kSuccess = 0.95;
// Steps of every run, from the probe (bench/results/2026-12-06-retrieval-learnability-probe.json,
// recorded in bench/prereg/retrieval-learnability-v1.md before the pilot): R10's largest
// multiple of 100 within 0.85 x 11 min x 2 lanes for the pilot's and the test's runs. The
// protocol expected about 1,500; the steps here take 1.7-4.8 ms.
constexpr std::int64_t kSteps = 3600;
constexpr std::int64_t kQuickSteps = 100;
constexpr std::int64_t kDevEvery = 100;  // a dev point every 100 steps (the steps to 0.95)
constexpr int kEvaluationSeeds = 8;
constexpr int kGateSuccesses = 6;  // of 8: some h of attention + MLP on key-value

constexpr const char* kMlp = "attn+MLP";
constexpr const char* kAttentionOnly = "attn-only";

std::string cell_id(const std::string& task, const std::string& arch, std::int64_t heads) {
  return concat(task, " ", arch, " h=", heads);
}

json task_config(const std::string& task, const std::string& split) {
  json t{{"name", "multi-retrieval"}, {"seq_len", kSeqLen}, {"p", 8}, {"split", split}};
  if (task == "key-value") {
    t["mode"] = "key-value";
    t["keys"] = 8;
    t["offsets"] = {1};
  } else {
    t["mode"] = "ordered";
    t["offsets"] = {1, 4};
  }
  return t;
}

train::TrainConfig cell_config(const std::string& task, const std::string& arch, std::int64_t heads,
                               std::int64_t steps) {
  train::TrainConfig c;
  c.task = task_config(task, "dev");
  const bool mlp = arch == kMlp;
  c.model = {.context = kSeqLen,
             .layers = 1,
             .d_model = kDModel,
             .heads = heads,
             .head_dim = kDModel / heads,
             .d_ff = mlp ? kFfnWidth : 0,
             .attention_only = !mlp};
  const double lr = 3e-3;  // the quick run's; the pilot sets every cell's own
  c.optim = protocol_optim(lr, steps, 0.01);
  c.steps = steps;
  c.batch = kBatch;
  return c;
}

// The run's test accuracy: the model scored once on the test half of the held-out side.
json at_final(RunView& v) {
  json config = v.trainer.config().task;
  config["split"] = "test";
  const auto test = train::make_task(config);
  const train::TaskMetrics m = evaluate(v.ctx, v.trainer.model(), *test, kBatch, 0);
  return {{"test_accuracy", m.accuracy},
          {"test_loss", m.loss},
          {"test_positions", m.scored},
          {"success", m.accuracy >= kSuccess}};
}

using Count = ExperimentResult::Successes;

Count successes(const ExperimentResult& r, const std::string& id) {
  return r.successes(id, "success");
}

// The first dev point at or above 0.95, or -1 where the run never got there.
std::int64_t steps_to_success(const RunRecord& run) {
  for (const train::ValidationPoint& p : run.validation)
    if (p.metrics.accuracy >= kSuccess) return p.step;
  return -1;
}

json count_json(const std::string& id, const Count& c) {
  return {{"cell", id}, {"successes", c.successes}, {"runs", c.runs}};
}

std::vector<ClaimVerdict> judge(const ExperimentResult& r) {
  ClaimVerdict v{
      .id = "retrieval-learnability.heads-help-training",
      .claim =
          "several heads help gradient descent find a solution that needs two relations (one "
          "content-addressed, one at a fixed offset)",
      .rule =
          "bench/prereg/retrieval-learnability-v1.md: gate: the pair control reaches test "
          "accuracy >= 0.95 in every run, and some h of attention + MLP succeeds on key-value "
          "in >= 6/8 seeds; primary attention + MLP, h = 2 vs h = 1 successes (test accuracy "
          ">= 0.95), one-sided Fisher; confirmed iff p < 0.05; refuted iff h = 1 succeeds in "
          ">= 6/8 seeds and no less often than h = 2; not shown otherwise"};
  // The gate: every control run, and the best key-value count of attention + MLP.
  json control = json::array();
  bool control_passed = true;
  for (const std::int64_t h : kControlHeads) {
    const std::string id = cell_id("pair", kMlp, h);
    if (!r.has_cell(id)) continue;  // --quick has no control
    const Count c = successes(r, id);
    control_passed = control_passed && c.successes == c.runs;
    control.push_back(count_json(id, c));
  }
  json counts = json::array(), attention_only = json::array();
  std::int64_t best = 0, best_runs = 0;
  for (const std::int64_t h : kHeads) {
    const std::string id = cell_id("key-value", kMlp, h);
    if (r.has_cell(id)) {
      const Count c = successes(r, id);
      counts.push_back(count_json(id, c));
      if (c.successes >= best) best = c.successes, best_runs = c.runs;
    }
    const std::string only = cell_id("key-value", kAttentionOnly, h);
    if (r.has_cell(only)) attention_only.push_back(count_json(only, successes(r, only)));
  }
  const bool some_h_learns = best >= std::min<std::int64_t>(kGateSuccesses, best_runs);
  v.numbers["gate"] = {{"pair_control", control},
                       {"pair_control_passed", control_passed},
                       {"best_key_value_successes", best},
                       {"some_h_learns", some_h_learns}};
  v.numbers["key_value_attn_mlp"] = counts;
  v.numbers["key_value_attn_only"] = attention_only;
  if (!control_passed || !some_h_learns) {
    v.verdict = Verdict::not_learned;
    v.reason = !control_passed
                   ? "the gate failed: a pair-control run stayed below 0.95 test accuracy"
                   : concat(
                         "the gate failed: no h of attention + MLP reached 0.95 "
                         "test accuracy on key-value in 6 of 8 seeds (best ",
                         best, "/", best_runs, ")");
    return {v};
  }
  const std::string h2_id = cell_id("key-value", kMlp, 2), h1_id = cell_id("key-value", kMlp, 1);
  const Count h2 = successes(r, h2_id), h1 = successes(r, h1_id);
  const FisherComparison f =
      fisher_compare(h2_id, h2.successes, h2.runs, h1_id, h1.successes, h1.runs);
  v.numbers["primary"] = to_json(f);
  const std::string counts_text = concat("h = 2 succeeded in ", h2.successes, "/", h2.runs,
                                         " seeds, h = 1 in ", h1.successes, "/", h1.runs);
  if (f.a_beats_b) {
    v.verdict = Verdict::confirmed;
    v.reason = concat(counts_text, " (one-sided Fisher p = ", f.p, ")");
  } else if (h1.successes >= std::min<std::int64_t>(kGateSuccesses, h1.runs) &&
             h1.successes >= h2.successes) {
    v.verdict = Verdict::refuted;
    v.reason = concat(counts_text, ": one head learns it as often as two");
  } else {
    v.verdict = Verdict::not_shown;
    v.reason = concat(counts_text, ": Fisher p = ", f.p, " is not below 0.05");
  }
  return {v};
}

std::string median_text(std::vector<double> values) {
  if (values.empty()) return "-";
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  const double m = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  return concat(m);
}

// Per cell: successes, the median and lowest test accuracy, the median steps to 0.95 on dev
// (over the runs that got there); per seed, the steps to 0.95 of each h (paired); a chart of
// the success fraction against h per series.
json summarize(const ExperimentResult& r) {
  json rows = json::array(), series = json::object();
  std::map<std::uint64_t, std::map<std::string, std::int64_t>> by_seed;
  for (std::size_t i = 0; i < r.experiment->cells.size(); ++i) {
    const Cell& cell = r.experiment->cells[i];
    std::vector<double> accuracy, steps;
    std::int64_t solved = 0, runs = 0;
    for (const RunRecord* run : r.runs_of(i)) {
      const json& m = run->measures.at("final");
      accuracy.push_back(m.at("test_accuracy").get<double>());
      solved += m.at("success").get<bool>();
      ++runs;
      const std::int64_t s = steps_to_success(*run);
      if (s >= 0) steps.push_back(static_cast<double>(s));
      if (cell.labels.at("series") == concat("key-value ", kMlp)) by_seed[run->seed][cell.id] = s;
    }
    rows.push_back({cell.id, concat(solved, "/", runs), median_text(accuracy),
                    concat(*std::min_element(accuracy.begin(), accuracy.end())),
                    steps.empty() ? std::string("not reached")
                                  : concat(median_text(steps), " (", steps.size(), " runs)")});
    const std::string name = cell.labels.at("series").get<std::string>();
    json& s = series[name];
    s["name"] = name;
    s["x"].push_back(cell.labels.at("heads"));
    s["y"].push_back(static_cast<double>(solved) /
                     static_cast<double>(std::max<std::int64_t>(1, runs)));
  }
  json seed_rows = json::array();
  for (const auto& [seed, cells] : by_seed) {
    json row = json::array({seed});
    for (const std::int64_t h : kHeads) {
      const auto it = cells.find(cell_id("key-value", kMlp, h));
      row.push_back(it == cells.end() ? std::string("-")
                    : it->second < 0  ? std::string("not reached")
                                      : concat(it->second));
    }
    seed_rows.push_back(row);
  }
  json chart_series = json::array();
  for (const auto& [name, s] : series.items()) chart_series.push_back(s);
  return {
      {"tables",
       {{{"title", "success (final test accuracy >= 0.95), per cell"},
         {"columns",
          {"cell", "successes", "median test accuracy", "lowest", "median steps to 0.95 (dev)"}},
         {"rows", rows},
         {"note", "dev points every 100 steps; steps over the runs that reached 0.95"}},
        {{"title", "steps to 0.95 dev accuracy by seed, key-value, attention + MLP"},
         {"columns", {"seed", "h=1", "h=2", "h=4", "h=8"}},
         {"rows", seed_rows},
         {"note", "paired by seed: the same data order at every h"}}}},
      {"charts",
       {{{"title", "fraction of seeds that succeed, against h"},
         {"x_label", "heads"},
         {"y_label", "successes / runs"},
         {"log2_x", true},
         {"series", chart_series}}}}};
}

}  // namespace

Experiment make_retrieval_learnability(const ExperimentOptions& o) {
  const std::int64_t steps = o.steps > 0 ? o.steps : o.quick ? kQuickSteps : kSteps;
  Experiment e{.name = "retrieval-learnability",
               .summary =
                   "E-B: multi-retrieval key-value (a content relation and an offset) at h = "
                   "1..8, attention + MLP and attention-only; success counts on test",
               .claim =
                   "several heads help gradient descent find a solution that needs two "
                   "relations, one content-addressed and one at a fixed offset"};
  e.metric_kind = MetricKind::accuracy;
  e.metric = "validation_accuracy";  // dev: the pilot picks on it
  e.sweep_label = "heads";
  e.series_label = "series";
  e.eval_points = std::max<std::int64_t>(1, steps / kDevEvery);
  e.eval_batches = 16;  // the whole dev set (512 sequences) at every point
  e.lr_grid = {1e-3, 3e-3, 1e-2};
  e.prereg = "bench/prereg/retrieval-learnability-v1.md";
  e.budget_seconds = 660;
  e.evaluation_seeds = kEvaluationSeeds;
  for (const char* arch : {kMlp, kAttentionOnly})
    for (const std::int64_t h : kHeads) {
      if (o.quick && (h > 2 || std::string(arch) == kAttentionOnly)) continue;
      e.cells.push_back({.id = cell_id("key-value", arch, h),
                         .labels = {{"series", concat("key-value ", arch)},
                                    {"task", "key-value"},
                                    {"arch", arch},
                                    {"heads", h}},
                         .config = cell_config("key-value", arch, h, steps)});
    }
  if (!o.quick)
    for (const std::int64_t h : kControlHeads)
      e.cells.push_back({.id = cell_id("pair", kMlp, h),
                         .labels = {{"series", concat("pair control ", kMlp)},
                                    {"task", "pair"},
                                    {"arch", kMlp},
                                    {"heads", h}},
                         .config = cell_config("pair", kMlp, h, steps)});
  e.budget = concat(
      "multi-retrieval, seq 32: key-value (8 keys x 8 values, offset 1) and the pair control "
      "(offsets 1 and 4, p 8); 1 layer, d_model 64, h heads of 64/h, attention + MLP (d_ff "
      "256) or attention-only; batch 32, ",
      steps, " steps, AdamW, weight decay 0.01, warm-up ", std::min<std::int64_t>(100, steps / 10),
      ", cosine to lr/10; dev every ", kDevEvery, " steps, test once at the end; ",
      o.quick ? "--quick: h 1 and 2, attention + MLP, lr 3e-3, not evidence."
              : "the lr per cell from the pilot on dev (seed 101, lr 1e-3 / 3e-3 / 1e-2), then "
                "seeds 1-8; steps from the probe (R10: 11 minutes on 2 idle cores).");
  e.at_final = at_final;
  e.judge = judge;
  e.summarize = summarize;
  return e;
}

// The long budget (bench/prereg/retrieval-learnability-long-v1.md; the protocol's "3x the steps
// under the same rule: does one head get there later?"): the primary's two cells (attention +
// MLP, h = 1 and 2) and the pair control at 3 x 3,600 steps, their own pilot, fresh seeds.
Experiment make_retrieval_learnability_long(const ExperimentOptions& o) {
  ExperimentOptions longer = o;
  if (longer.steps == 0 && !o.quick) longer.steps = 3 * kSteps;
  Experiment e = as_long_budget(
      make_retrieval_learnability(longer), "retrieval-learnability-long",
      "E-B, the long budget: key-value at h = 1 and 2 (attention + MLP) and the pair control at "
      "3 x the steps, own pilot, fresh seeds; does one head get there later?",
      "bench/prereg/retrieval-learnability-long-v1.md");
  std::erase_if(e.cells, [](const Cell& c) {
    return c.labels.at("task") == "key-value" &&
           (c.labels.at("arch") != kMlp || c.labels.at("heads").get<std::int64_t>() > 2);
  });
  e.budget = concat(e.budget, " Long budget: 3 x ", kSteps,
                    " steps; attention + MLP h = 1, 2 and the pair control only.");
  return e;
}

}  // namespace headcount::experiments
