// The experiment framework (src/experiments): the rules of evidence on hand-made numbers (every
// branch of the comparison and of each verdict), head-sweep's and scale's judges on hand-made
// cell statistics, the cost helper against cost.h, a --quick run end to end through the CLI (the
// JSON whole and consistent with itself and with the page), determinism of the JSON at a fixed
// seed and thread count, and the CLI's bad input (one line, exit 2, no file).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "cli_runner.h"
#include "expect_error.h"
#include "experiments/experiments.h"
#include "experiments/model_cost.h"
#include "experiments/page.h"
#include "experiments/result.h"
#include "experiments/runner.h"
#include "experiments/verdict.h"
#include "headcount/cost.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;
namespace ex = headcount::experiments;
using ex::MetricKind;
using ex::Verdict;
using nlohmann::json;

// Cell statistics with the given mean and std, without going through values (the rule only
// reads mean and std).
ex::CellStats stats(const std::string& id, double mean, double std) {
  return {.cell = id, .values = {mean}, .mean = mean, .std = std, .n = 3};
}

TEST(ExperimentVerdict, CellStatsUseTheSampleStd) {
  const ex::CellStats s = ex::cell_stats("c", {1.0, 2.0, 3.0});
  EXPECT_EQ(s.n, 3);
  EXPECT_DOUBLE_EQ(s.mean, 2.0);
  EXPECT_DOUBLE_EQ(
      s.std, 1.0);  // sqrt(((1-2)² + 0 + (3-2)²) / (3 - 1)); the population std would be 0.816
  EXPECT_EQ(ex::cell_stats("one", {0.5}).std, 0.0);
  expect_error([] { ex::cell_stats("empty", {}); }, {"cell empty", "at least one"});
  expect_error([] { ex::cell_stats("nan", {1.0, std::nan("")}); }, {"cell nan seed 1", "finite"});
}

TEST(ExperimentVerdict, ComparisonRuleEveryBranch) {
  // Counts: gap 0.05 > 2·0.01 and > 0.01; lower loss wins, higher accuracy wins.
  ex::Comparison c = ex::compare(stats("a", 1.00, 0.01), stats("b", 1.05, 0.01), MetricKind::loss);
  EXPECT_TRUE(c.counts);
  EXPECT_EQ(c.winner, "a");
  EXPECT_DOUBLE_EQ(c.noise, 0.02);
  EXPECT_DOUBLE_EQ(c.floor, 0.01);
  c = ex::compare(stats("a", 0.50, 0.01), stats("b", 0.60, 0.01), MetricKind::accuracy);
  EXPECT_TRUE(c.counts);
  EXPECT_EQ(c.winner, "b");
  EXPECT_DOUBLE_EQ(c.floor, 0.02);
  // Noise: gap 0.05 <= 2·max(0.01, 0.03) = 0.06 (the larger std decides).
  c = ex::compare(stats("a", 1.00, 0.01), stats("b", 1.05, 0.03), MetricKind::loss);
  EXPECT_FALSE(c.counts);
  EXPECT_EQ(c.winner, "");
  EXPECT_NE(c.noise, 0.0);
  // Strictly greater: gap 0.5 == 2·0.25 (all exact in binary) does not count.
  EXPECT_FALSE(ex::compare(stats("a", 1.0, 0.25), stats("b", 1.5, 0.0), MetricKind::loss).counts);
  // Floor: gap 0.0078125 with no noise is under the loss floor 0.01; 0.015 clears the loss
  // floor but not the accuracy floor 0.02.
  EXPECT_FALSE(
      ex::compare(stats("a", 1.0, 0.0), stats("b", 1.0078125, 0.0), MetricKind::loss).counts);
  EXPECT_TRUE(ex::compare(stats("a", 1.0, 0.0), stats("b", 1.015, 0.0), MetricKind::loss).counts);
  EXPECT_FALSE(
      ex::compare(stats("a", 0.5, 0.0), stats("b", 0.515, 0.0), MetricKind::accuracy).counts);
  // beats() is one-sided.
  EXPECT_TRUE(ex::beats(stats("a", 1.0, 0.0), stats("b", 1.1, 0.0), MetricKind::loss));
  EXPECT_FALSE(ex::beats(stats("b", 1.1, 0.0), stats("a", 1.0, 0.0), MetricKind::loss));
}

