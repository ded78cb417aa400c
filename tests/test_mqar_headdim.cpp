// The claims protocol's E-D (mqar-headdim): its judge on hand-made per-seed test accuracies (the
// gate's two halves and every branch of the rule), v2 as the ladder's rung, a quick run through the
// CLI, and the MQAR task's dev and test splits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "cli_runner.h"
#include "experiments/experiments.h"
#include "experiments/runner.h"
#include "headcount/train/task.h"

namespace headcount::testing {
namespace {

namespace ex = headcount::experiments;
using nlohmann::json;

ex::ClaimVerdict judge(const ex::Experiment& e, std::map<std::string, std::vector<double>> acc,
                       double pilot_best = 0.97) {
  ex::ExperimentResult r{.experiment = &e};
  // The pilot document's envelope, as run_pilot writes it (the control learned there).
  r.options.pilot = {{"envelope",
                      {{"cells",
                        {{"h=4", {{"points", {{{"lr", 1e-3}, {"metric", pilot_best}}}}}},
                         {"h=32 hd=16", {{"points", {{{"lr", 3e-4}, {"metric", 1.0}}}}}}}}}}};
  for (const ex::Cell& c : e.cells)
    r.cells.push_back(ex::cell_stats(
        c.id, acc.count(c.id) ? acc.at(c.id) : std::vector<double>{0.5, 0.5, 0.5, 0.5, 0.5}));
  return e.judge(r).at(0);
}

TEST(MqarHeaddim, JudgeFollowsTheRegisteredRule) {
  const ex::Experiment e = ex::make_mqar_headdim({});
  ASSERT_EQ(e.cells.size(), 5u);
  EXPECT_EQ(e.prereg, "bench/prereg/mqar-headdim-v1.md");
  const std::vector<double> good = {0.97, 0.96, 0.98, 0.97, 0.96};
  const std::vector<double> poor = {0.60, 0.62, 0.58, 0.61, 0.59};
  const std::vector<double> near_good = {0.971, 0.958, 0.979, 0.972, 0.961};
  // The gate: the pilot's best main cell, or h = 4's test mean, below 0.90 (the control's 1.0 at
  // the pilot does not count: it is not a main cell).
  EXPECT_EQ(judge(e, {{"h=4", good}}, 0.85).verdict, ex::Verdict::not_learned);
  EXPECT_EQ(judge(e, {{"h=4", poor}}).verdict, ex::Verdict::not_learned);
  // Confirmed: h = 4 beats the narrow h = 32, not the control.
  auto v = judge(e, {{"h=4", good}, {"h=32", poor}, {"h=32 hd=16", near_good}});
  EXPECT_EQ(v.verdict, ex::Verdict::confirmed) << v.reason;
  // h = 4 beats both: not shown, "more heads hurt".
  v = judge(e, {{"h=4", good}, {"h=32", poor}, {"h=32 hd=16", poor}});
  EXPECT_EQ(v.verdict, ex::Verdict::not_shown);
  EXPECT_NE(v.reason.find("more heads hurt"), std::string::npos);
  // Refuted: head_dim 2 is as good (equivalent) or better.
  EXPECT_EQ(judge(e, {{"h=4", good}, {"h=32", near_good}}).verdict, ex::Verdict::refuted);
  EXPECT_EQ(judge(e, {{"h=4", poor}, {"h=32", good}}, 0.97).verdict, ex::Verdict::not_learned);
  EXPECT_EQ(judge(e, {{"h=4", {0.91, 0.92, 0.90, 0.93, 0.91}}, {"h=32", good}}).verdict,
            ex::Verdict::refuted);
}

// v2 is the protocol's ladder rung: the same grid and rule on 4 pairs in rows of 16.
TEST(MqarHeaddim, VersionTwoIsTheLaddersNextRung) {
  const ex::Experiment v1 = ex::make_mqar_headdim({}), v2 = ex::make_mqar_headdim_v2({});
  EXPECT_EQ(v2.name, "mqar-headdim-v2");
  EXPECT_EQ(v2.prereg, "bench/prereg/mqar-headdim-v2.md");
  ASSERT_EQ(v2.cells.size(), v1.cells.size());
  for (std::size_t i = 0; i < v2.cells.size(); ++i) {
    EXPECT_EQ(v2.cells[i].id, v1.cells[i].id);
    EXPECT_EQ(v2.cells[i].config.task.at("num_pairs"), 4);
    EXPECT_EQ(v2.cells[i].config.task.at("seq_len"), 16);
    EXPECT_EQ(v2.cells[i].config.model.context, 16);
    EXPECT_EQ(v2.cells[i].config.model.heads, v1.cells[i].config.model.heads);
    EXPECT_EQ(v1.cells[i].config.task.at("num_pairs"), 8);
  }
}

// v4 is v3 with rotary positions (no position table) and nothing else; v1-v3 keep the table.
TEST(MqarHeaddim, VersionFourOnlyAddsRotaryPositions) {
  ex::ExperimentOptions o;
  o.steps = 200;
  const ex::Experiment v3 = ex::make_mqar_headdim_v3(o), v4 = ex::make_mqar_headdim_v4(o);
  EXPECT_EQ(v4.prereg, "bench/prereg/mqar-headdim-v4.md");
  EXPECT_EQ(v4.lr_grid, v3.lr_grid);
  EXPECT_EQ(v4.lr_extension, v3.lr_extension);
  ASSERT_EQ(v4.cells.size(), v3.cells.size());
  for (std::size_t i = 0; i < v4.cells.size(); ++i) {
    train::TrainConfig a = v3.cells[i].config, b = v4.cells[i].config;
    EXPECT_EQ(a.model.rope_base, 0.0f);
    EXPECT_GT(b.model.rope_base, 0.0f);
    b.model.rope_base = 0.0f;
    EXPECT_EQ(train::to_json(a), train::to_json(b)) << v4.cells[i].id;
  }
}

// The long budget: v4's grid, lr grid and steps on rung 2 (256 keys); nothing else changes.
TEST(MqarHeaddim, LongBudgetIsVersionFourAtRungTwo) {
  const ex::Experiment v4 = ex::make_mqar_headdim_v4({}), e = ex::make_mqar_headdim_v4_long({});
  EXPECT_EQ(e.name, "mqar-headdim-v4-long");
  EXPECT_EQ(e.prereg, "bench/prereg/mqar-headdim-v4-long-v1.md");
  EXPECT_EQ(e.budget_seconds, 0);
  EXPECT_EQ(e.lr_grid, v4.lr_grid);
  EXPECT_NE(e.budget.find("256 keys (rung 2)"), std::string::npos) << e.budget;
  EXPECT_NE(e.budget.find("seeds 801-805"), std::string::npos) << e.budget;
  ASSERT_EQ(e.cells.size(), v4.cells.size());
  for (std::size_t i = 0; i < e.cells.size(); ++i) {
    EXPECT_EQ(e.cells[i].config.steps, 7700);
    train::TrainConfig b = e.cells[i].config;
    EXPECT_EQ(b.task.at("keys"), 256);
    b.task["keys"] = 64;
    EXPECT_EQ(train::to_json(b), train::to_json(v4.cells[i].config)) << e.cells[i].id;
  }
}

// The quick run end to end through the CLI: it names v2's pre-registration, trains on the 4-pair
// rung and scores the test split (a --quick run is not a pilot).
TEST(MqarHeaddim, QuickRunOfVersionTwoScoresTest) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("hc-ed-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const CliResult r =
      run_cli("experiment mqar-headdim-v2 --quick --threads 2 --quiet --json-out '" +
              (dir / "r.json").string() + "' --out '" + (dir / "r.html").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(cli_runner_detail::slurp(dir / "r.json"));
  EXPECT_EQ(j.at("prereg").at("path"), "bench/prereg/mqar-headdim-v2.md");
  EXPECT_EQ(j.at("cells").size(), 2u);
  EXPECT_EQ(j.at("task").at("split"), "test");
  EXPECT_EQ(j.at("task").at("num_pairs"), 4);
  EXPECT_EQ(j.at("verdicts").at(0).at("verdict"), "task not learned");
  fs::remove_all(dir);
}

TEST(MqarHeaddim, DevAndTestSplitsAreDisjoint) {
  const json base{{"name", "assoc-recall"}, {"keys", 64}, {"values", 64}, {"seq_len", 32}};
  json dev = base, test = base;
  dev["split"] = "dev";
  test["split"] = "test";
  const auto rows = [](const json& config) {
    const auto task = train::make_task(config);
    const train::Batch b = task->validation_batch(0, 512);
    std::set<std::vector<std::int32_t>> out;
    for (std::int64_t r = 0; r < b.batch; ++r)
      out.emplace(b.tokens.begin() + r * b.seq_len, b.tokens.begin() + (r + 1) * b.seq_len);
    return out;
  };
  const auto d = rows(dev), t = rows(test);
  EXPECT_EQ(d.size(), 512u);
  EXPECT_EQ(t.size(), 512u);
  for (const auto& row : d) EXPECT_EQ(t.count(row), 0u);
}

}  // namespace
}  // namespace headcount::testing
