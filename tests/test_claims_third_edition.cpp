// The claims protocol's third edition (§5) in code: R-pilot3's pick over three pilot seeds,
// R-counts' success-count rules, and the registrations that use them
// (bench/prereg/mqar-headdim-nopos-v1.md).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "experiments/experiments.h"
#include "experiments/model_cost.h"
#include "experiments/result.h"
#include "experiments/runner.h"
#include "experiments/stages.h"
#include "experiments/verdict.h"
#include "headcount/error.h"

namespace headcount::experiments {
namespace {

using nlohmann::json;

PilotPoint point(double lr, std::vector<double> metrics, double loss) {
  PilotPoint p{.lr = lr, .loss = loss, .metrics = metrics};
  double sum = 0;
  for (double m : metrics) sum += m;
  p.metric = sum / static_cast<double>(metrics.size());
  double squares = 0;
  for (double m : metrics) squares += (m - p.metric) * (m - p.metric);
  const auto n = static_cast<double>(metrics.size());
  p.standard_error = n > 1 ? std::sqrt(squares / (n - 1) / n) : 0;
  return p;
}

TEST(ClaimsThirdEdition, OneSeedPilotPicksAsR4) {
  // One seed per point: the best accuracy; an exact tie goes to the lower dev loss.
  std::vector<PilotPoint> points = {point(3e-4, {0.5}, 2.0), point(1e-3, {0.9}, 0.5),
                                    point(3e-3, {0.9}, 0.4)};
  EXPECT_EQ(pick_pilot_point(points, MetricKind::accuracy).lr, 3e-3);
  // A loss metric: the lowest, and a near tie is not a tie.
  points = {point(1e-3, {1.50}, 1.50), point(3e-3, {1.49}, 1.49), point(1e-2, {1.60}, 1.60)};
  EXPECT_EQ(pick_pilot_point(points, MetricKind::loss).lr, 3e-3);
  EXPECT_THROW(pick_pilot_point({}, MetricKind::loss), Error);
}

TEST(ClaimsThirdEdition, ThreeSeedPilotPicksByTheMeanWithTiesWithinTheStandardError) {
  // Accuracy: 3e-3 has the best mean (0.95, se 0.05); 1e-3 (0.93) is within it and has the lower
  // dev loss, so it wins; 3e-4 (0.50) is outside.
  std::vector<PilotPoint> points = {point(3e-4, {0.5, 0.5, 0.5}, 2.0),
                                    point(1e-3, {0.92, 0.93, 0.94}, 0.30),
                                    point(3e-3, {1.0, 0.85, 1.0}, 0.35)};
  EXPECT_EQ(pick_pilot_point(points, MetricKind::accuracy).lr, 1e-3);
  // The same with 1e-3's loss higher: the best mean keeps it.
  points[1].loss = 0.40;
  EXPECT_EQ(pick_pilot_point(points, MetricKind::accuracy).lr, 3e-3);
  // Seeds that agree exactly: the standard error is 0 and only exact ties tie.
  points = {point(1e-3, {1.0, 1.0, 1.0}, 0.2), point(3e-3, {1.0, 1.0, 1.0}, 0.1)};
  EXPECT_EQ(pick_pilot_point(points, MetricKind::accuracy).lr, 3e-3);
  // Loss: 3e-3 is best (1.40, se 0.03); 1e-3 (1.42) ties and is the lower lr; 1e-2 does not.
  points = {point(1e-3, {1.42, 1.43, 1.41}, 1.42), point(3e-3, {1.35, 1.40, 1.45}, 1.40),
            point(1e-2, {1.60, 1.61, 1.59}, 1.60)};
  EXPECT_EQ(pick_pilot_point(points, MetricKind::loss).lr, 1e-3);
  // A diverged point (NaN) never ties and is never best.
  points = {point(1e-3, {1.42, 1.43, 1.41}, 1.42), point(3e-3, {NAN, 1.0, 1.0}, NAN)};
  EXPECT_EQ(pick_pilot_point(points, MetricKind::loss).lr, 1e-3);
}

TEST(ClaimsThirdEdition, SuccessCountRules) {
  // Claim 1's shape: 8/8 against 0/8 is Fisher p = 7.8e-5.
  FisherComparison f = fisher_compare("h=4", 8, 8, "h=32", 0, 8);
  EXPECT_TRUE(f.a_beats_b);
  EXPECT_EQ(more_successes_verdict(f, 6), Verdict::confirmed);
  // 6/8 against 3/8: p = 0.16, not shown.
  f = fisher_compare("h=4", 6, 8, "h=32", 3, 8);
  EXPECT_FALSE(f.a_beats_b);
  EXPECT_EQ(more_successes_verdict(f, 6), Verdict::not_shown);
  // The narrow arm at >= 6/8 and no less often: refuted; at 6/8 against 7/8: not shown.
  EXPECT_EQ(more_successes_verdict(fisher_compare("h=4", 7, 8, "h=32", 7, 8), 6), Verdict::refuted);
  EXPECT_EQ(more_successes_verdict(fisher_compare("h=4", 7, 8, "h=32", 6, 8), 6),
            Verdict::not_shown);
  EXPECT_EQ(more_successes_verdict(fisher_compare("h=4", 5, 8, "h=32", 8, 8), 6), Verdict::refuted);

  // The ladder: 7/8 at 16 keys against 1/8 at 256 keys (p = 0.005) while h = 4 holds.
  const FisherComparison down = fisher_compare("16", 7, 8, "256", 1, 8);
  const FisherComparison up = fisher_compare("256", 1, 8, "16", 7, 8);
  EXPECT_EQ(fewer_at_larger_verdict(down, up, true), Verdict::confirmed);
  EXPECT_EQ(fewer_at_larger_verdict(down, up, false), Verdict::not_shown);
  // The wrong sign (v4 with rotary: h = 16 did better with more keys) is refuted.
  EXPECT_EQ(fewer_at_larger_verdict(up, down, true), Verdict::refuted);
  const FisherComparison level = fisher_compare("16", 2, 8, "256", 2, 8);
  EXPECT_EQ(fewer_at_larger_verdict(level, level, true), Verdict::not_shown);
}

TEST(ClaimsThirdEdition, MqarHeaddimNoposCellsAreTheRegistrations) {
  const Experiment e = make_mqar_headdim_nopos({.stage = Stage::probe});
  ASSERT_EQ(e.cells.size(), 9u);
  EXPECT_EQ(e.pilot_seeds, 3);
  EXPECT_EQ(e.evaluation_seeds, 8);
  EXPECT_EQ(e.lr_grid, (std::vector<double>{3e-4, 1e-3, 3e-3}));
  EXPECT_EQ(e.lr_extension, (std::vector<double>{1e-4, 1e-2}));
  EXPECT_EQ(e.prereg, "bench/prereg/mqar-headdim-nopos-v1.md");
  // The registration's weights and multiply-adds, equal at every h within a rung.
  const std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> table = {
      {16, {109696, 165249024}}, {64, {115840, 169967616}}, {256, {140416, 188841984}}};
  for (const Cell& c : e.cells) {
    const std::int64_t keys = c.labels.at("keys").get<std::int64_t>();
    EXPECT_EQ(c.id, detail::concat("keys=", keys, " h=", c.labels.at("heads").get<int>()));
    EXPECT_EQ(c.config.model.rope_base, 0.0f) << c.id;  // learned positions, no rotary
    EXPECT_EQ(c.config.model.context, 16) << c.id;
    EXPECT_EQ(c.config.task.at("keys").get<std::int64_t>(), keys);
    train::ModelConfig m = c.config.model;
    m.vocab = keys + 64 + 1;
    const ModelCost cost = model_cost(train::resolve(m), 32, 16);
    EXPECT_EQ(cost.weights, table.at(keys).first) << c.id;
    EXPECT_EQ(cost.train_macs, table.at(keys).second) << c.id;
  }
  // The probe's steps (bench/results/2026-12-07-mqar-headdim-nopos-probe.json) at every rung.
  for (const Cell& c : make_mqar_headdim_nopos({.stage = Stage::pilot}).cells)
    EXPECT_EQ(c.config.steps, 5700) << c.id;
}

TEST(ClaimsThirdEdition, ThreeSeedPilotAndItsTestStageRun) {
  // A tiny pilot of the quick grid (64 keys, h = 4 and 32) at 5 steps: every point has three
  // seeds, the envelope names them, and the test stage reads it and judges with counts.
  Context ctx({.threads = 2});
  ExperimentOptions pilot_options{.steps = 5, .quick = true, .threads = 2, .stage = Stage::pilot};
  const Experiment e = make_mqar_headdim_nopos(pilot_options);
  ASSERT_EQ(e.cells.size(), 2u);
  Experiment grid;
  const ExperimentResult pilot = run_pilot(ctx, e, pilot_options, false, grid);
  EXPECT_EQ(pilot.envelope.at("seeds").get<int>(), 3);
  for (const Cell& c : e.cells) {
    const json& cell = pilot.envelope.at("cells").at(c.id);
    ASSERT_GE(cell.at("points").size(), 3u);
    for (const json& p : cell.at("points")) EXPECT_EQ(p.at("per_seed").size(), 3u);
  }
  for (std::size_t i = 0; i < grid.cells.size(); ++i) EXPECT_EQ(pilot.runs_of(i).size(), 3u);
  const json pilot_document = result_json(pilot);

  ExperimentOptions test_options{.seeds = 8,
                                 .first_seed = 1301,
                                 .steps = 5,
                                 .quick = true,
                                 .threads = 2,
                                 .stage = Stage::test,
                                 .pilot = pilot_document};
  const Experiment t = make_mqar_headdim_nopos(test_options);
  Experiment test_grid;
  const ExperimentResult test = run_test(ctx, t, test_options, false, test_grid);
  ASSERT_EQ(test.verdicts.size(), 1u);  // the quick grid: claim 1 at 64 keys, not evidence
  EXPECT_EQ(test.verdicts[0].verdict, Verdict::not_shown);
  EXPECT_TRUE(test.verdicts[0].numbers.contains("successes"));
  EXPECT_EQ(test.runs_of(0).front()->seed, 1301u);
}

TEST(ClaimsThirdEdition, KvCapacityMatchedTwinsMatchMhasWeightsAndMultiplyAdds) {
  const Experiment e = make_kv_capacity_matched({.stage = Stage::probe});
  ASSERT_EQ(e.cells.size(), 6u);
  EXPECT_EQ(e.pilot_seeds, 3);
  EXPECT_EQ(e.evaluation_seeds, 8);
  EXPECT_EQ(e.prereg, "bench/prereg/kv-capacity-matched-v1.md");
  // The registration's table (MQAR at 256 keys: vocab 256 + 64 + 1).
  const std::map<std::string, std::pair<std::int64_t, std::int64_t>> table = {
      {"kv8", {140416, 188841984}},       {"kv2", {128128, 169967616}},
      {"kv1", {126080, 166821888}},       {"kv2-ff304", {140416, 188841984}},
      {"kv1-ff312", {140416, 188841984}}, {"kv1-hd64", {255104, 409042944}}};
  for (const Cell& c : e.cells) {
    train::ModelConfig m = c.config.model;
    m.vocab = 256 + 64 + 1;
    const ModelCost cost = model_cost(train::resolve(m), 32, 16);
    EXPECT_EQ(cost.weights, table.at(c.id).first) << c.id;
    EXPECT_EQ(cost.train_macs, table.at(c.id).second) << c.id;
    EXPECT_GT(c.config.model.rope_base, 0.0f) << c.id;
    // Only the equal-KV-bytes arm has its own grid, extended down to 1e-4 from the start.
    if (c.id == "kv1-hd64")
      EXPECT_EQ(c.lr_grid, (std::vector<double>{1e-4, 3e-4, 1e-3, 3e-3}));
    else
      EXPECT_TRUE(c.lr_grid.empty()) << c.id;
  }
  EXPECT_EQ(e.cells.front().config.steps, 14000);  // the probe times the registered steps
}

TEST(ClaimsThirdEdition, ACellsOwnPilotGridIsRunAndRecorded) {
  // kv-capacity-matched's quick grid (kv8, kv1-ff312) at 5 steps, kv1-ff312 given its own grid
  // from 1e-4 as kv1-hd64 has: 3 + 4 points (plus any edge point), three seeds each.
  Context ctx({.threads = 2});
  ExperimentOptions options{.steps = 5, .quick = true, .threads = 2, .stage = Stage::pilot};
  Experiment e = make_kv_capacity_matched(options);
  ASSERT_EQ(e.cells.size(), 2u);
  e.cells[1].lr_grid = {1e-4, 3e-4, 1e-3, 3e-3};
  Experiment grid;
  const ExperimentResult pilot = run_pilot(ctx, e, options, false, grid);
  const json& own = pilot.envelope.at("cells").at(e.cells[1].id);
  EXPECT_EQ(own.at("grid"), json({1e-4, 3e-4, 1e-3, 3e-3}));
  EXPECT_GE(own.at("points").size(), 4u);
  EXPECT_EQ(own.at("points").front().at("lr").get<double>(), 1e-4);
  EXPECT_FALSE(pilot.envelope.at("cells").at(e.cells[0].id).contains("grid"));
  EXPECT_GE(pilot.envelope.at("cells").at(e.cells[0].id).at("points").size(), 3u);
}

TEST(ClaimsThirdEdition, HeadSweepTunedBIsHFourAgainstHThirtyTwoAtN) {
  const Experiment e = make_head_sweep_tuned_b({.stage = Stage::probe});
  ASSERT_EQ(e.cells.size(), 2u);
  EXPECT_EQ(e.cells[0].id, "h=4");
  EXPECT_EQ(e.cells[1].id, "h=32");
  EXPECT_EQ(e.cells[1].config.model.head_dim, 2);
  for (const Cell& c : e.cells) EXPECT_EQ(c.config.steps, 2400) << c.id;
  EXPECT_EQ(e.pilot_seeds, 3);
  EXPECT_EQ(e.evaluation_seeds, 15);
  EXPECT_EQ(e.metric_kind, MetricKind::loss);
  EXPECT_EQ(e.lr_grid, (std::vector<double>{1e-3, 3e-3, 1e-2}));
  EXPECT_EQ(e.lr_extension, (std::vector<double>{3e-4, 3e-2}));
  EXPECT_EQ(e.prereg, "bench/prereg/head-sweep-tuned-b-v2.md");
  EXPECT_NE(e.budget.find("seeds 1001-1015"), std::string::npos) << e.budget;
}

}  // namespace
}  // namespace headcount::experiments