TEST(ExperimentVerdict, BestOfFollowsTheMetricDirection) {
  const std::vector<ex::CellStats> cells = {stats("x", 0.7, 0), stats("y", 0.5, 0),
                                            stats("z", 0.5, 0), stats("w", 0.9, 0)};
  EXPECT_EQ(ex::best_of(cells, MetricKind::loss).cell, "y");  // the tie keeps the first
  EXPECT_EQ(ex::best_of(cells, MetricKind::accuracy).cell, "w");
  expect_error([] { ex::best_of({}, MetricKind::loss); }, {"best_of"});
}

TEST(ExperimentVerdict, PairVerdictEveryBranch) {
  EXPECT_EQ(ex::pair_verdict("p", "c", "r", stats("a", 1.0, 0.01), stats("b", 1.1, 0.01),
                             MetricKind::loss)
                .verdict,
            Verdict::confirmed);
  EXPECT_EQ(ex::pair_verdict("p", "c", "r", stats("a", 1.1, 0.01), stats("b", 1.0, 0.01),
                             MetricKind::loss)
                .verdict,
            Verdict::refuted);
  const ex::ClaimVerdict v = ex::pair_verdict("p", "c", "r", stats("a", 1.0, 0.1),
                                              stats("b", 1.1, 0.01), MetricKind::loss);
  EXPECT_EQ(v.verdict, Verdict::not_shown);
  EXPECT_NE(v.reason.find("not distinguishable"), std::string::npos) << v.reason;
  const json j = ex::to_json(v);
  EXPECT_EQ(j.at("verdict"), "not shown");
  EXPECT_EQ(j.at("comparisons").size(), 1u);
}

TEST(ExperimentVerdict, AllPairsVerdictEveryBranch) {
  const std::vector<std::string> labels = {"h = 8", "h = 32"};
  auto verdict = [&](double a8, double b8, double a32, double b32) {
    return ex::all_pairs_verdict("s", "c", "r", {stats("a8", a8, 0.01), stats("a32", a32, 0.01)},
                                 {stats("b8", b8, 0.01), stats("b32", b32, 0.01)}, labels,
                                 MetricKind::loss);
  };
  EXPECT_EQ(verdict(1.0, 1.1, 1.0, 1.1).verdict, Verdict::confirmed);  // a beats b at both
  EXPECT_EQ(verdict(1.1, 1.0, 1.1, 1.0).verdict, Verdict::refuted);    // b beats a at both
  EXPECT_EQ(verdict(1.0, 1.1, 1.1, 1.0).verdict, Verdict::not_shown);  // split
  const ex::ClaimVerdict v = verdict(1.0, 1.1, 1.0, 1.005);            // one pair indistinguishable
  EXPECT_EQ(v.verdict, Verdict::not_shown);
  EXPECT_NE(v.reason.find("h = 32"), std::string::npos) << v.reason;
  EXPECT_EQ(v.numbers.at("first_side_wins"), 1);
}

TEST(ExperimentVerdict, EqualityVerdict) {
  EXPECT_EQ(ex::equality_verdict("e", "c", "r", {"a", "b"}, {7, 7}).verdict, Verdict::confirmed);
  const ex::ClaimVerdict v = ex::equality_verdict("e", "c", "r", {"a", "b", "c"}, {7, 8, 7});
  EXPECT_EQ(v.verdict, Verdict::refuted);
  EXPECT_NE(v.reason.find("max 8 (b)"), std::string::npos) << v.reason;
}

// A result with hand-made statistics for an experiment's cells (one run each, for the cost).
ex::ExperimentResult fake_result(const ex::Experiment& e,
                                 const std::map<std::string, std::pair<double, double>>& numbers,
                                 std::int64_t macs = 1000) {
  ex::ExperimentResult r{.experiment = &e};
  for (std::size_t i = 0; i < e.cells.size(); ++i) {
    ex::RunRecord run{.cell = i, .seed = 1};
    run.cost.train_macs = macs;
    r.runs.push_back(run);
    const auto [mean, std] = numbers.at(e.cells[i].id);
    r.cells.push_back(stats(e.cells[i].id, mean, std));
  }
  return r;
}

std::map<std::string, std::string> verdicts_by_id(const std::vector<ex::ClaimVerdict>& verdicts) {
  std::map<std::string, std::string> out;
  for (const ex::ClaimVerdict& v : verdicts) out[v.id] = ex::verdict_name(v.verdict);
  return out;
}

