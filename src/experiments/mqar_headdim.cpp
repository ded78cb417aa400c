// mqar-headdim: the claims protocol's E-D (bench/prereg/mqar-headdim-v1.md). Heads too narrow
// to separate many keys lose recall, and the loss is not simply one of head count:
//   task    assoc-recall (MQAR, src/train/tasks/assoc_recall.cpp): 8 pairs, 8 queries, 64 keys,
//           64 values, seq 32 (no filler); dev for the pilot, test for the verdict (the two
//           halves of the held-out side, synthetic_task.h), read once at the end;
//   models  2 layers, d_model 64, d_ff 256; main series h in {1, 4, 16, 32} of head_dim 64/h
//           (equal weights and multiply-adds); control h = 32 at head_dim 16 (width 512);
//   stages  probe -> pilot (seed 101 x lr {1e-3, 3e-3, 1e-2}, dev) -> test (seeds 1..5).
// Rule: h = 4 (head_dim 16) against main h = 32 (head_dim 2), paired test accuracy; the control
// says whether h = 32 loses because its heads are narrow or because they are many.
#include <algorithm>
#include <iterator>

#include "experiments/experiments.h"
#include "experiments/runner.h"
#include "experiments/stages.h"
#include "headcount/error.h"

namespace headcount::experiments {
namespace {

using detail::concat;
using nlohmann::json;

constexpr std::int64_t kMainHeads[] = {1, 4, 16, 32};
constexpr std::int64_t kDModel = 64, kControlHeads = 32, kControlHeadDim = 16, kBatch = 32;
// Steps of every run, from each version's probe (bench/results/2026-12-06-mqar-headdim[-v2]-probe
// .json, recorded in its pre-registration before its pilot): R10's largest multiple of 100
// within 0.85 x 19 min x 2 lanes. The protocol expected about 1,500; v1's steps take 5.2-24.7
// ms, v2's 2.7-11.5.
constexpr std::int64_t kSteps[] = {4400, 9200, 9200, 7700};  // v3: v2's probe (same cells);
                                                             // v4: its own probe (rotary)
constexpr std::int64_t kQuickSteps = 100;
constexpr int kEvaluationSeeds = 5;
constexpr double kGateAccuracy = 0.90;

std::string main_id(std::int64_t h) { return concat("h=", h); }
const std::string kControlId = concat("h=", kControlHeads, " hd=", kControlHeadDim);

// The task's rung: v1 the protocol's default, v2 its ladder's next rung (registered after v1's
// pilot failed the gate): fewer pairs to recall in a shorter row, the same keys and values.
struct Rung {
  std::int64_t pairs, seq_len;
};
constexpr Rung kRungs[] = {{8, 32}, {4, 16}, {4, 16}, {4, 16}};
// v3 (registered after v2's test): v2's rung with the lr grid a third lower, because v2's one
// cell piloted at 3e-4 (h = 1, by the edge extension) was the only one to learn the binding.
constexpr double kV3Grid[] = {3e-4, 1e-3, 3e-3};
// v4 (registered after v3's test, on fresh seeds 201-205): v3 with rotary positions instead of
// the learned position table. The plateau the narrow heads never left in v1-v3 is the position
// table's: with rotary positions 8 heads of 8 learn this rung in under 2,000 steps (E-F's
// exploratory runs, bench/prereg/kv-capacity-v1.md).
constexpr float kV4RopeBase = 10000.0f;

train::TrainConfig cell_config(const Rung& rung, std::int64_t heads, std::int64_t head_dim,
                               std::int64_t steps, const std::string& split, float rope_base) {
  train::TrainConfig c;
  c.task = {{"name", "assoc-recall"},
            {"num_pairs", rung.pairs},
            {"num_queries", rung.pairs},
            {"keys", 64},
            {"values", 64},
            {"seq_len", rung.seq_len},
            {"split", split}};
  c.model = {.context = rung.seq_len,
             .layers = 2,
             .d_model = kDModel,
             .heads = heads,
             .head_dim = head_dim,
             .d_ff = 4 * kDModel,
             .rope_base = rope_base};
  c.optim = protocol_optim(3e-3, steps, 0.1);  // the quick run's lr; the pilot sets each cell's
  c.steps = steps;
  c.batch = kBatch;
  return c;
}

// The best main cell's dev accuracy at the pilot: from the envelope of the pilot document a
// test-stage result carries (its cells are the grid's, not the pilot runs' lr-suffixed ids), or
// from the runs themselves when there is no pilot (a --quick run).
double best_pilot_accuracy(const ExperimentResult& r) {
  double best = 0;
  if (r.options.pilot.is_object()) {
    for (const auto& [id, cell] : r.options.pilot.at("envelope").at("cells").items())
      if (id != kControlId)
        for (const json& point : cell.at("points"))
          best = std::max(best, point.at("metric").get<double>());
    return best;
  }
  for (const RunRecord& run : r.runs)
    if (r.experiment->cells[run.cell].id != kControlId) best = std::max(best, run.final.accuracy);
  return best;
}

// Runs of a cell at or above 0.90 test accuracy, reported beside the verdict.
json success_counts(const ExperimentResult& r) {
  json out = json::object();
  for (std::size_t i = 0; i < r.experiment->cells.size(); ++i) {
    std::int64_t wins = 0, runs = 0;
    for (const RunRecord* run : r.runs_of(i)) {
      ++runs;
      wins += run->final.accuracy >= kGateAccuracy;
    }
    out[r.experiment->cells[i].id] = concat(wins, "/", runs);
  }
  return out;
}

std::vector<ClaimVerdict> judge(const ExperimentResult& r) {
  const MetricKind accuracy = MetricKind::accuracy;
  ClaimVerdict v{
      .id = "mqar-headdim.narrow-heads-hurt-recall",
      .claim =
          "heads too narrow to separate many keys lose recall (h = 4 of head_dim 16 against h = "
          "32 of head_dim 2), and not simply because they are many (h = 32 at head_dim 16)",
      .rule =
          "bench/prereg/mqar-headdim-v1.md and v2 (the ladder's 4 pairs): gate: the best main cell "
          ">= 0.90 dev accuracy at the "
          "pilot and h = 4 >= 0.90 test mean; primary h=4 vs main h=32, paired test accuracy "
          "(95 % t-interval excludes 0 and |mean| > 0.02); confirmed iff h=4 beats main h=32 and "
          "does not beat the control h=32 hd=16; refuted iff main h=32 is equivalent to h=4 or "
          "beats it; not shown otherwise (worded 'more heads hurt' when h=4 beats both)"};
  const double pilot_best = best_pilot_accuracy(r);
  const std::string split = main_id(4), narrow = main_id(kControlHeads);
  const Gate pilot_gate = gate("the best main cell's dev accuracy at the pilot >= 0.90", accuracy,
                               kGateAccuracy, pilot_best);
  const Gate test_gate =
      gate("h = 4 test accuracy mean >= 0.90", accuracy, kGateAccuracy, r.stats(split).mean);
  v.numbers["gate"] = {to_json(pilot_gate), to_json(test_gate)};
  v.numbers["successes_at_0.90"] = success_counts(r);
  if (!pilot_gate.passed || !test_gate.passed) {
    v.verdict = Verdict::not_learned;
    v.reason = concat("the gate failed: best pilot dev accuracy ", pilot_best, ", h = 4 test mean ",
                      r.stats(split).mean, " (each must be >= 0.90)");
    return {v};
  }
  if (!r.has_cell(narrow) || r.stats(split).n < 2) {
    v.verdict = Verdict::not_shown;
    v.reason = "a --quick smoke run: no paired interval";
    return {v};
  }
  const PairedComparison main = paired_compare(r.stats(split), r.stats(narrow), accuracy);
  const PairedComparison control = paired_compare(r.stats(split), r.stats(kControlId), accuracy);
  v.numbers["primary"] = to_json(main);
  v.numbers["h4_vs_control"] = to_json(control);
  const bool beats_main = main.winner == split, beats_control = control.winner == split;
  const std::string numbers = concat("h=4 - h=32 = ", main.mean, " [", main.low, ", ", main.high,
                                     "]; h=4 - control = ", control.mean, " [", control.low, ", ",
                                     control.high, "], n ", main.n);
  if (beats_main && !beats_control) {
    v.verdict = Verdict::confirmed;
    v.reason = numbers;
  } else if (main.equivalent || main.winner == narrow) {
    v.verdict = Verdict::refuted;
    v.reason = concat(numbers, ": head_dim 2 is enough at this size");
  } else {
    v.verdict = Verdict::not_shown;
    v.reason = concat(numbers, beats_main && beats_control ? ": more heads hurt" : "");
  }
  return {v};
}

}  // namespace

Experiment make_mqar_headdim_version(const ExperimentOptions& o, int version) {
  const Rung& rung = kRungs[version - 1];
  // The probe times steps whatever their count; every other stage needs the probe's count.
  HEADCOUNT_CHECK(o.steps > 0 || o.quick || kSteps[version - 1] > 0 || o.stage == Stage::probe,
                  "--steps", "a step count (the probe has not fixed the default yet)", o.steps);
  const std::int64_t steps = o.steps > 0                           ? o.steps
                             : o.quick || kSteps[version - 1] == 0 ? kQuickSteps
                                                                   : kSteps[version - 1];
  const float rope_base = version >= 4 ? kV4RopeBase : 0.0f;
  // Pilots pick on dev; the test stage (and a --quick smoke run) score test.
  const std::string split = o.stage == Stage::pilot ? "dev" : "test";
  Experiment e{.name = version == 1 ? "mqar-headdim" : concat("mqar-headdim-v", version),
               .summary = concat("E-D: MQAR (", rung.pairs,
                                 " pairs, 64 keys) at h = 1..32 heads of 64/h, plus h = 32 at "
                                 "head_dim 16; test accuracy, paired seeds"),
               .claim =
                   "heads too narrow to separate many keys lose recall, and the loss is not "
                   "simply one of head count"};
  e.metric_kind = MetricKind::accuracy;
  e.metric = "validation_accuracy";
  e.sweep_label = "heads";
  e.series_label = "series";
  e.eval_points = 1;  // test is read once, at the end (R3)
  e.lr_grid = {1e-3, 3e-3, 1e-2};
  if (version >= 3) {
    e.lr_grid.assign(std::begin(kV3Grid), std::end(kV3Grid));
    e.lr_extension = {1e-4, 1e-2};
  }
  e.prereg = concat("bench/prereg/mqar-headdim-v", version, ".md");
  e.budget_seconds = 1140;
  e.evaluation_seeds = kEvaluationSeeds;
  for (const std::int64_t h : kMainHeads) {
    if (o.quick && h != 4 && h != kControlHeads) continue;
    e.cells.push_back(
        {.id = main_id(h),
         .labels = {{"series", "main (head_dim 64/h)"}, {"heads", h}, {"head_dim", kDModel / h}},
         .config = cell_config(rung, h, kDModel / h, steps, split, rope_base)});
  }
  if (!o.quick)
    e.cells.push_back(
        {.id = kControlId,
         .labels = {{"series", "control (head_dim 16)"},
                    {"heads", kControlHeads},
                    {"head_dim", kControlHeadDim}},
         .config = cell_config(rung, kControlHeads, kControlHeadDim, steps, split, rope_base)});
  e.budget = concat(
      "assoc-recall (MQAR): ", rung.pairs, " pairs, ", rung.pairs,
      " queries, 64 keys, 64 values, seq ", rung.seq_len, "; 2 layers, d_model 64, d_ff 256, ",
      rope_base > 0 ? "rotary positions (v4)" : "a learned position table", "; batch 32, ", steps,
      " steps, AdamW (0.9, 0.99), weight decay 0.1, clip 1, warm-up ",
      std::min<std::int64_t>(100, steps / 10), ", cosine to lr/10; ",
      o.quick ? "--quick: h 4 and 32, not evidence."
              : concat("lr per cell from the pilot on dev (seed 101, lr ", e.lr_grid.front(), " / ",
                       e.lr_grid[1], " / ", e.lr_grid.back(),
                       "), then seeds 1-5 scored once on test; steps from the probe (R10: 19 "
                       "minutes on 2 idle cores)."),
      " Split: ", split, ".");
  e.judge = judge;
  return e;
}

Experiment make_mqar_headdim(const ExperimentOptions& o) { return make_mqar_headdim_version(o, 1); }
Experiment make_mqar_headdim_v2(const ExperimentOptions& o) {
  return make_mqar_headdim_version(o, 2);
}
Experiment make_mqar_headdim_v3(const ExperimentOptions& o) {
  return make_mqar_headdim_version(o, 3);
}
Experiment make_mqar_headdim_v4(const ExperimentOptions& o) {
  return make_mqar_headdim_version(o, 4);
}

// The long budget (bench/prereg/mqar-headdim-v4-long-v1.md): v4 on the protocol's rung 2, 256
// keys (values stay 64), at v4's 7,700 steps, its own pilot, fresh seeds 801-805. With four
// times the keys to tell apart, head_dim 2 and 4 have less room still; the rule is v4's.
Experiment make_mqar_headdim_v4_long(const ExperimentOptions& o) {
  Experiment e = as_long_budget(make_mqar_headdim_version(o, 4), "mqar-headdim-v4-long",
                                "E-D, the long budget: mqar-headdim-v4 on MQAR's rung 2 (256 "
                                "keys) at v4's 7,700 steps, own pilot, fresh seeds 801-805",
                                "bench/prereg/mqar-headdim-v4-long-v1.md");
  for (Cell& c : e.cells) c.config.task["keys"] = 256;
  restate_budget(e, " 64 keys,", " 256 keys (rung 2),");
  if (!o.quick)  // a --quick run's budget text names no seeds or probe
    restate_budget(e,
                   "then seeds 1-5 scored once on test; steps from the probe (R10: 19 minutes on "
                   "2 idle cores).",
                   "then seeds 801-805 scored once on test; v4's 7,700 steps (the protocol's "
                   "long budget).");
  return e;
}

}  // namespace headcount::experiments
