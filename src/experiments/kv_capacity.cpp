// kv-capacity: the claims protocol's E-F (bench/prereg/kv-capacity-v1.md). The price of shared
// K/V on a task the MHA model learns, and whether uptraining a mean-pooled MHA model recovers it:
//   task    assoc-recall (MQAR) on E-D's registered rung: 4 pairs, 4 queries, 64 keys, 64 values,
//           seq 16; dev for the pilot, test for the verdicts (read once, at the end);
//   models  2 layers, d_model 64, d_ff 256, rotary positions (rope_base 10,000; learned positions
//           took 8 heads of 8 off the plateau only late, see the pre-registration); 8 query heads
//           of head_dim 8 with kv_heads in {8, 2, 1}, and the equal-KV-bytes arm: kv_heads 1 of
//           head_dim 64 (query width 512), whose K/V bytes per token equal MHA's;
//   stages  probe -> pilot (seed 101 x lr {3e-4, 1e-3, 3e-3}, dev) -> test (seeds 1..5);
//   at the end of each MHA test run (the at_final hook): mean-pool to G in {2, 1} and evaluate;
//           uptrain for 5 % of the steps (warm-up 10 %, peak 0.3 x the run's lr, cosine to a
//           tenth of it); control A: the unconverted MHA model on the same steps and schedule.
//           Control B is the grid's scratch cell kv = G.
// Rules (pre-registered): the price of sharing, kv 8 vs kv 1 paired test accuracy; uptraining
// recovers, uptrained G = 2 vs control A, with control B not beating the uptrained model.
// The protocol's long budget, two registered experiments with v1's rules:
//   kv-capacity-long         rung 2: 256 keys, else v1 (bench/prereg/kv-capacity-long-v1.md);
//   kv-capacity-charlm-long  E-C's char LM at h = 8 (head_dim 8) and 4N steps, kv in {8, 2, 1},
//                            test loss instead of accuracy, E-C's gate
//                            (bench/prereg/kv-capacity-charlm-long-v1.md).
#include <algorithm>
#include <cmath>

#include "experiments/experiments.h"
#include "experiments/runner.h"
#include "experiments/stages.h"
#include "experiments/uptrain.h"
#include "headcount/compress.h"
#include "headcount/error.h"
#include "headcount/train/definition.h"