TEST(ExperimentVerdict, HeadSweepJudgeOnHandMadeNumbers) {
  const ex::Experiment e = ex::make_head_sweep({.seeds = 3});
  std::map<std::string, std::pair<double, double>> n;
  for (const ex::Cell& c : e.cells) n[c.id] = {1.50, 0.01};
  n["h=8"] = {1.40, 0.01};  // the best: beats h = 1 and h = 64
  auto v = verdicts_by_id(e.judge(fake_result(e, n)));
  EXPECT_EQ(v["head-sweep.cost"], "confirmed");
  EXPECT_EQ(v["head-sweep.split-helps"], "confirmed");
  EXPECT_EQ(v["head-sweep.too-narrow-hurts"], "confirmed");
  // h = 1 best by a margin: (ii) refuted; the best h < 64 is then h = 1, which beats h = 64.
  n["h=8"] = {1.50, 0.01};
  n["h=1"] = {1.30, 0.01};
  v = verdicts_by_id(e.judge(fake_result(e, n)));
  EXPECT_EQ(v["head-sweep.split-helps"], "refuted");
  EXPECT_EQ(v["head-sweep.too-narrow-hurts"], "confirmed");
  // h = 64 best: (iii) refuted; the control series (h=16,dk=16 at 1.0) is not part of any verdict.
  n["h=1"] = {1.50, 0.01};
  n["h=64"] = {1.30, 0.01};
  n["h=16,dk=16"] = {1.00, 0.01};
  v = verdicts_by_id(e.judge(fake_result(e, n)));
  EXPECT_EQ(v["head-sweep.split-helps"], "confirmed");  // the best h > 1 is h = 64
  EXPECT_EQ(v["head-sweep.too-narrow-hurts"], "refuted");
  // Everything within noise: not shown; unequal cost: refuted.
  for (auto& [id, value] : n) value = {1.5, 0.05};
  v = verdicts_by_id(e.judge(fake_result(e, n, 0)));
  EXPECT_EQ(v["head-sweep.split-helps"], "not shown");
  EXPECT_EQ(v["head-sweep.too-narrow-hurts"], "not shown");
  ex::ExperimentResult r = fake_result(e, n);
  r.runs[3].cost.train_macs = 1001;
  EXPECT_EQ(verdicts_by_id(e.judge(r))["head-sweep.cost"], "refuted");
}

TEST(ExperimentVerdict, ScaleJudgeOnHandMadeNumbers) {
  const ex::Experiment e = ex::make_scale({.seeds = 3});
  auto judge = [&](double hd8, double dm8, double hd32, double dm32) {
    const ex::ExperimentResult r = fake_result(e, {{"h=8,head_dim", {hd8, 0.01}},
                                                   {"h=8,d_model", {dm8, 0.01}},
                                                   {"h=32,head_dim", {hd32, 0.01}},
                                                   {"h=32,d_model", {dm32, 0.01}}});
    return verdicts_by_id(e.judge(r))["scale.head-dim-scale"];
  };
  EXPECT_EQ(judge(1.0, 1.1, 1.0, 1.1), "confirmed");
  EXPECT_EQ(judge(1.1, 1.0, 1.1, 1.0), "refuted");
  EXPECT_EQ(judge(1.0, 1.1, 1.0, 1.0), "not shown");
}

