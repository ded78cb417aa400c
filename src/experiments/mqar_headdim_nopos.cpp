// mqar-headdim-nopos: the claims protocol's E-D without the position confound, third edition
// (bench/prereg/mqar-headdim-nopos-v1.md; R-positions, R-counts, R-pilot3, R-words).
//   task    assoc-recall (MQAR): v2's rung, 4 pairs, 4 queries, 64 values, seq 16, no filler;
//           keys in {16, 64, 256} (the key ladder); dev for the pilot, test read once at the end;
//   models  2 layers, d_model 64, d_ff 256, pre-LN, a learned position table (no rotary: a 2-wide
//           head's single rotary pair is what v4's failure may have measured); h = 4, 16, 32 of
//           head_dim 64/h (equal weights and multiply-adds within a rung);
//   stages  probe -> pilot (R-pilot3: seeds 101-103 x lr {3e-4, 1e-3, 3e-3}, edges 1e-4 / 1e-2,
//           pick by the mean dev accuracy) -> test (seeds 1301-1308, --first-seed 1301).
// Success = test accuracy >= 0.90. Rules (R-counts, one-sided Fisher, p < 0.05):
//   claim 1 (primary at 64 keys, beside it at 16 and 256): h = 4's successes beat h = 32's;
//           refuted iff h = 32 succeeds in >= 6/8 and no less often than h = 4;
//   claim 2 (the ladder): h = 32's successes at 16 keys beat those at 256 keys while h = 4 keeps
//           >= 6/8 at 256; refuted iff 256 keys beats 16 keys (the wrong sign).
// A rung whose gate fails (h = 4's mean pilot dev accuracy at its pick >= 0.90 and >= 6/8 test
// successes) is "task not learned" at that rung; claim 2 needs the gate at 16 and 256 keys.
#include <algorithm>
#include <cstdio>

#include "experiments/experiments.h"
#include "experiments/runner.h"
#include "experiments/stages.h"
#include "headcount/error.h"