namespace headcount::experiments {
namespace {

using detail::concat;
using nlohmann::json;

constexpr std::int64_t kDModel = 64, kFfnWidth = 256, kLayers = 2, kBatch = 32;
constexpr std::int64_t kHeads = 8, kHeadDim = 8, kWideHeadDim = 64;
constexpr std::int64_t kKvHeads[] = {8, 2, 1};
constexpr std::int64_t kPooledTo[] = {2, 1};
constexpr std::int64_t kPairs = 4, kSeqLen = 16, kKeys = 64, kValues = 64;
constexpr std::int64_t kRungTwoKeys = 256;  // the protocol's rung 2 (the long budget)
constexpr float kRopeBase = 10000.0f;
constexpr double kWeightDecay = 0.1;  // E-D's
// Steps of every run, from the probe (bench/results/2026-12-07-kv-capacity-probe.json, recorded
// in the pre-registration before the pilot): R10's largest multiple of 100 within 0.85 x 19 min
// x 2 lanes for the pilot's and the test's runs.
constexpr std::int64_t kSteps = 14000;
constexpr std::int64_t kQuickSteps = 100;
constexpr int kEvaluationSeeds = 5;
constexpr double kGateAccuracy = 0.90;
constexpr double kUptrainFraction = 0.05;  // Ainslie et al.'s alpha
constexpr double kUptrainPeak = 0.3;       // x the run's lr
constexpr double kBigramMargin = 0.25;     // E-C's gate: nats/char below the bigram baseline

// What differs between E-F's designs: the task and the metric its rules read (MQAR's test
// accuracy, or the char LM's test loss), the registration they cite and the claim's wording.
struct Design {
  std::string prereg;
  MetricKind kind = MetricKind::accuracy;
  std::string quality;  // what sharing costs, in the claim: "recall on a task ..."
  std::string as_well;  // the refuted reason's: "recalls as well as eight"
  std::string metric_key() const {
    return kind == MetricKind::accuracy ? "validation_accuracy" : "validation_loss";
  }
};
Design mqar_design(std::string prereg) {
  return {.prereg = std::move(prereg),
          .kind = MetricKind::accuracy,
          .quality = "recall on a task the MHA model learns",
          .as_well = "recalls as well as eight"};
}
Design char_lm_design() {
  return {.prereg = "bench/prereg/kv-capacity-charlm-long-v1.md",
          .kind = MetricKind::loss,
          .quality = "quality (test loss) in E-C's char LM at h = 8",
          .as_well = "models the text as well as eight"};
}
const char* metric_word(const Design& d) {
  return d.kind == MetricKind::accuracy ? "accuracy" : "loss";
}
// The rule's floor in words, from verdict.h's: "0.02" (accuracy), "0.01 nats" (loss).
std::string floor_text(const Design& d) {
  return concat(practical_floor(d.kind), d.kind == MetricKind::loss ? " nats" : "");
}

std::string cell_id(std::int64_t kv) { return concat("kv=", kv); }
const std::string kMha = cell_id(kHeads);
const std::string kEqualBytes = concat("kv=1 hd=", kWideHeadDim);

train::TrainConfig cell_config(std::int64_t kv_heads, std::int64_t head_dim, std::int64_t steps,
                               const std::string& split, std::int64_t keys) {
  train::TrainConfig c;
  c.task = {{"name", "assoc-recall"}, {"num_pairs", kPairs}, {"num_queries", kPairs},
            {"keys", keys},           {"values", kValues},   {"seq_len", kSeqLen},
            {"split", split}};
  c.model = {.context = kSeqLen,
             .layers = kLayers,
             .d_model = kDModel,
             .heads = kHeads,
             .kv_heads = kv_heads,
             .head_dim = head_dim,
             .d_ff = kFfnWidth,
             .rope_base = kRopeBase};
  c.optim = protocol_optim(1e-3, steps, kWeightDecay);  // the quick run's lr; the pilot sets each
  c.steps = steps;
  c.batch = kBatch;
  return c;
}

bool is_mha(const train::TrainConfig& c) {
  return c.model.kv_heads == kHeads && c.model.head_dim == kHeadDim;
}

// The at_final hook of an MHA run: control A, then every G converted, evaluated, uptrained and
// evaluated, all on the run's own split (test at the test stage).
json convert_and_uptrain(RunView& v) {
  const train::TrainConfig& base = v.trainer.config();
  if (!is_mha(base)) return json::object();
  const std::int64_t steps =
      std::max<std::int64_t>(1, std::llround(kUptrainFraction * static_cast<double>(base.steps)));
  const UptrainSchedule schedule{.steps = steps,
                                 .peak_lr = kUptrainPeak * base.optim.lr,
                                 .min_lr = kUptrainPeak * base.optim.lr / 10};
  const model::Weights mha = train::to_weights(v.trainer.model());
  json conversions = json::array();
  for (const std::int64_t g : kPooledTo) {
    const model::Weights pooled = model::convert_kv_heads(mha, g, KvConvertMethod::mean);
    train::Model converted = train::from_weights(pooled);
    conversions.push_back(
        {{"kv_heads", g},
         {"converted", metrics_json(evaluate(v.ctx, converted, v.trainer.task(), base.batch, 0))},
         {"uptrained", metrics_json(uptrain_and_evaluate(v.ctx, base, pooled, g, schedule))}});
  }
  return {{"uptrain_steps", steps},
          {"uptrain_peak_lr", schedule.peak_lr},
          {"control_a", metrics_json(uptrain_and_evaluate(v.ctx, base, mha, kHeads, schedule))},
          {"conversion", conversions}};
}

// The MHA cell's dev accuracy at its pilot pick (the envelope's best point), from the pilot
// document a test-stage result carries; without one (a --quick run), its own mean.
double mha_pilot_accuracy(const ExperimentResult& r) {
  if (!r.options.pilot.is_object()) return r.stats(kMha).mean;
  double best = 0;
  for (const json& p : r.options.pilot.at("envelope").at("cells").at(kMha).at("points"))
    best = std::max(best, p.at("metric").get<double>());
  return best;
}

// Per MHA run (seed order): the metric of control A, and of G's converted and uptrained models.
struct Uptraining {
  std::vector<double> control_a, converted, uptrained;
};
Uptraining uptraining_of(const ExperimentResult& r, std::int64_t g, const std::string& key) {
  Uptraining u;
  for (const RunRecord* run : r.runs_of(r.cell_index(kMha))) {
    const json& m = run->measures.at("final");
    u.control_a.push_back(m.at("control_a").at(key).get<double>());
    for (const json& c : m.at("conversion"))
      if (c.at("kv_heads") == g) {
        u.converted.push_back(c.at("converted").at(key).get<double>());
        u.uptrained.push_back(c.at("uptrained").at(key).get<double>());
      }
  }
  return u;
}

std::string interval_text(const PairedComparison& c) {
  return concat(c.mean, " [", c.low, ", ", c.high, "]");
}

ClaimVerdict price_of_sharing(const ExperimentResult& r, bool smoke, const Design& d) {
  const MetricKind accuracy = d.kind;
  ClaimVerdict v{
      .id = "kv-capacity.sharing-costs-recall",
      .claim = concat("sharing K/V across query heads (GQA, MQA) costs ", d.quality),
      .rule = concat(d.prereg, ": primary kv 8 vs kv 1, paired test ", metric_word(d),
                     " (95 % t-interval, floor ", floor_text(d),
                     "); confirmed iff kv 8 beats kv 1 and kv 2 does not beat kv 8; refuted iff "
                     "kv 1 is equivalent to kv 8 or beats it; not shown otherwise")};
  if (smoke) {
    v.verdict = Verdict::not_shown;
    v.reason = "a --quick smoke run: no paired interval";
    return v;
  }
  const PairedComparison primary = paired_compare(r.stats(kMha), r.stats(cell_id(1)), accuracy);
  const PairedComparison kv2 = paired_compare(r.stats(cell_id(2)), r.stats(kMha), accuracy);
  v.numbers["primary"] = to_json(primary);
  v.numbers["kv2_vs_kv8"] = to_json(kv2);
  std::string bytes_text;
  if (r.has_cell(kEqualBytes)) {  // not in the char-LM arm
    const PairedComparison bytes = paired_compare(r.stats(kEqualBytes), r.stats(kMha), accuracy);
    v.numbers["equal_kv_bytes_vs_kv8"] = to_json(bytes);
    bytes_text = concat(", kv 1 hd 64 (MHA's KV bytes) - kv 8 = ", interval_text(bytes));
  }
  const std::string numbers =
      concat("kv 8 - kv 1 = ", interval_text(primary), ", kv 2 - kv 8 = ", interval_text(kv2),
             bytes_text, ", n ", primary.n);
  if (primary.winner == kMha && kv2.winner != cell_id(2)) {
    v.verdict = Verdict::confirmed;
    v.reason = numbers;
  } else if (primary.equivalent || primary.winner == cell_id(1)) {
    v.verdict = Verdict::refuted;
    v.reason = concat(numbers, ": one K/V head ", d.as_well);
  } else {
    v.verdict = Verdict::not_shown;
    v.reason = numbers;
  }
  return v;
}

ClaimVerdict uptraining_recovers(const ExperimentResult& r, bool smoke, const Design& d) {
  const MetricKind accuracy = d.kind;
  ClaimVerdict v{
      .id = "kv-capacity.uptraining-recovers",
      .claim =
          "a trained MHA model mean-pooled to G = 2 K/V heads recovers with 5 % more steps of "
          "training (Ainslie et al. 2023)",
      .rule = concat(d.prereg,
                     ": primary uptrained G = 2 vs control A (the MHA model on the same steps and "
                     "schedule), paired test ",
                     metric_word(d), " (95 % t-interval, floor ", floor_text(d),
                     "); confirmed iff they are equivalent or uptrained is better, and control B "
                     "(scratch kv 2) does not beat uptrained; refuted iff control A beats "
                     "uptrained; not shown otherwise")};
  const Uptraining u = uptraining_of(r, 2, d.metric_key());
  if (smoke) {
    v.verdict = Verdict::not_shown;
    v.reason = "a --quick smoke run: no paired interval";
    return v;
  }
  const CellStats uptrained = cell_stats("kv=8->2 uptrained", u.uptrained);
  const CellStats control_a = cell_stats("control A (kv=8, same steps)", u.control_a);
  const PairedComparison primary = paired_compare(uptrained, control_a, accuracy);
  const PairedComparison scratch = paired_compare(r.stats(cell_id(2)), uptrained, accuracy);
  v.numbers["primary"] = to_json(primary);
  v.numbers["control_b_vs_uptrained"] = to_json(scratch);
  const std::string numbers =
      concat("uptrained G=2 - control A = ", interval_text(primary),
             ", scratch kv 2 - uptrained = ", interval_text(scratch), ", n ", primary.n);
  if ((primary.equivalent || primary.winner == uptrained.cell) && scratch.winner != cell_id(2)) {
    v.verdict = Verdict::confirmed;
    v.reason = numbers;
  } else if (primary.winner == control_a.cell) {
    v.verdict = Verdict::refuted;
    v.reason = concat(numbers, ": the MHA model trained on is better than the uptrained one");
  } else {
    v.verdict = Verdict::not_shown;
    v.reason = numbers;
  }
  return v;
}

// The char-LM arm's gate, E-C's: the MHA cell's test mean <= the bigram baseline - 0.25 nats.
std::vector<ClaimVerdict> judge_char_lm(const ExperimentResult& r, const Design& d) {
  const double bigram = r.task.value("bigram_loss", 0.0), test = r.stats(kMha).mean;
  const Gate g =
      gate(concat("MHA (kv 8) test loss <= bigram baseline ", bigram, " - ", kBigramMargin),
           MetricKind::loss, bigram - kBigramMargin, test);
  const bool smoke = !r.has_cell(cell_id(2)) || r.stats(kMha).n < 2;
  std::vector<ClaimVerdict> out = {price_of_sharing(r, smoke || !g.passed, d),
                                   uptraining_recovers(r, smoke || !g.passed, d)};
  for (ClaimVerdict& v : out) {
    v.numbers["gate"] = json::array({to_json(g)});
    if (!g.passed) {
      v.verdict = Verdict::not_learned;
      v.reason = concat("the gate failed: MHA test loss ", test, " is above ", g.level);
    }
  }
  return out;
}

std::vector<ClaimVerdict> judge(const ExperimentResult& r, const Design& d) {
  if (d.kind == MetricKind::loss) return judge_char_lm(r, d);
  const double pilot = mha_pilot_accuracy(r), test = r.stats(kMha).mean;
  // A --quick run has no pilot: its first half of the gate reads the run's own test mean, and
  // says so.
  const char* pilot_gate = r.options.pilot.is_object()
                               ? "MHA (kv 8) dev accuracy at its pilot lr >= 0.90"
                               : "MHA (kv 8) test accuracy (no pilot: a --quick run) >= 0.90";
  const json gates = {to_json(gate(pilot_gate, MetricKind::accuracy, kGateAccuracy, pilot)),
                      to_json(gate("MHA (kv 8) test accuracy mean >= 0.90", MetricKind::accuracy,
                                   kGateAccuracy, test))};
  const bool learned = pilot >= kGateAccuracy && test >= kGateAccuracy;
  const bool smoke = !r.has_cell(cell_id(2)) || r.stats(kMha).n < 2;
  std::vector<ClaimVerdict> out = {price_of_sharing(r, smoke || !learned, d),
                                   uptraining_recovers(r, smoke || !learned, d)};
  for (ClaimVerdict& v : out) {
    v.numbers["gate"] = gates;
    if (!learned) {
      v.verdict = Verdict::not_learned;
      v.reason = concat("the gate failed: MHA dev accuracy at the pilot ", pilot, ", test mean ",
                        test, " (each must be >= 0.90)");
    }
  }
  return out;
}

double mean_of(const std::vector<double>& values) {
  double sum = 0;
  for (const double x : values) sum += x;
  return values.empty() ? 0.0 : sum / static_cast<double>(values.size());
}
json mean_cell(const std::vector<double>& values) {
  return values.empty() ? json("-") : json(mean_of(values));
}

// Per cell: the test metric, successes >= 0.90 (MQAR; the runs for a loss), KV bytes per token
// (the cost model); per G: the converted, uptrained, control A and scratch means and the recovery
// fraction (uptrained - converted) / (control A - converted); a chart of the metric against KV
// bytes.
json summarize(const ExperimentResult& r, const Design& d) {
  const bool accuracy = d.kind == MetricKind::accuracy;
  const std::string word = metric_word(d);
  json rows = json::array(), scratch_x = json::array(), scratch_y = json::array();
  for (std::size_t i = 0; i < r.experiment->cells.size(); ++i) {
    const Cell& cell = r.experiment->cells[i];
    const CellStats& s = r.cells[i];
    std::int64_t wins = 0;
    for (const double x : s.values) wins += x >= kGateAccuracy;
    const auto runs = r.runs_of(i);
    const std::int64_t bytes = runs.empty() ? 0 : runs.front()->cost.kv_cache_bytes_per_token;
    rows.push_back(
        {cell.id, bytes, s.mean, s.std, accuracy ? json(concat(wins, "/", s.n)) : json(s.n)});
    if (cell.labels.at("head_dim") == kHeadDim) {
      scratch_x.push_back(bytes);
      scratch_y.push_back(s.mean);
    }
  }
  json conversion_rows = json::array(), converted_x = json::array(), converted_y = json::array(),
       uptrained_y = json::array();
  const std::int64_t mha_bytes =
      r.runs_of(r.cell_index(kMha)).front()->cost.kv_cache_bytes_per_token;
  for (const std::int64_t g : kPooledTo) {
    const Uptraining u = uptraining_of(r, g, d.metric_key());
    // Better is higher for an accuracy, lower for a loss: the room and the gain are signed so.
    const double better = accuracy ? 1.0 : -1.0;
    std::vector<double> recovery;
    for (std::size_t s = 0; s < u.converted.size(); ++s) {
      const double room = better * (u.control_a[s] - u.converted[s]);
      if (room > 0) recovery.push_back(better * (u.uptrained[s] - u.converted[s]) / room);
    }
    const json scratch = r.has_cell(cell_id(g)) ? json(r.stats(cell_id(g)).mean) : json("-");
    conversion_rows.push_back({g, mean_cell(u.converted), mean_cell(u.uptrained),
                               mean_cell(u.control_a), scratch, mean_cell(recovery)});
    converted_x.push_back(mha_bytes / kHeads * g);
    converted_y.push_back(mean_of(u.converted));
    uptrained_y.push_back(mean_of(u.uptrained));
  }
  return {
      {"tables",
       {{{"title",
          concat("test ", word, " per cell against the KV cache (cost model, f32, all layers)")},
         {"columns",
          {"cell", "KV bytes / token", "mean", "std", accuracy ? "runs >= 0.90" : "runs"}},
         {"rows", rows}},
        {{"title", "MHA mean-pooled to G K/V heads: just converted, uptrained, and the controls"},
         {"columns",
          {"G", "converted", "uptrained (5 % steps)", "control A (MHA, same steps)",
           "control B (scratch kv = G)", "recovery fraction"}},
         {"rows", conversion_rows},
         {"note",
          concat(
              "means over the MHA cell's seeds; recovery = (uptrained - converted) / (control A - "
              "converted), over the seeds where control A is ",
              accuracy ? "above" : "below", " the converted model")}}}},
      {"charts",
       {{{"title", concat("test ", word, " against KV bytes per token")},
         {"x_label", "KV bytes per token"},
         {"y_label", concat("test ", word)},
         {"log2_x", true},
         {"series",
          {{{"name", "from scratch (head_dim 8)"}, {"x", scratch_x}, {"y", scratch_y}},
           {{"name", "MHA mean-pooled"}, {"x", converted_x}, {"y", converted_y}, {"dashed", true}},
           {{"name", "mean-pooled + uptrained"}, {"x", converted_x}, {"y", uptrained_y}}}}}}}};
}

// v1 (64 keys) and rung 2 (256 keys) differ only in the task's key count and the registration.
Experiment mqar_experiment(const ExperimentOptions& o, std::int64_t keys, const Design& d) {
  // The probe times steps whatever their count; every other stage needs the probe's count.
  HEADCOUNT_CHECK(o.steps > 0 || o.quick || kSteps > 0 || o.stage == Stage::probe, "--steps",
                  "a step count (the probe has not fixed the default yet)", o.steps);
  const std::int64_t steps = o.steps > 0 ? o.steps : o.quick || kSteps == 0 ? kQuickSteps : kSteps;
  // Pilots pick on dev; the test stage (and a --quick smoke run) score test.
  const std::string split = o.stage == Stage::pilot ? "dev" : "test";
  Experiment e{.name = "kv-capacity",
               .summary =
                   "E-F: MQAR with 8 query heads over kv 8 / 2 / 1 K/V heads and the "
                   "equal-KV-bytes arm; MHA mean-pooled and uptrained against controls",
               .claim =
                   "sharing K/V costs recall on a task the MHA model learns, and a mean-pooled "
                   "MHA model recovers it with 5 % more training"};
  e.metric_kind = MetricKind::accuracy;
  e.metric = "validation_accuracy";
  e.sweep_label = "kv_heads";
  e.series_label = "series";
  e.eval_points = 1;  // the split is read once, at the end (R3)
  e.lr_grid = {3e-4, 1e-3, 3e-3};
  e.lr_extension = {1e-4, 1e-2};
  e.prereg = d.prereg;
  e.budget_seconds = 1140;
  e.evaluation_seeds = kEvaluationSeeds;
  for (const std::int64_t kv : kKvHeads) {
    if (o.quick && kv == 2) continue;
    e.cells.push_back(
        {.id = cell_id(kv),
         .labels = {{"series", "8 query heads of 8"}, {"kv_heads", kv}, {"head_dim", kHeadDim}},
         .config = cell_config(kv, kHeadDim, steps, split, keys)});
  }
  if (!o.quick)
    e.cells.push_back({.id = kEqualBytes,
                       .labels = {{"series", "equal KV bytes (head_dim 64)"},
                                  {"kv_heads", 1},
                                  {"head_dim", kWideHeadDim}},
                       .config = cell_config(1, kWideHeadDim, steps, split, keys)});
  e.budget = concat(
      "assoc-recall (MQAR): ", kPairs, " pairs, ", kPairs, " queries, ", keys, " keys, ", kValues,
      " values, seq ", kSeqLen,
      "; 2 layers, d_model 64, d_ff 256, rotary positions, 8 query "
      "heads; batch 32, ",
      steps, " steps, AdamW (0.9, 0.99), weight decay 0.1, clip 1, warm-up ",
      std::min<std::int64_t>(100, steps / 10),
      ", cosine to lr/10; the MHA runs mean-pooled to G = 2 and 1 and uptrained for 5 % of the "
      "steps (warm-up 10 %, peak 0.3 x lr), control A on the same schedule; ",
      o.quick ? "--quick: kv 8 and 1, lr 1e-3, not evidence."
              : "lr per cell from the pilot on dev (seed 101, lr 3e-4 / 1e-3 / 3e-3, edges 1e-4 "
                "and 1e-2), then seeds 1-5 scored once on test; steps from the probe (R10: 19 "
                "minutes on 2 idle cores).",
      " Split: ", split, ".");
  // The pilot picks learning rates only: no conversion there.
  if (o.stage != Stage::pilot) e.at_final = convert_and_uptrain;
  e.judge = [d](const ExperimentResult& r) { return judge(r, d); };
  e.summarize = [d](const ExperimentResult& r) { return summarize(r, d); };
  return e;
}

}  // namespace

Experiment make_kv_capacity(const ExperimentOptions& o) {
  return mqar_experiment(o, kKeys, mqar_design("bench/prereg/kv-capacity-v1.md"));
}

// Rung 2: v1 with 256 keys, at v1's 14,000 steps (no probe: the long budget is registered by its
// steps), its own pilot and fresh evaluation seeds (701-705, from the command line).
Experiment make_kv_capacity_long(const ExperimentOptions& o) {
  const std::string prereg = "bench/prereg/kv-capacity-long-v1.md";
  Experiment e =
      as_long_budget(mqar_experiment(o, kRungTwoKeys, mqar_design(prereg)), "kv-capacity-long",
                     "E-F, the long budget: kv-capacity on MQAR's rung 2 (256 keys) at "
                     "14,000 steps, own pilot, fresh seeds 701-705",
                     prereg);
  if (!o.quick)  // a --quick run's budget text names no seeds or probe
    restate_budget(e,
                   "then seeds 1-5 scored once on test; steps from the probe (R10: 19 minutes on "
                   "2 idle cores).",
                   "then seeds 701-705 scored once on test; rung 1's 14,000 steps (the "
                   "protocol's long budget).");
  return e;
}

// The char-LM arm: E-C's model at h = 8 (head_dim 8) over kv 8 / 2 / 1 K/V heads at 4N steps,
// E-C's lr grid, the same conversion and controls; test loss, E-C's gate.
Experiment make_kv_capacity_charlm_long(const ExperimentOptions& o) {
  const std::int64_t steps = o.steps > 0 ? o.steps
                             : o.quick   ? head_sweep_tuned_steps(true)
                                         : 4 * head_sweep_tuned_steps(false);
  const std::string split = o.stage == Stage::pilot ? "dev" : "test";
  const Design d = char_lm_design();
  Experiment e{.name = "kv-capacity-charlm-long",
               .summary =
                   "E-F's char-LM arm (long budget): E-C's char LM with 8 query heads of 8 over "
                   "kv 8 / 2 / 1 K/V heads at 4N = 9,600 steps; MHA mean-pooled and uptrained",
               .claim =
                   "sharing K/V costs quality in a language model, and a mean-pooled MHA model "
                   "recovers it with 5 % more training"};
  e.metric_kind = MetricKind::loss;
  e.metric = "validation_loss";
  e.sweep_label = "kv_heads";
  e.series_label = "series";
  e.eval_points = 1;
  e.lr_grid = {1e-3, 3e-3, 1e-2};  // E-C's, with its edges 3e-4 and 3e-2
  e.prereg = d.prereg;
  e.budget_seconds = 0;  // 4N by registration
  e.evaluation_seeds = kEvaluationSeeds;
  for (const std::int64_t kv : kKvHeads) {
    if (o.quick && kv == 2) continue;
    train::TrainConfig c = head_sweep_tuned_cell(kHeads, kHeadDim, steps, split, o.quick);
    c.model.kv_heads = kv;
    e.cells.push_back(
        {.id = cell_id(kv),
         .labels = {{"series", "8 query heads of 8"}, {"kv_heads", kv}, {"head_dim", kHeadDim}},
         .config = c});
  }
  e.budget = concat(
      "E-C's char LM (data/pride-and-prejudice.txt; ",
      o.quick ? "1 layer, context 32, batch 8" : "2 layers, context 64, batch 16",
      ", d_model 64, d_ff 256, learned positions), 8 query heads of 8 over kv 8 / 2 / 1; ", steps,
      " steps, AdamW (0.9, 0.99), weight decay 0.1, clip 1, warm-up ",
      std::min<std::int64_t>(100, steps / 10),
      ", cosine to lr/10; the MHA runs mean-pooled to G = 2 and 1 and uptrained for 5 % of the "
      "steps (warm-up 10 %, peak 0.3 x lr), control A on the same schedule; ",
      o.quick ? "--quick: kv 8 and 1, E-C's quick cell, not evidence."
              : "lr per cell from the pilot on dev (seed 101, lr 1e-3 / 3e-3 / 1e-2, edges 3e-4 "
                "and 3e-2), then seeds 711-715 scored once on test (4N, the protocol's long "
                "budget).",
      " Split: ", split, ".");
  if (o.stage != Stage::pilot) e.at_final = convert_and_uptrain;
  e.judge = [d](const ExperimentResult& r) { return judge(r, d); };
  e.summarize = [d](const ExperimentResult& r) { return summarize(r, d); };
  return e;
}

}  // namespace headcount::experiments
