// The claims protocol's E-G (small-heads): its judge on hand-made per-run measures (the gate, each
// branch of the specialisation and pruning rules) and a quick run through the CLI.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "cli_runner.h"
#include "experiments/experiments.h"
#include "experiments/runner.h"

namespace headcount::testing {
namespace {

namespace ex = headcount::experiments;
using nlohmann::json;

// One h = 8 run's final measures: layer-0 head 0 at previous-token `prev`, layer-1 head 0 at
// prefix-matching `induction`, every other head at 0.05; the repeat-loss drop; the pruning
// losses (full, 50 % by importance, 50 % random mean).
json run_measures(double prev, double induction, double drop, double full, double masked,
                  double random) {
  json heads = json::array();
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 8; ++h)
      heads.push_back({{"layer", l},
                       {"head", h},
                       {"previous_token", l == 0 && h == 0 ? prev : 0.05},
                       {"prefix_matching", l == 1 && h == 0 ? induction : 0.05}});
  return {
      {"heads", heads},
      {"repeat_loss", {{"drop", drop}}},
      {"pruning",
       {{"full", full}, {"by_importance", {{"0.5", masked}}}, {"random_mean", {{"0.5", random}}}}}};
}

std::vector<ex::ClaimVerdict> judge(const ex::Experiment& e, const std::vector<json>& h8_runs) {
  ex::ExperimentResult r{.experiment = &e};
  for (std::size_t i = 0; i < e.cells.size(); ++i) {
    std::vector<double> losses;
    if (e.cells[i].id == "h=8")
      for (std::size_t s = 0; s < h8_runs.size(); ++s) {
        ex::RunRecord run;
        run.cell = i;
        run.seed = s + 1;
        run.measures = {{"final", h8_runs[s]}};
        r.runs.push_back(run);
        losses.push_back(1.41);
      }
    r.cells.push_back(
        ex::cell_stats(e.cells[i].id, losses.empty() ? std::vector<double>{1.4} : losses));
  }
  return e.judge(r);
}

TEST(SmallHeads, JudgeFollowsTheRegisteredRules) {
  const ex::Experiment e = ex::make_small_heads({});
  ASSERT_EQ(e.cells.size(), 3u);
  EXPECT_EQ(e.prereg, "bench/prereg/small-heads-v1.md");
  const double full[] = {1.41, 1.42, 1.40, 1.43, 1.41};
  auto runs = [&](double prev, double ind, double drop, double masked_add, double random_add) {
    std::vector<json> out;
    for (int s = 0; s < 5; ++s)
      out.push_back(run_measures(prev, ind, drop, full[s], full[s] + masked_add + 0.001 * s,
                                 full[s] + random_add + 0.002 * s));
    return out;
  };
  // The gate: no in-context copying.
  auto v = judge(e, runs(0.8, 0.6, 0.2, 0.01, 0.2));
  EXPECT_EQ(v[0].verdict, ex::Verdict::not_learned);
  EXPECT_EQ(v[1].verdict, ex::Verdict::not_learned);
  // Both circuits in every seed, another layer-1 head elsewhere; pruning cheap and better
  // than random: confirmed twice.
  v = judge(e, runs(0.8, 0.6, 1.2, 0.01, 0.2));
  EXPECT_EQ(v[0].verdict, ex::Verdict::confirmed) << v[0].reason;
  EXPECT_EQ(v[1].verdict, ex::Verdict::confirmed) << v[1].reason;
  // No previous-token head anywhere: refuted; pruning costing 0.3: refuted.
  v = judge(e, runs(0.2, 0.6, 1.2, 0.3, 0.5));
  EXPECT_EQ(v[0].verdict, ex::Verdict::refuted) << v[0].reason;
  EXPECT_EQ(v[1].verdict, ex::Verdict::refuted) << v[1].reason;
  // Three seeds of five with the circuit: not shown; pruning cheap but no better than random:
  // not shown.
  std::vector<json> mixed = runs(0.8, 0.6, 1.2, 0.01, 0.01);
  mixed[3] = run_measures(0.2, 0.6, 1.2, full[3], full[3] + 0.014, full[3] + 0.016);
  mixed[4] = run_measures(0.2, 0.6, 1.2, full[4], full[4] + 0.015, full[4] + 0.018);
  v = judge(e, mixed);
  EXPECT_EQ(v[0].verdict, ex::Verdict::not_shown) << v[0].reason;
  EXPECT_EQ(v[1].verdict, ex::Verdict::not_shown) << v[1].reason;
}

// v2 is the ladder step: the same cells at 4N steps, its own pre-registration.
TEST(SmallHeads, VersionTwoIsTheLongBudget) {
  const ex::Experiment v1 = ex::make_small_heads({}), v2 = ex::make_small_heads_v2({});
  EXPECT_EQ(v2.name, "small-heads-v2");
  EXPECT_EQ(v2.prereg, "bench/prereg/small-heads-v2.md");
  ASSERT_EQ(v2.cells.size(), v1.cells.size());
  for (std::size_t i = 0; i < v2.cells.size(); ++i) {
    EXPECT_EQ(v2.cells[i].id, v1.cells[i].id);
    EXPECT_EQ(v2.cells[i].config.steps, 4 * v1.cells[i].config.steps);
    EXPECT_EQ(v2.cells[i].config.optim.lr, v1.cells[i].config.optim.lr);
  }
}

// v3 is v1's cells on the char LM with half the windows repeated, nothing else.
TEST(SmallHeads, VersionThreeRepeatsHalfTheWindows) {
  const ex::Experiment v1 = ex::make_small_heads({}), v3 = ex::make_small_heads_v3({});
  EXPECT_EQ(v3.name, "small-heads-v3");
  EXPECT_EQ(v3.prereg, "bench/prereg/small-heads-v3.md");
  ASSERT_EQ(v3.cells.size(), v1.cells.size());
  for (std::size_t i = 0; i < v3.cells.size(); ++i) {
    train::TrainConfig c = v3.cells[i].config;
    EXPECT_EQ(c.task.at("repeat_fraction"), 0.5);
    c.task.erase("repeat_fraction");
    EXPECT_EQ(train::to_json(c), train::to_json(v1.cells[i].config)) << v3.cells[i].id;
  }
}

// v4 is v3 with rotary positions, nothing else.
TEST(SmallHeads, VersionFourAddsRotaryPositions) {
  const ex::Experiment v3 = ex::make_small_heads_v3({}), v4 = ex::make_small_heads_v4({});
  EXPECT_EQ(v4.name, "small-heads-v4");
  EXPECT_EQ(v4.prereg, "bench/prereg/small-heads-v4.md");
  ASSERT_EQ(v4.cells.size(), v3.cells.size());
  for (std::size_t i = 0; i < v4.cells.size(); ++i) {
    train::TrainConfig c = v4.cells[i].config;
    EXPECT_GT(c.model.rope_base, 0.0f);
    c.model.rope_base = 0.0f;
    EXPECT_EQ(train::to_json(c), train::to_json(v3.cells[i].config)) << v4.cells[i].id;
  }
}

// A --compare-with document that is not a result with runs: exit 2 naming the option, before
// any training.
TEST(SmallHeads, CompareWithAnotherDocumentIsAnError) {
  namespace fs = std::filesystem;
  const fs::path bad = fs::temp_directory_path() / ("hc-eg-bad-" + std::to_string(::getpid()));
  std::ofstream(bad) << R"({"format": "headcount.experiment.v1", "runs": [{"cell": "h=1"}]})";
  const CliResult r =
      run_cli("experiment small-heads --quick --compare-with '" + bad.string() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--compare-with"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("step"), std::string::npos) << "trained before checking: " << r.err;
  fs::remove(bad);
}

TEST(SmallHeads, QuickRunThroughTheCli) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("hc-eg-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const CliResult r =
      run_cli("experiment small-heads --quick --seeds 2 --threads 2 --quiet --json-out '" +
              (dir / "r.json").string() + "' --out '" + (dir / "r.html").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(cli_runner_detail::slurp(dir / "r.json"));
  EXPECT_EQ(j.at("prereg").at("path"), "bench/prereg/small-heads-v1.md");
  const json& m = j.at("runs").at(0).at("measures").at("final");
  EXPECT_EQ(m.at("heads").size(), 8u);  // --quick: one layer of 8 heads
  EXPECT_EQ(m.at("pruning").at("order").size(), 8u);
  EXPECT_EQ(j.at("verdicts").at(0).at("verdict"), "task not learned");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace headcount::testing