namespace headcount::experiments {
namespace {

using Count = SuccessCount;

using detail::concat;
using nlohmann::json;

constexpr std::int64_t kKeys[] = {16, 64, 256};
constexpr std::int64_t kHeads[] = {4, 16, 32};
constexpr std::int64_t kDModel = 64, kPairs = 4, kValues = 64, kSeqLen = 16, kBatch = 32;
constexpr std::int64_t kWide = 4, kNarrow = 32, kPrimaryKeys = 64;
// Steps of every run at every rung, from the probe (R10, recorded in the pre-registration before
// the pilot): bench/results/2026-12-07-mqar-headdim-nopos-probe.json, 4.5-10.2 ms per step.
constexpr std::int64_t kSteps = 5700;
constexpr std::int64_t kQuickSteps = 100;
constexpr int kEvaluationSeeds = 8, kPilotSeeds = 3;
constexpr std::int64_t kGateSuccesses = 6;  // of 8
constexpr double kSuccess = 0.90;
constexpr double kGrid[] = {3e-4, 1e-3, 3e-3};

std::string cell_id(std::int64_t keys, std::int64_t heads) {
  return concat("keys=", keys, " h=", heads);
}

train::TrainConfig cell_config(std::int64_t keys, std::int64_t heads, std::int64_t steps,
                               const std::string& split) {
  train::TrainConfig c;
  c.task = {{"name", "assoc-recall"}, {"num_pairs", kPairs}, {"num_queries", kPairs},
            {"keys", keys},           {"values", kValues},   {"seq_len", kSeqLen},
            {"split", split}};
  c.model = {.context = kSeqLen,  // the learned position table; rope_base 0: no rotary
             .layers = 2,
             .d_model = kDModel,
             .heads = heads,
             .head_dim = kDModel / heads,
             .d_ff = 4 * kDModel};
  c.optim = protocol_optim(1e-3, steps, 0.1);  // the quick run's lr; the pilot sets each cell's
  c.steps = steps;
  c.batch = kBatch;
  return c;
}

Count successes(const ExperimentResult& r, const std::string& id) {
  return success_count(r, id, kSuccess);
}

json per_seed(const ExperimentResult& r, const std::string& id) { return r.stats(id).values; }

// Beside a count: the paired mean difference of test accuracy with its 95 % t-interval (df 7),
// reported, not judged.
json paired_line(const ExperimentResult& r, const std::string& a, const std::string& b) {
  if (r.stats(a).n < 2 || r.stats(a).n != r.stats(b).n) return nullptr;
  return to_json(paired_compare(r.stats(a), r.stats(b), MetricKind::accuracy));
}

std::string at_words(std::int64_t steps, std::int64_t keys) {
  return concat(steps, " steps, 2 layers, d_model 64, ", keys, " keys, learned positions");
}

struct RungGate {
  bool passed = false;
  json numbers;
};

RungGate rung_gate(const ExperimentResult& r, std::int64_t keys) {
  const std::string wide = cell_id(keys, kWide);
  const double pilot = pilot_metric_at_pick(r, wide);
  const Count test = successes(r, wide);
  const Gate pilot_gate =
      gate(concat("h = 4's mean pilot dev accuracy at its pick >= 0.90 (", keys, " keys)"),
           MetricKind::accuracy, kSuccess, pilot);
  const bool test_passed = test.successes >= std::min(kGateSuccesses, test.runs);
  return {.passed = pilot_gate.passed && test_passed,
          .numbers = {{"pilot", to_json(pilot_gate)},
                      {"h4_test_successes", count_text(test)},
                      {"h4_test_passed", test_passed}}};
}

ClaimVerdict claim1(const ExperimentResult& r, std::int64_t keys, std::int64_t steps) {
  const bool primary = keys == kPrimaryKeys;
  ClaimVerdict v{
      .id = concat("mqar-headdim-nopos.narrow-heads-lose-recall",
                   primary ? "" : concat(".keys-", keys)),
      .claim = concat("without a position encoding that limits narrow heads, heads of 2 at "
                      "d_model 64 lose recall against heads of 16 (",
                      keys, " keys", primary ? ", primary" : ", reported beside the primary", ")"),
      .rule =
          "bench/prereg/mqar-headdim-nopos-v1.md: gate: h = 4's mean pilot dev accuracy at "
          "its pick >= 0.90 and h = 4 >= 6/8 test runs at >= 0.90; h = 4 vs h = 32 successes "
          "(test accuracy >= 0.90), one-sided Fisher p < 0.05: confirmed iff h = 4 beats "
          "h = 32; refuted iff h = 32 succeeds in >= 6/8 and no less often than h = 4; else "
          "not shown at this size"};
  const std::string wide = cell_id(keys, kWide), narrow = cell_id(keys, kNarrow),
                    middle = cell_id(keys, 16);
  const RungGate g = rung_gate(r, keys);
  const Count w = successes(r, wide), n = successes(r, narrow);
  v.numbers["gate"] = g.numbers;
  v.numbers["successes"] = {{wide, count_text(w)}, {narrow, count_text(n)}};
  if (r.has_cell(middle)) v.numbers["successes"][middle] = count_text(successes(r, middle));
  v.numbers["per_seed_test_accuracy"] = {{wide, per_seed(r, wide)}, {narrow, per_seed(r, narrow)}};
  v.numbers["paired_accuracy_h4_minus_h32"] = paired_line(r, wide, narrow);
  const std::string at = at_words(steps, keys);
  v.numbers["at"] = at;
  const std::string counts =
      concat("h = 4 ", count_text(w), ", h = 32 ", count_text(n), " runs at >= 0.90");
  if (!g.passed) {
    v.verdict = Verdict::not_learned;
    v.reason = concat("the gate failed at ", keys, " keys: h = 4's pilot dev accuracy ",
                      g.numbers["pilot"]["measured"].get<double>(), ", test successes ",
                      count_text(w), " (>= 0.90 and >= 6/8 needed)");
  } else {
    const FisherComparison f =
        fisher_compare(wide, w.successes, w.runs, narrow, n.successes, n.runs);
    v.numbers["primary"] = to_json(f);
    v.verdict = more_successes_verdict(f, kGateSuccesses);
    v.reason = concat(counts, ", one-sided Fisher p = ", f.p);
  }
  v.numbers["worded"] = worded_verdict(v.verdict, at);
  return v;
}

ClaimVerdict claim2(const ExperimentResult& r, std::int64_t steps) {
  ClaimVerdict v{
      .id = "mqar-headdim-nopos.deficit-grows-with-keys",
      .claim =
          "the narrow heads' deficit grows with the number of keys to tell apart (h = 32 of "
          "head_dim 2 succeeds less often at 256 keys than at 16)",
      .rule =
          "bench/prereg/mqar-headdim-nopos-v1.md: needs the gate at 16 and at 256 keys; "
          "confirmed iff h = 32's successes at 16 keys beat its successes at 256 keys "
          "(one-sided Fisher p < 0.05, the same seeds) while h = 4 keeps >= 6/8 at 256; "
          "refuted iff h = 32's successes at 256 keys beat those at 16 keys; else not shown "
          "at this size"};
  const std::int64_t small = kKeys[0], large = kKeys[2];
  const std::string n_small = cell_id(small, kNarrow), n_large = cell_id(large, kNarrow),
                    w_large = cell_id(large, kWide);
  const RungGate g_small = rung_gate(r, small), g_large = rung_gate(r, large);
  const Count a = successes(r, n_small), b = successes(r, n_large), wl = successes(r, w_large);
  v.numbers["gate"] = {{concat(small, " keys"), g_small.numbers},
                       {concat(large, " keys"), g_large.numbers}};
  v.numbers["successes"] = {
      {n_small, count_text(a)}, {n_large, count_text(b)}, {w_large, count_text(wl)}};
  v.numbers["paired_accuracy_h32_16_minus_256_keys"] = paired_line(r, n_small, n_large);
  const std::string at = concat(steps, " steps, 2 layers, d_model 64, ", small, " against ", large,
                                " keys, learned positions");
  v.numbers["at"] = at;
  if (!g_small.passed || !g_large.passed) {
    v.verdict = Verdict::not_learned;
    v.reason = concat("the gate failed at ", !g_small.passed ? small : large, " keys");
  } else {
    const FisherComparison down =
        fisher_compare(n_small, a.successes, a.runs, n_large, b.successes, b.runs);
    const FisherComparison up =
        fisher_compare(n_large, b.successes, b.runs, n_small, a.successes, a.runs);
    v.numbers["primary"] = to_json(down);
    v.numbers["wrong_sign"] = to_json(up);
    v.verdict =
        fewer_at_larger_verdict(down, up, wl.successes >= std::min(kGateSuccesses, wl.runs));
    v.reason = concat("h = 32: ", count_text(a), " at ", small, " keys, ", count_text(b), " at ",
                      large, " (one-sided Fisher p = ", down.p, "; the wrong sign p = ", up.p,
                      "); h = 4 at ", large, " keys ", count_text(wl));
  }
  v.numbers["worded"] = worded_verdict(v.verdict, at);
  return v;
}

std::vector<ClaimVerdict> judge(const ExperimentResult& r, std::int64_t steps) {
  std::vector<ClaimVerdict> out;
  const bool full = r.has_cell(cell_id(kKeys[0], kWide));
  if (!full) {  // a --quick smoke run: the 64-key rung's two cells only
    ClaimVerdict v = claim1(r, kPrimaryKeys, steps);
    v.verdict = Verdict::not_shown;
    v.reason = concat("a --quick smoke run, not evidence: ", v.reason);
    v.numbers["worded"] = worded_verdict(v.verdict, at_words(steps, kPrimaryKeys));
    return {v};
  }
  out.push_back(claim1(r, kPrimaryKeys, steps));
  for (const std::int64_t keys : {kKeys[0], kKeys[2]}) out.push_back(claim1(r, keys, steps));
  out.push_back(claim2(r, steps));
  return out;
}

}  // namespace

Experiment make_mqar_headdim_nopos(const ExperimentOptions& o) {
  HEADCOUNT_CHECK(o.steps > 0 || o.quick || kSteps > 0 || o.stage == Stage::probe, "--steps",
                  "a step count (the probe has not fixed the default yet)", o.steps);
  const std::int64_t steps = o.steps > 0 ? o.steps : o.quick || kSteps == 0 ? kQuickSteps : kSteps;
  const std::string split = o.stage == Stage::pilot ? "dev" : "test";
  Experiment e{.name = "mqar-headdim-nopos",
               .summary =
                   "E-D without the position confound: MQAR (4 pairs) at 16 / 64 / 256 "
                   "keys, h = 4, 16, 32 of 64/h with learned positions; success counts",
               .claim =
                   "without a position encoding that limits narrow heads, heads of 2 lose "
                   "recall against heads of 16, and the deficit grows with the keys"};
  e.metric_kind = MetricKind::accuracy;
  e.metric = "validation_accuracy";
  e.sweep_label = "heads";
  e.series_label = "series";
  e.eval_points = 1;  // test is read once, at the end (R3)
  e.lr_grid.assign(std::begin(kGrid), std::end(kGrid));
  e.lr_extension = {1e-4, 1e-2};
  e.prereg = "bench/prereg/mqar-headdim-nopos-v1.md";
  e.budget_seconds = 3600;  // pilot + test <= 60 minutes on 2 idle cores
  e.evaluation_seeds = kEvaluationSeeds;
  e.pilot_seeds = kPilotSeeds;
  for (const std::int64_t keys : kKeys)
    for (const std::int64_t h : kHeads) {
      if (o.quick && (keys != kPrimaryKeys || h == 16)) continue;
      e.cells.push_back({.id = cell_id(keys, h),
                         .labels = {{"series", concat(keys, " keys")},
                                    {"keys", keys},
                                    {"heads", h},
                                    {"head_dim", kDModel / h}},
                         .config = cell_config(keys, h, steps, split)});
    }
  e.budget = concat(
      "assoc-recall (MQAR): 4 pairs, 4 queries, 16 / 64 / 256 keys, 64 values, seq 16; 2 layers, "
      "d_model 64, d_ff 256, a learned position table (no rotary); batch 32, ",
      steps, " steps, AdamW (0.9, 0.99), weight decay 0.1, clip 1, warm-up ",
      std::min<std::int64_t>(100, steps / 10), ", cosine to lr/10; ",
      o.quick ? "--quick: 64 keys, h 4 and 32, not evidence."
              : "lr per cell from the pilot on dev (R-pilot3: seeds 101-103, lr 3e-4 / 1e-3 / "
                "3e-3, edges 1e-4 / 1e-2, the mean dev accuracy), then seeds 1301-1308 scored "
                "once on test (success: accuracy >= 0.90); steps from the probe (60 minutes on 2 "
                "idle cores).",
      " Split: ", split, ".");
  e.judge = [steps](const ExperimentResult& r) { return judge(r, steps); };
  return e;
}

}  // namespace headcount::experiments
