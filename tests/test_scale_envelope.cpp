// The claims protocol's E-E (scale-envelope): its grid (10 cells; the reference arm is E-C's h=16
// cell exactly), the W_Q/W_K init it needs, its judge on hand-made per-seed test losses and init
// measures (both gates and every branch of P1 and P2), and a quick run through the CLI.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <vector>

#include "cli_runner.h"
#include "experiments/experiments.h"
#include "experiments/runner.h"
#include "headcount/train/model.h"

namespace headcount::testing {
namespace {

namespace ex = headcount::experiments;
using nlohmann::json;

constexpr double kBigram = 2.35;  // the judge reads the task's; the gate is bigram - 0.25

// A result of `e` with per-seed test losses (default 2.0 everywhere: learned, no differences)
// and, for every run, init measures: logit std `init_std`, entropy `entropy` of uniform 4.0.
ex::ExperimentResult result(const ex::Experiment& e,
                            std::map<std::string, std::vector<double>> loss, double init_std = 8.0,
                            double entropy = 1.0) {
  ex::ExperimentResult r{.experiment = &e};
  r.task = {{"bigram_loss", kBigram}};
  for (std::size_t i = 0; i < e.cells.size(); ++i) {
    const ex::Cell& c = e.cells[i];
    const std::vector<double> v =
        loss.count(c.id) ? loss.at(c.id) : std::vector<double>{2.0, 2.0, 2.0, 2.0, 2.0};
    r.cells.push_back(ex::cell_stats(c.id, v));
    for (std::size_t s = 0; s < v.size(); ++s) {
      ex::RunRecord run;
      run.cell = i;
      run.seed = s + 1;
      run.measures = {
          {"init",
           {{"attention",
             {{"logit_std", init_std}, {"entropy", entropy}, {"uniform_entropy", 4.0}}}}}};
      r.runs.push_back(run);
    }
  }
  return r;
}

std::vector<double> shift(std::vector<double> v, double by) {
  for (double& x : v) x += by;
  return v;
}

const std::vector<double> kBase = {1.90, 1.92, 1.91, 1.93, 1.89};

TEST(ScaleEnvelope, GridHasTenCellsAndReusesECsCell) {
  const ex::Experiment e = ex::make_scale_envelope({});
  ASSERT_EQ(e.cells.size(), 10u);
  EXPECT_EQ(e.prereg, "bench/prereg/scale-envelope-v1.md");
  const ex::Experiment c = ex::make_head_sweep_tuned({});
  const ex::Cell* reference = nullptr;
  for (const ex::Cell& cell : e.cells)
    if (cell.id == "h=16 1/sqrt(dk) init=0.02") reference = &cell;
  ASSERT_NE(reference, nullptr);
  for (const ex::Cell& cell : c.cells)
    if (cell.id == "h=16")  // the same run, so the same JSON config
      EXPECT_EQ(train::to_json(cell.config), train::to_json(reference->config));
  for (const ex::Cell& cell : e.cells) {
    const auto& m = cell.config.model;
    EXPECT_EQ(m.qk_init_std, cell.id.ends_with("0.125") ? 0.125f : 0.0f) << cell.id;
    if (cell.id.find(" none ") != std::string::npos) EXPECT_EQ(*m.scale, 1.0f) << cell.id;
  }
}

// The long budget: the default's ten cells, each at 4N, only the steps (and the schedule's
// length) changed, under its own registration.
TEST(ScaleEnvelope, LongBudgetIsTheSameGridAtFourN) {
  const ex::Experiment base = ex::make_scale_envelope({});
  const ex::Experiment e = ex::make_scale_envelope_long({});
  EXPECT_EQ(e.name, "scale-envelope-long");
  EXPECT_EQ(e.prereg, "bench/prereg/scale-envelope-long-v1.md");
  EXPECT_EQ(e.budget_seconds, 0);
  EXPECT_NE(e.budget.find("9600 steps (4N"), std::string::npos) << e.budget;
  ASSERT_EQ(e.cells.size(), base.cells.size());
  for (std::size_t i = 0; i < e.cells.size(); ++i) {
    EXPECT_EQ(e.cells[i].id, base.cells[i].id);
    EXPECT_EQ(e.cells[i].config.steps, 4 * base.cells[i].config.steps);
    train::TrainConfig same = e.cells[i].config;
    same.steps = base.cells[i].config.steps;
    same.optim = base.cells[i].config.optim;
    EXPECT_EQ(train::to_json(same), train::to_json(base.cells[i].config)) << e.cells[i].id;
  }
}

// qk_init_std scales the Q and K columns of W_qkv only, from the same draws.
TEST(ScaleEnvelope, QueryKeyInitScalesOnlyThoseColumns) {
  train::ModelConfig c{.vocab = 11,
                       .context = 8,
                       .layers = 2,
                       .d_model = 16,
                       .heads = 4,
                       .kv_heads = 2,
                       .head_dim = 4};
  const train::Model plain(c, 3);
  c.qk_init_std = 0.5f;
  const train::Model wide(c, 3);
  for (std::size_t i = 0; i < plain.parameters().size(); ++i) {
    const train::Parameter& a = plain.parameters()[i];
    const train::Parameter& b = wide.parameters()[i];
    const bool qkv = a.name.ends_with("attn.w_qkv");
    const std::int64_t cols = a.value.size(a.value.rank() - 1), qk = (4 + 2) * 4;
    for (std::int64_t k = 0; k < a.value.numel(); ++k) {
      const float x = a.value.data<const float>()[k], y = b.value.data<const float>()[k];
      if (qkv && k % cols < qk)
        EXPECT_FLOAT_EQ(y, x * 25.0f) << a.name << " " << k;  // 0.5 / 0.02
      else
        EXPECT_EQ(x, y) << a.name << " " << k;
    }
  }
}

TEST(ScaleEnvelope, JudgeFollowsTheRegisteredRules) {
  const ex::Experiment e = ex::make_scale_envelope({});
  const std::string ref = "h=16 1/sqrt(dk) init=0.02", d = "h=16 1/sqrt(d) init=0.02";
  const std::string none64 = "h=1 none init=0.125", dk64 = "h=1 1/sqrt(dk) init=0.125";
  const std::string none4 = "h=16 none init=0.125", dk4 = "h=16 1/sqrt(dk) init=0.125";
  auto verdicts = [&](const ex::ExperimentResult& r) { return e.judge(r); };
  // Gate: the reference arm above bigram - 0.25 = 2.10.
  auto v = verdicts(result(e, {{ref, shift(kBase, 0.3)}}));
  EXPECT_EQ(v[0].verdict, ex::Verdict::not_learned);
  EXPECT_EQ(v[1].verdict, ex::Verdict::not_learned);
  // P2 confirmed: 1/sqrt(d) worse by 0.05 at every seed (the interval excludes 0, > floor).
  v = verdicts(result(e, {{ref, kBase}, {d, shift(kBase, 0.05)}}));
  EXPECT_EQ(v[1].verdict, ex::Verdict::confirmed) << v[1].reason;
  // P2 refuted: equivalent (within the 0.01 floor), or 1/sqrt(d) better.
  v = verdicts(result(e, {{ref, kBase}, {d, {1.901, 1.919, 1.912, 1.929, 1.891}}}));
  EXPECT_EQ(v[1].verdict, ex::Verdict::refuted) << v[1].reason;
  v = verdicts(result(e, {{ref, kBase}, {d, shift(kBase, -0.05)}}));
  EXPECT_EQ(v[1].verdict, ex::Verdict::refuted);
  // P1: the mechanism check fails -> no verdict.
  v = verdicts(result(e, {{ref, kBase}}, 2.0, 3.9));
  EXPECT_EQ(v[0].verdict, ex::Verdict::not_shown);
  EXPECT_NE(v[0].reason.find("saturation not engaged"), std::string::npos);
  // P1 confirmed: the penalty at d_k = 64 is 0.2, at d_k = 4 0.02.
  v = verdicts(result(e, {{ref, kBase},
                          {dk64, kBase},
                          {none64, {2.10, 2.13, 2.11, 2.12, 2.09}},
                          {dk4, kBase},
                          {none4, {1.92, 1.94, 1.93, 1.95, 1.91}}}));
  EXPECT_EQ(v[0].verdict, ex::Verdict::confirmed) << v[0].reason;
  // Scaling helps at 64 but no more than at 4: not shown.
  v = verdicts(result(e, {{ref, kBase},
                          {dk64, kBase},
                          {none64, {2.10, 2.13, 2.11, 2.12, 2.09}},
                          {dk4, kBase},
                          {none4, {2.10, 2.13, 2.11, 2.12, 2.09}}}));
  EXPECT_EQ(v[0].verdict, ex::Verdict::not_shown) << v[0].reason;
  // P1 refuted: no scale is as good at d_k = 64.
  v = verdicts(result(e, {{ref, kBase}, {dk64, kBase}, {none64, kBase}}));
  EXPECT_EQ(v[0].verdict, ex::Verdict::refuted) << v[0].reason;
}

TEST(ScaleEnvelope, QuickRunThroughTheCli) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("hc-ee-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const CliResult r =
      run_cli("experiment scale-envelope --quick --threads 2 --quiet --json-out '" +
              (dir / "r.json").string() + "' --out '" + (dir / "r.html").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(cli_runner_detail::slurp(dir / "r.json"));
  EXPECT_EQ(j.at("prereg").at("path"), "bench/prereg/scale-envelope-v1.md");
  ASSERT_EQ(j.at("cells").size(), 2u);
  const json& init = j.at("runs").at(0).at("measures").at("init");
  EXPECT_GT(init.at("attention").at("logit_std").get<double>(), 0.0);
  EXPECT_EQ(init.at("query_gradient_norm").size(), 1u);  // --quick: one layer
  EXPECT_EQ(j.at("verdicts").size(), 2u);
  EXPECT_TRUE(fs::exists(dir / "r.html"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace headcount::testing
