// esp-paper: the claims protocol's E-A (bench/prereg/esp-paper-v1.md). On a graph with m arcs,
// one attention-only layer with one head of any width answers at most 1 - MFAS / (2m) of the
// Endpoint Selection Problem's sequences; two narrow heads answer all of them ("Two (narrow)
// heads are better than (an arbitrarily wide) one", ICLR 2026, OpenReview RRmPbbZsvl).
//   task   esp "mode": "selector" (src/train/tasks/esp_selector.cpp), 8 vertices, the whole
//          enumeration as one full batch, scored on every sequence;
//   graphs T8 (transitive tournament, ceiling 1), K8* (complete digraph, 0.75), C8 (cycle,
//          0.9375); the ceilings come from the task's exact MFAS, not from constants;
//   models 1 layer, attention-only, pre-LN + final LN, learned positions (context 4),
//          d_model in {16, 64, 256}: H1 (1 head of d), H2 (2 heads of d/2); H1+FFN (d_ff 4d)
//          at d 64, reported, not judged;
//   stages probe -> pilot (seed 101 x lr {1e-3, 3e-3, 1e-2}) -> test (seeds 1..8).
// The run's at_final hook counts the sequences answered right; an H1 run above its ceiling is
// trained again, same seed and lr, with every bias frozen at zero (train::ModelConfig::
// frozen_biases), the protocol's test of whether a free bias (outside the theorem's class) made
// the difference. The judge applies the pre-registered rule to the test runs and the pilot's.
#include <algorithm>
#include <cmath>

#include "experiments/experiments.h"
#include "experiments/runner.h"
#include "experiments/stages.h"
#include "headcount/error.h"
#include "train/tasks/esp_graphs.h"