TEST(ExperimentCost, ModelCostSumsTheLayerRows) {
  const train::ModelConfig m = train::resolve(
      train::ModelConfig{.vocab = 80, .context = 64, .layers = 4, .d_model = 128, .heads = 8});
  const ex::ModelCost c = ex::model_cost(m, 12, 64);
  const CostReport layer = estimate_cost({.d_model = 128, .heads = 8, .seq_len = 64, .batch = 12});
  EXPECT_EQ(c.attention_macs, 4 * layer.stage("attention block").macs);
  EXPECT_EQ(c.ffn_macs, 4 * layer.stage("feed-forward").macs);
  EXPECT_EQ(c.head_macs, 12 * 64 * 128 * 80);
  EXPECT_EQ(c.train_macs, 3 * (c.attention_macs + c.ffn_macs + c.head_macs));
  // At fixed d_model the head count cancels (head_dim = d / h); a fixed head_dim does not.
  for (std::int64_t h : {1, 2, 64}) {
    train::ModelConfig other = m;
    other.heads = h;
    other.kv_heads = 0;
    other.head_dim = 0;
    EXPECT_EQ(ex::model_cost(train::resolve(other), 12, 64).train_macs, c.train_macs) << h;
  }
  train::ModelConfig wide = m;
  wide.heads = 16;
  wide.kv_heads = 0;
  wide.head_dim = 16;
  EXPECT_GT(ex::model_cost(train::resolve(wide), 12, 64).train_macs, c.train_macs);
  train::ModelConfig bare = m;
  bare.attention_only = true;
  EXPECT_EQ(ex::model_cost(train::resolve(bare), 12, 64).ffn_macs, 0);
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() /
                       ("headcount_experiments_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The quick head-sweep through the CLI: the JSON has every run and cell, its aggregates are the
// runs' numbers, and the page shows the same runs, cells and verdicts.
TEST(ExperimentCli, QuickHeadSweepJsonAndPageAgree) {
  const fs::path dir = fresh_dir("quick");
  const CliResult r =
      run_cli("experiment head-sweep --quick --seeds 2 --threads 2 --quiet --json-out '" +
              (dir / "r.json").string() + "' --out '" + (dir / "r.html").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;  // --quiet
  const json j = json::parse(slurp(dir / "r.json"));
  const std::string page = slurp(dir / "r.html");
  EXPECT_EQ(j.at("format"), ex::kResultFormat);
  EXPECT_EQ(j.at("experiment").at("name"), "head-sweep");
  EXPECT_EQ(j.at("settings").at("seeds"), 2);
  const std::size_t cells = j.at("cells").size(), runs = j.at("runs").size();
  EXPECT_EQ(cells, 4u);  // quick: h = 1, 4, 64 and the head_dim-16 control at h = 2
  EXPECT_EQ(runs, 2 * cells);
  EXPECT_EQ(j.at("timing").at("runs").size(), runs);
  for (const json& cell : j.at("cells")) {
    std::vector<double> values;
    for (const json& run : j.at("runs"))
      if (run.at("cell") == cell.at("id")) {
        values.push_back(run.at("final").at("validation_loss").get<double>());
        EXPECT_EQ(run.at("curve").at("step").size(), run.at("curve").at("loss").size());
        EXPECT_EQ(run.at("curve").at("step").back(), run.at("config").at("train").at("steps"));
        EXPECT_EQ(run.at("validation").back().at("loss"), run.at("final").at("validation_loss"));
        EXPECT_EQ(run.at("cost"), cell.at("cost"));
      }
    ASSERT_EQ(values.size(), 2u) << cell.at("id");
    const ex::CellStats s = ex::cell_stats("x", values);
    EXPECT_EQ(cell.at("stats").at("mean").get<double>(), s.mean);
    EXPECT_EQ(cell.at("stats").at("std").get<double>(), s.std);
    EXPECT_LT(
        s.mean,
        std::log(j.at("task").at("vocab").get<double>()));  // it trained: below the uniform loss
  }
  EXPECT_EQ(j.at("verdicts").size(), 3u);
  for (const json& v : j.at("verdicts")) {
    const std::string box = "data-claim=\"" + v.at("id").get<std::string>() + "\" data-verdict=\"" +
                            v.at("verdict").get<std::string>() + "\"";
    EXPECT_NE(page.find(box), std::string::npos) << box;
    EXPECT_FALSE(v.at("comparisons").empty() && v.at("id") != "head-sweep.cost");
  }
  EXPECT_EQ(j.at("verdicts")[0].at("verdict"),
            "confirmed");  // the cost is flat in h by construction
  EXPECT_NE(page.find("data-cells=\"" + std::to_string(cells) + "\" data-runs=\"" +
                      std::to_string(runs) + "\""),
            std::string::npos);
  // One verdict box per verdict, attention maps for the d/h cells' first seed, the Vaswani table.
  const std::regex box("class=\"verdict ");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(page.begin(), page.end(), box), std::sregex_iterator()),
      3);
  EXPECT_NE(page.find("Attention maps"), std::string::npos);
  EXPECT_NE(page.find("Vaswani"), std::string::npos);
  EXPECT_NE(page.find("metric-vs-heads"), std::string::npos);
  // The page is drawn from the JSON alone: the same document gives the same page, in process
  // and through --from.
  EXPECT_EQ(ex::experiment_page(j), page);
  const CliResult again = run_cli("experiment --from '" + (dir / "r.json").string() + "' --out '" +
                                  (dir / "again.html").string() + "'");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(slurp(dir / "again.html"), page);
  EXPECT_NE(again.out.find("head-sweep.split-helps: "), std::string::npos) << again.out;
  fs::remove_all(dir);
}

// Same command, seeds and thread count: the same JSON apart from "timing".
TEST(ExperimentRunner, DeterministicAtFixedSeedAndThreads) {
  const ex::ExperimentOptions options{.seeds = 2, .steps = 6, .quick = true, .threads = 2};
  const ex::Experiment e = ex::make_scale(options);
  auto once = [&] {
    Context ctx({.threads = 2});
    return ex::result_json(ex::run_experiment(ctx, e, options, false));
  };
  const json a = once(), b = once();
  ASSERT_TRUE(a.contains("timing"));
  EXPECT_EQ(ex::without_timing(a).dump(), ex::without_timing(b).dump());
  EXPECT_FALSE(ex::without_timing(a).contains("timing"));
  // The seeds differ from each other (initialisation and data order).
  EXPECT_NE(a.at("runs")[0].at("final"), a.at("runs")[1].at("final"));
  // scale's hooks: statistics at initialisation and after training, on the same rows.
  const json& init = a.at("runs")[0].at("measures").at("init").at("attention");
  EXPECT_GT(init.at("rows").get<int>(), 0);
  EXPECT_LE(init.at("entropy").get<double>(), init.at("uniform_entropy").get<double>() + 1e-12);
  EXPECT_GT(init.at("logit_std").get<double>(), 0.0);
}

// The runner trains min(threads, runs) runs at a time, each on one thread: the numbers do not
// depend on --threads at all (only settings.threads and the timing differ).
TEST(ExperimentRunner, SameNumbersAtEveryThreadCount) {
  auto once = [](int threads) {
    const ex::ExperimentOptions options{.seeds = 2, .steps = 4, .quick = true, .threads = threads};
    const ex::Experiment e = ex::make_scale(options);
    Context ctx({.threads = threads});
    json j = ex::without_timing(ex::result_json(ex::run_experiment(ctx, e, options, false)));
    EXPECT_EQ(j.at("settings").at("threads"), threads);
    j.at("settings").erase("threads");
    return j.dump();
  };
  const std::string one = once(1);
  EXPECT_EQ(once(2), one);
  EXPECT_EQ(once(3), one);
}

void expect_one_line_error(const std::string& args, const std::string& part,
                           const fs::path& must_not_exist) {
  const CliResult r = run_cli("experiment " + args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << args << "\n" << r.err;
  EXPECT_TRUE(r.out.empty()) << args;
  EXPECT_FALSE(fs::exists(must_not_exist)) << args;
}

TEST(ExperimentCli, BadInputIsOneLineAndExitTwo) {
  const fs::path dir = fresh_dir("bad");
  const fs::path page = dir / "page.html";
  const std::string out =
      " --out '" + page.string() + "' --json-out '" + (dir / "r.json").string() + "'";
  expect_one_line_error("no-such" + out, "head-sweep", page);
  expect_one_line_error("" + out, "NAME", page);
  expect_one_line_error("head-sweep --quick --seeds 0" + out, "--seeds", page);
  expect_one_line_error("head-sweep --quick --steps 0" + out, "--steps", page);
  expect_one_line_error("head-sweep --quick --steps -4" + out, "--steps", page);
  expect_one_line_error("head-sweep --quick --steps abc" + out, "--steps", page);
  expect_one_line_error("head-sweep --quick --threads 0" + out, "--threads", page);
  expect_one_line_error("head-sweep --quick --out '" + (dir / "missing" / "p.html").string() + "'",
                        "--out", dir / "missing");
  expect_one_line_error("head-sweep --quick --out '" + dir.string() + "'", "--out", page);
  expect_one_line_error(
      "--from '" + (dir / "none.json").string() + "' --out '" + page.string() + "'", "--from",
      page);
  std::ofstream(dir / "other.json") << R"({"format": "something else"})";
  expect_one_line_error(
      "--from '" + (dir / "other.json").string() + "' --out '" + page.string() + "'",
      "headcount.experiment.v1", page);
  fs::remove(dir / "other.json");
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

TEST(ExperimentCli, ListNamesEveryExperiment) {
  const CliResult r = run_cli("experiment --list");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const ex::ExperimentSpec& s : ex::experiment_specs())
    EXPECT_NE(r.out.find("  " + s.name + ": "), std::string::npos) << r.out;
  const CliResult help = run_cli("experiment --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("head-sweep: "), std::string::npos);
  EXPECT_NE(help.out.find("--json-out"), std::string::npos);
}

}  // namespace
}  // namespace headcount::testing