namespace headcount::experiments {
namespace {

using detail::concat;
using nlohmann::json;

struct Graph {
  const char* name;  // the task's graph
  const char* label;
};
constexpr Graph kGraphs[] = {{"transitive", "T8"}, {"complete", "K8*"}, {"cycle", "C8"}};
constexpr std::int64_t kWidths[] = {16, 64, 256};
constexpr std::int64_t kFfnWidth = 64;
constexpr std::int64_t kVertices = 8;
// Steps of every run, from the probe (bench/results/2026-12-05-esp-paper-probe.json, recorded in
// bench/prereg/esp-paper-v1.md before the pilot): R10's largest multiple of 100 within
// 0.85 x 20 min x 2 lanes for the pilot's and the test's runs.
constexpr std::int64_t kSteps = 7800;
constexpr std::int64_t kQuickSteps = 300;
constexpr int kEvaluationSeeds = 8;
constexpr int kGateSuccesses = 6;  // of 8, on T8, every arm and width

std::string cell_id(const Graph& g, std::int64_t d, const std::string& arm) {
  return concat(g.label, " d=", d, " ", arm);
}

train::TrainConfig cell_config(const Graph& g, std::int64_t d, std::int64_t heads, bool ffn,
                               std::int64_t steps, double lr) {
  train::TrainConfig c;
  c.task = {{"name", "esp"},
            {"mode", "selector"},
            {"graph", g.name},
            {"vertices", kVertices},
            {"enumerate", true}};
  c.model = {.context = 4,
             .layers = 1,
             .d_model = d,
             .heads = heads,
             .head_dim = d / heads,
             .d_ff = ffn ? 4 * d : 0,
             .attention_only = !ffn};
  c.optim = protocol_optim(lr, steps, 0);
  c.steps = steps;
  // The whole enumeration: 2m sequences (m = 28, 56, 8 arcs on 8 vertices).
  c.batch = 2 * static_cast<std::int64_t>(train::tasks::esp_graph_arcs(g.name, kVertices).size());
  return c;
}

// What a run's final evaluation counts: sequences right, the ceiling, whether it is above it.
json count_measures(const train::TaskMetrics& m, const json& task) {
  const std::int64_t sequences = task.at("sequences").get<std::int64_t>();
  const auto correct = static_cast<std::int64_t>(std::llround(m.accuracy * m.scored));
  const std::int64_t ceiling = task.at("one_head_ceiling_count").get<std::int64_t>();
  return {{"correct", correct},
          {"sequences", sequences},
          {"ceiling_count", ceiling},
          {"solved", correct == sequences},
          {"above_one_head_ceiling", correct > ceiling}};
}

json at_final(RunView& v) {
  const json task = v.trainer.task().describe();
  const train::TaskMetrics final =
      evaluate(v.ctx, v.trainer.model(), v.trainer.task(), v.trainer.config().batch, 0);
  json out = count_measures(final, task);
  const bool one_head = v.cell.labels.at("arm") == "H1";
  if (one_head && out.at("above_one_head_ceiling").get<bool>() &&
      v.trainer.config().model.frozen_biases) {
    out["frozen_biases_rerun"] = count_measures(final, task);  // it ran frozen (v2)
  } else if (one_head && out.at("above_one_head_ceiling").get<bool>()) {
    // The protocol's re-run: the same seed, lr and steps with every bias frozen at zero.
    train::TrainConfig config = v.trainer.config();
    config.model.frozen_biases = true;
    train::Trainer again(v.ctx, config);
    for (std::int64_t s = 0; s < config.steps; ++s) again.train_step();
    const train::TaskMetrics m = evaluate(v.ctx, again.model(), again.task(), config.batch, 0);
    out["frozen_biases_rerun"] = count_measures(m, task);
  }
  return out;
}

using Arm = ExperimentResult::Successes;

Arm successes(const ExperimentResult& r, const std::string& id) {
  return r.successes(id, "solved");
}

// Every H1 run above its ceiling (the test's and the pilot's), and whether any stays above with
// frozen biases.
struct Excess {
  json runs = json::array();
  bool any = false, any_frozen = false;
};

void add_excess(Excess& x, const std::string& stage, const std::string& cell, std::uint64_t seed,
                const json& measures) {
  if (!measures.at("above_one_head_ceiling").get<bool>()) return;
  x.any = true;
  json entry{{"stage", stage},
             {"cell", cell},
             {"seed", seed},
             {"correct", measures.at("correct")},
             {"ceiling_count", measures.at("ceiling_count")}};
  if (measures.contains("frozen_biases_rerun")) {
    const json& f = measures.at("frozen_biases_rerun");
    entry["frozen_biases_correct"] = f.at("correct");
    if (f.at("above_one_head_ceiling").get<bool>()) x.any_frozen = true;
  }
  x.runs.push_back(entry);
}

Excess excess_runs(const ExperimentResult& r) {
  Excess x;
  const auto judged = [](const json& labels) {
    return labels.at("arm") == "H1" && labels.at("graph") != "T8";
  };
  for (const RunRecord& run : r.runs)
    if (judged(r.experiment->cells[run.cell].labels))
      add_excess(x, "test", r.experiment->cells[run.cell].id, run.seed, run.measures.at("final"));
  const json& pilot = r.options.pilot;
  if (pilot.is_object())
    for (const json& run : pilot.at("runs")) {
      const json* labels = nullptr;
      for (const json& c : pilot.at("cells"))
        if (c.at("id") == run.at("cell")) labels = &c.at("labels");
      if (labels && judged(*labels))
        add_excess(x, "pilot", run.at("cell").get<std::string>(),
                   run.at("seed").get<std::uint64_t>(), run.at("measures").at("final"));
    }
  return x;
}

std::vector<ClaimVerdict> judge(const ExperimentResult& r) {
  ClaimVerdict v{.id = "esp-paper.one-head-capped",
                 .claim =
                     "one attention-only head of any width is capped at 1 - MFAS/(2m) on the "
                     "Endpoint Selection Problem; two narrow heads solve it",
                 .rule =
                     "bench/prereg/esp-paper-v1.md: gate H1 and H2 solve T8 in >= 6/8 seeds "
                     "at every d; primary K8* d=64, H2 vs H1 successes (112/112), one-sided "
                     "Fisher p < 0.05; confirmed iff H2 beats H1 and no H1 run (pilot "
                     "included) is above its ceiling on K8* or C8; refuted iff an H1 run is "
                     "above a ceiling with frozen biases, or H1's successes >= H2's; not "
                     "shown otherwise"};
  // The gate.
  json gates = json::array();
  bool gate_passed = true;
  for (const std::int64_t d : kWidths)
    for (const char* arm : {"H1", "H2"}) {
      const std::string id = cell_id(kGraphs[0], d, arm);
      if (!r.has_cell(id)) continue;  // --quick runs a subset
      const Arm a = successes(r, id);
      const bool passed = a.successes >= std::min<std::int64_t>(kGateSuccesses, a.runs);
      gate_passed = gate_passed && passed;
      gates.push_back(
          {{"cell", id}, {"successes", a.successes}, {"runs", a.runs}, {"passed", passed}});
    }
  v.numbers["gate"] = gates;
  const Excess x = excess_runs(r);
  v.numbers["h1_above_ceiling"] = x.runs;
  if (!gate_passed) {
    v.verdict = Verdict::not_learned;
    v.reason =
        "the gate failed: an arm did not solve the transitive tournament T8 in 6 of 8 "
        "seeds at some width (see numbers.gate)";
    return {v};
  }
  // --quick has d 16 only.
  const std::int64_t primary_d = r.has_cell(cell_id(kGraphs[1], 64, "H2")) ? 64 : 16;
  const Arm h2 = successes(r, cell_id(kGraphs[1], primary_d, "H2"));
  const Arm h1 = successes(r, cell_id(kGraphs[1], primary_d, "H1"));
  const FisherComparison f =
      fisher_compare(cell_id(kGraphs[1], primary_d, "H2"), h2.successes, h2.runs,
                     cell_id(kGraphs[1], primary_d, "H1"), h1.successes, h1.runs);
  v.numbers["primary"] = to_json(f);
  if (x.any_frozen) {
    v.verdict = Verdict::refuted;
    v.reason = "an H1 run stayed above its one-head ceiling with every bias frozen at zero";
  } else if (h1.successes >= h2.successes) {
    v.verdict = Verdict::refuted;
    v.reason = concat("H1 solved K8* d=", primary_d, " in ", h1.successes, "/", h1.runs,
                      " seeds, H2 in ", h2.successes, "/", h2.runs);
  } else if (f.a_beats_b && !x.any) {
    v.verdict = Verdict::confirmed;
    v.reason = concat("H2 solved K8* d=", primary_d, " in ", h2.successes, "/", h2.runs,
                      " seeds, H1 in ", h1.successes, "/", h1.runs, " (Fisher p = ", f.p,
                      "), and no H1 run went above its ceiling");
  } else {
    v.verdict = Verdict::not_shown;
    v.reason =
        x.any ? "an H1 run went above its ceiling with free biases only (frozen, it "
                "did not): the arm is to be re-registered with frozen biases (R9)"
              : concat("H2 ", h2.successes, "/", h2.runs, " vs H1 ", h1.successes, "/", h1.runs,
                       " on K8* d=", primary_d, ": Fisher p = ", f.p, " is not below 0.05");
  }
  return {v};
}

// Per cell: successes, the best and the median count, the ceiling; and a chart of each arm's
// counts against the one-head ceiling.
json summarize(const ExperimentResult& r) {
  json rows = json::array();
  json series = json::object();
  for (std::size_t i = 0; i < r.experiment->cells.size(); ++i) {
    const Cell& cell = r.experiment->cells[i];
    std::vector<std::int64_t> counts;
    std::int64_t sequences = 0, ceiling = 0, solved = 0;
    for (const RunRecord* run : r.runs_of(i)) {
      const json& m = run->measures.at("final");
      counts.push_back(m.at("correct").get<std::int64_t>());
      sequences = m.at("sequences").get<std::int64_t>();
      ceiling = m.at("ceiling_count").get<std::int64_t>();
      if (m.at("solved").get<bool>()) ++solved;
    }
    std::sort(counts.begin(), counts.end());
    rows.push_back(
        {cell.id, concat(solved, "/", counts.size()), concat(counts.back(), "/", sequences),
         concat(counts[counts.size() / 2], "/", sequences), concat(ceiling, "/", sequences)});
    const std::string name = concat(cell.labels.at("graph").get<std::string>(), " ",
                                    cell.labels.at("arm").get<std::string>());
    json& s = series[name];
    s["name"] = name;
    s["x"].push_back(cell.labels.at("d_model"));
    s["y"].push_back(static_cast<double>(counts.back()) / static_cast<double>(sequences));
    json& c = series[concat(cell.labels.at("graph").get<std::string>(), " one-head ceiling")];
    c["name"] = concat(cell.labels.at("graph").get<std::string>(), " one-head ceiling");
    c["dashed"] = true;
    if (!c.contains("x") ||
        std::find(c["x"].begin(), c["x"].end(), cell.labels.at("d_model")) == c["x"].end()) {
      c["x"].push_back(cell.labels.at("d_model"));
      c["y"].push_back(static_cast<double>(ceiling) / static_cast<double>(sequences));
    }
  }
  json chart_series = json::array();
  for (const auto& [name, s] : series.items()) chart_series.push_back(s);
  return {
      {"tables",
       {{{"title", "sequences answered right, per cell (the whole enumeration)"},
         {"columns", {"cell", "solved (all right)", "best run", "median run", "one-head ceiling"}},
         {"rows", rows},
         {"note",
          "ceiling = 2m - MFAS sequences (the theorem's bound for one head); the paper's "
          "trained one-head models reached 64.6-72.4 % on the complete digraph"}}}},
      {"charts",
       {{{"title", "best run's accuracy against the one-head ceiling"},
         {"x_label", "d_model"},
         {"y_label", "fraction of sequences right"},
         {"log2_x", true},
         {"series", chart_series}}}}};
}

}  // namespace

// v1 (bench/prereg/esp-paper-v1.md): biases free, an H1 run above its ceiling re-run with them
// frozen. v2 (bench/prereg/esp-paper-v2.md, registered after v1's pilot found a one-head model
// with free biases at 112/112 on K8* and the same seed frozen at 56/112): every cell's biases
// frozen from the start, the theorem's own model class.
Experiment make_esp_paper_version(const ExperimentOptions& o, int version) {
  const std::int64_t steps = o.steps > 0 ? o.steps : o.quick ? kQuickSteps : kSteps;
  Experiment e{.name = version == 1 ? "esp-paper" : "esp-paper-v2",
               .summary =
                   "E-A: the published Endpoint Selection Problem, one head vs two, "
                   "against the one-head ceiling 1 - MFAS/(2m)",
               .claim =
                   "one attention-only head of any width is capped at 1 - MFAS/(2m) on "
                   "the Endpoint Selection Problem (0.750 on the complete digraph, 0.9375 "
                   "on the 8-cycle); two narrow heads reach 1"};
  e.metric_kind = MetricKind::accuracy;
  e.metric = "validation_accuracy";
  e.sweep_label = "d_model";
  e.series_label = "series";
  e.eval_points = 4;
  e.eval_batches = 1;
  e.lr_grid = {1e-3, 3e-3, 1e-2};
  e.prereg = concat("bench/prereg/esp-paper-v", version, ".md");
  e.budget_seconds = 1200;
  e.evaluation_seeds = kEvaluationSeeds;
  const double quick_lr = 1e-2;
  for (const Graph& g : kGraphs)
    for (const std::int64_t d : kWidths) {
      if (o.quick && (d != 16 || std::string(g.label) == "C8")) continue;
      for (const auto& [arm, heads] : {std::pair{"H1", 1}, {"H2", 2}})
        e.cells.push_back({.id = cell_id(g, d, arm),
                           .labels = {{"series", concat(g.label, " ", arm)},
                                      {"graph", g.label},
                                      {"arm", arm},
                                      {"heads", heads},
                                      {"d_model", d}},
                           .config = cell_config(g, d, heads, false, steps, quick_lr)});
      if (d == kFfnWidth && !o.quick)
        e.cells.push_back({.id = cell_id(g, d, "H1+FFN"),
                           .labels = {{"series", concat(g.label, " H1+FFN")},
                                      {"graph", g.label},
                                      {"arm", "H1+FFN"},
                                      {"heads", 1},
                                      {"d_model", d}},
                           .config = cell_config(g, d, 1, true, steps, quick_lr)});
    }
  e.budget = concat(
      "esp selector, 8 vertices, the whole enumeration (56 / 112 / 16 sequences) as one full "
      "batch; 1 attention-only layer, d_model 16 / 64 / 256; ",
      steps, " steps, AdamW with warm-up ", std::min<std::int64_t>(100, steps / 10),
      " and cosine to lr/10, weight decay 0; ",
      o.quick ? "--quick: d 16, T8 and K8*, lr 1e-2, not evidence."
              : "the lr per cell from the pilot (seed 101, lr 1e-3 / 3e-3 / 1e-2), then seeds "
                "1-8; steps from the probe (R10: 20 minutes on 2 idle cores).");
  if (version >= 2) {
    for (Cell& c : e.cells) c.config.model.frozen_biases = true;
    e.budget += " Every bias frozen at zero in every cell (v2).";
  }
  e.at_final = at_final;
  e.judge = judge;
  e.summarize = summarize;
  return e;
}

Experiment make_esp_paper(const ExperimentOptions& o) { return make_esp_paper_version(o, 1); }
Experiment make_esp_paper_v2(const ExperimentOptions& o) { return make_esp_paper_version(o, 2); }

}  // namespace headcount::experiments
