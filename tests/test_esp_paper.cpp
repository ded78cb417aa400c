// The claims protocol's E-A and the stages it runs in: the published ESP task (enumeration,
// targets, MFAS against a brute force over every vertex order), frozen biases, the git blob hash
// of the pre-registration, the pilot's envelope (picks, the edge extension) and the test stage's
// learning rates, and the CLI's stage errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include "cli_runner.h"
#include "expect_error.h"
#include "experiments/experiments.h"
#include "experiments/prereg.h"
#include "experiments/result.h"
#include "experiments/stages.h"
#include "headcount/train/model.h"
#include "headcount/train/trainer.h"
#include "train/tasks/esp_graphs.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;
namespace ex = headcount::experiments;
using nlohmann::json;
using train::tasks::Arc;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("headcount_esp_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& path) { return cli_runner_detail::slurp(path); }

// MFAS by brute force: the fewest backward arcs over every order of the vertices.
std::int64_t brute_force_mfas(const std::vector<Arc>& arcs, std::int64_t n) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::int64_t best = static_cast<std::int64_t>(arcs.size());
  do {
    std::vector<std::int64_t> place(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) place[static_cast<std::size_t>(order[i])] = i;
    std::int64_t back = 0;
    for (const auto& [u, v] : arcs)
      back += place[static_cast<std::size_t>(u)] > place[static_cast<std::size_t>(v)];
    best = std::min(best, back);
  } while (std::next_permutation(order.begin(), order.end()));
  return best;
}

TEST(EspSelector, MfasOfThePaperGraphsAndOfRandomGraphs) {
  using train::tasks::esp_graph_arcs;
  using train::tasks::minimum_feedback_arc_set;
  EXPECT_EQ(minimum_feedback_arc_set(esp_graph_arcs("transitive", 8), 8), 0);
  EXPECT_EQ(minimum_feedback_arc_set(esp_graph_arcs("complete", 8), 8), 28);
  EXPECT_EQ(minimum_feedback_arc_set(esp_graph_arcs("cycle", 8), 8), 1);
  EXPECT_EQ(esp_graph_arcs("transitive", 8).size(), 28u);
  EXPECT_EQ(esp_graph_arcs("complete", 8).size(), 56u);
  EXPECT_EQ(esp_graph_arcs("cycle", 8).size(), 8u);
  // Random digraphs on 6 vertices against the brute force over all 720 orders.
  std::uint64_t state = 12345;
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<Arc> arcs;
    for (std::int64_t u = 0; u < 6; ++u)
      for (std::int64_t v = 0; v < 6; ++v) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        if (u != v && (state >> 61) < 3) arcs.emplace_back(u, v);
      }
    EXPECT_EQ(minimum_feedback_arc_set(arcs, 6), brute_force_mfas(arcs, 6)) << trial;
  }
  expect_error([] { esp_graph_arcs("star", 8); }, {"task.graph", "star"});
  expect_error([] { esp_graph_arcs("cycle", 17); }, {"task.vertices", "17"});
}

TEST(EspSelector, EnumerationTargetsAndCeiling) {
  const auto task = train::make_task(
      {{"name", "esp"}, {"mode", "selector"}, {"graph", "complete"}, {"vertices", 8}});
  const json d = task->describe();
  EXPECT_EQ(d.at("sequences"), 112);
  EXPECT_EQ(d.at("mfas"), 28);
  EXPECT_DOUBLE_EQ(d.at("one_head_ceiling").get<double>(), 0.75);
  EXPECT_EQ(d.at("one_head_ceiling_count"), 84);
  EXPECT_EQ(task->vocab_size(), 11);
  EXPECT_EQ(task->seq_len(), 4);
  const train::Batch b = task->train_batch(7, 3, 112);
  const train::Batch v = task->validation_batch(0, 112);
  EXPECT_EQ(b.tokens, v.tokens);  // enumerate: the batch is the whole enumeration
  std::set<std::vector<std::int32_t>> distinct;
  for (std::int64_t r = 0; r < 112; ++r) {
    const std::int32_t* t = b.tokens.data() + 4 * r;
    const std::int32_t* y = b.targets.data() + 4 * r;
    distinct.insert({t[0], t[1], t[2]});
    EXPECT_NE(t[0], t[1]);
    EXPECT_EQ(t[3], 10);  // #
    ASSERT_TRUE(t[2] == 8 || t[2] == 9);
    EXPECT_EQ(y[3], t[2] == 8 ? t[0] : t[1]);  // S1 -> u, S2 -> v
    EXPECT_EQ(y[0], train::Batch::kIgnore);
    EXPECT_EQ(y[1], train::Batch::kIgnore);
    EXPECT_EQ(y[2], train::Batch::kIgnore);
  }
  EXPECT_EQ(distinct.size(), 112u);
  expect_error([&] { task->train_batch(1, 0, 32); }, {"batch", "112", "32"});
  // Sampled rows come from the enumeration.
  const auto sampled = train::make_task(
      {{"name", "esp"}, {"mode", "selector"}, {"graph", "cycle"}, {"enumerate", false}});
  const train::Batch s = sampled->train_batch(1, 0, 50);
  EXPECT_EQ(s.batch, 50);
  for (std::int64_t r = 0; r < 50; ++r)
    EXPECT_EQ((s.tokens[4 * r] + 1) % 8, s.tokens[4 * r + 1]);  // an arc of the cycle
  expect_error(
      [] {
        train::make_task({{"name", "esp"}, {"mode", "other"}});
      },
      {"task.mode", "other"});
  expect_error(
      [] {
        train::make_task({{"name", "esp"}, {"mode", "selector"}, {"arcs", 3}});
      },
      {"arcs"});
}

TEST(EspSelector, FrozenBiasesStayZeroWhileTheWeightsTrain) {
  train::TrainConfig c;
  c.task = {{"name", "esp"}, {"mode", "selector"}, {"graph", "cycle"}};
  c.model = {.context = 4, .layers = 1, .d_model = 16, .heads = 2, .d_ff = 32};
  c.model.frozen_biases = true;
  c.optim = {.lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 1, .weight_decay = 0};
  c.steps = 5;
  c.batch = 16;
  c.log_every = 0;
  Context ctx({.threads = 1});
  train::Trainer frozen(ctx, c);
  std::vector<std::vector<float>> before;
  for (const train::Parameter& p : frozen.model().parameters())
    before.emplace_back(p.value.data<const float>(), p.value.data<const float>() + p.value.numel());
  for (int s = 0; s < 5; ++s) frozen.train_step();
  int frozen_count = 0;
  for (std::size_t i = 0; i < before.size(); ++i) {
    const train::Parameter& p = frozen.model().parameters()[i];
    const bool bias = p.value.rank() == 1 && !p.name.ends_with(".weight");
    EXPECT_EQ(p.frozen, bias) << p.name;
    const float* a = before[i].data();
    const float* b = p.value.data<const float>();
    const bool moved = !std::equal(a, a + p.value.numel(), b);
    EXPECT_EQ(moved, !bias) << p.name;
    if (bias) {
      ++frozen_count;
      EXPECT_TRUE(std::all_of(b, b + p.value.numel(), [](float x) { return x == 0.0f; }));
    }
  }
  EXPECT_EQ(frozen_count, 8);  // ln1, b_qkv, b_o, ln2, b_up, b_down, ln_f, head
  EXPECT_EQ(train::model_config_from_json(train::to_json(c.model)).frozen_biases, true);
  EXPECT_FALSE(train::to_json(train::ModelConfig{}).contains("frozen_biases"));
}

TEST(Prereg, Sha1AndGitBlobNames) {
  EXPECT_EQ(ex::sha1_hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  EXPECT_EQ(ex::sha1_hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
  EXPECT_EQ(ex::sha1_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
  EXPECT_EQ(ex::sha1_hex(std::string(1000000, 'a')), "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
  EXPECT_EQ(ex::git_blob_hash(""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
  EXPECT_EQ(ex::git_blob_hash("hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
  const json missing = ex::prereg_record("/nonexistent-dir", "bench/prereg/x.md");
  EXPECT_FALSE(missing.at("preregistered").get<bool>());
  EXPECT_TRUE(missing.at("blob").is_null());
  const json none = ex::prereg_record("", "");
  EXPECT_FALSE(none.at("preregistered").get<bool>());
}

// The pilot on the quick grid: each cell's pick is the best point of its envelope by R4's rule,
// an edge pick got its extra point, and the test stage trains each cell at its pick.
TEST(ExperimentStages, PilotPicksByTheRuleAndTestUsesThePicks) {
  ex::ExperimentOptions options{.steps = 60, .quick = true, .threads = 2};
  const ex::Experiment e = ex::make_esp_paper(options);
  Context ctx({.threads = 2});
  options.stage = ex::Stage::pilot;
  ex::Experiment grid;
  const ex::ExperimentResult pilot = ex::run_pilot(ctx, e, options, false, grid);
  const json doc = ex::result_json(pilot);
  EXPECT_EQ(doc.at("settings").at("stage"), "pilot");
  EXPECT_EQ(doc.at("settings").at("first_seed"), 101);
  for (const json& run : doc.at("runs")) EXPECT_EQ(run.at("seed"), 101);
  const json& cells = doc.at("envelope").at("cells");
  ASSERT_EQ(cells.size(), e.cells.size());
  for (const auto& [id, c] : cells.items()) {
    const json& points = c.at("points");
    ASSERT_GE(points.size(), 3u) << id;
    const double lr = c.at("lr").get<double>();
    double best_metric = -1, best_loss = 0;
    for (const json& p : points) {
      const double m = p.at("metric").get<double>(), l = p.at("validation_loss").get<double>();
      if (m > best_metric || (m == best_metric && l < best_loss)) best_metric = m, best_loss = l;
    }
    const auto chosen =
        std::find_if(points.begin(), points.end(), [&](const json& p) { return p.at("lr") == lr; });
    ASSERT_NE(chosen, points.end()) << id;
    EXPECT_EQ(chosen->at("metric").get<double>(), best_metric) << id;
    // A pick at 1e-2 or 1e-3 in the first grid added 3e-2 or 3e-4.
    const bool extended = points.size() == 4;
    const double first = points.front().at("lr"), last = points.back().at("lr");
    EXPECT_EQ(extended, first == 3e-4 || last == 3e-2) << id;
  }
  // The test stage: each cell at its pick, the pilot's envelope carried.
  ex::ExperimentOptions test = options;
  test.stage = ex::Stage::test;
  test.seeds = 2;
  test.pilot = doc;
  ex::Experiment test_grid;
  const json result = ex::result_json(ex::run_test(ctx, e, test, false, test_grid));
  for (const json& run : result.at("runs"))
    EXPECT_EQ(run.at("config").at("optim").at("lr"),
              cells.at(run.at("cell").get<std::string>()).at("lr"));
  EXPECT_EQ(result.at("envelope").at("cells"), cells);
  ASSERT_EQ(result.at("verdicts").size(), 1u);
  // Bad envelopes are named.
  json other = doc;
  other["experiment"]["name"] = "blur";
  expect_error([&] { ex::with_envelope(e, other); }, {"--envelope", "blur"});
  json not_pilot = doc;
  not_pilot["settings"]["stage"] = "test";
  expect_error([&] { ex::with_envelope(e, not_pilot); }, {"--envelope", "stage test"});
  json lacking = doc;
  lacking["envelope"]["cells"].erase("K8* d=16 H1");
  expect_error([&] { ex::with_envelope(e, lacking); }, {"--envelope", "K8* d=16 H1"});
  ex::ExperimentOptions longer = options;
  longer.steps = 80;
  expect_error([&] { ex::with_envelope(ex::make_esp_paper(longer), doc); },
               {"--envelope", "80", "60"});
}

// A long budget restates the default's budget text; a phrase that is not there is an error naming
// the experiment, not a silent no-op that would leave the default's steps or seeds on the page.
TEST(ExperimentStages, RestateBudgetNeedsItsPhrase) {
  ex::Experiment e = ex::as_long_budget(ex::make_scale_envelope({}), "scale-envelope-x", "summary",
                                        "bench/prereg/x.md");
  EXPECT_EQ(e.budget_seconds, 0);
  ex::restate_budget(e, " steps (E-C's N)", " steps (4N)");
  EXPECT_NE(e.budget.find(" steps (4N)"), std::string::npos);
  expect_error([&] { ex::restate_budget(e, " steps (E-C's N)", " steps (4N)"); },
               {"experiment scale-envelope-x", "steps (E-C's N)"});
}

// --budget long picks NAME-long; an experiment without one, or another word, is exit 2 naming
// --budget (and the experiments that have a long budget).
TEST(ExperimentStages, CliBudgetLong) {
  const CliResult none = run_cli("experiment esp-paper --budget long --quick");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("--budget"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("head-sweep-budget"), std::string::npos) << none.err;
  const CliResult word = run_cli("experiment head-sweep-budget --budget longer --quick");
  EXPECT_EQ(word.exit_code, 2);
  EXPECT_NE(word.err.find("--budget"), std::string::npos) << word.err;
  const CliResult quick = run_cli("experiment head-sweep-budget --budget long --quick --quiet");
  ASSERT_EQ(quick.exit_code, 0) << quick.err;
  EXPECT_NE(quick.out.find("head-sweep-budget-long"), std::string::npos) << quick.out;
}

TEST(ExperimentStages, CliStageErrors) {
  const CliResult no_stage = run_cli("experiment esp-paper --steps 10");
  EXPECT_EQ(no_stage.exit_code, 2);
  EXPECT_NE(no_stage.err.find("--stage"), std::string::npos) << no_stage.err;
  const CliResult bad = run_cli("experiment esp-paper --stage pilots");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("pilots"), std::string::npos) << bad.err;
  const CliResult no_envelope = run_cli("experiment esp-paper --stage test");
  EXPECT_EQ(no_envelope.exit_code, 2);
  EXPECT_NE(no_envelope.err.find("--envelope"), std::string::npos) << no_envelope.err;
  const CliResult old = run_cli("experiment scale --stage pilot");
  EXPECT_EQ(old.exit_code, 2);
  EXPECT_NE(old.err.find("no learning-rate grid"), std::string::npos) << old.err;
  const fs::path bad_json =
      fs::temp_directory_path() / ("headcount_bad_" + std::to_string(::getpid()) + ".json");
  std::ofstream(bad_json) << R"({"format": "headcount.experiment.v1"})";
  for (const std::string option : {"--envelope", "--compare-with"}) {
    const std::string args = option == "--envelope"
                                 ? "--envelope '" + bad_json.string() + "'"
                                 : "--envelope x --compare-with '" + bad_json.string() + "'";
    const CliResult lacking = run_cli(
        "experiment " + std::string(option == "--envelope" ? "esp-paper-v2" : "head-sweep-budget") +
        " --stage test " + args);
    EXPECT_EQ(lacking.exit_code, 2) << lacking.err;
    EXPECT_NE(lacking.err.find(option), std::string::npos) << lacking.err;
  }
  fs::remove(bad_json);
  const CliResult pilot_seed = run_cli("experiment esp-paper --stage pilot --first-seed 5");
  EXPECT_EQ(pilot_seed.exit_code, 2);
  EXPECT_NE(pilot_seed.err.find("--first-seed"), std::string::npos) << pilot_seed.err;
  const CliResult seeds = run_cli("experiment esp-paper --stage test --seeds 3 --envelope x");
  EXPECT_EQ(seeds.exit_code, 2);
  EXPECT_NE(seeds.err.find("--seeds"), std::string::npos) << seeds.err;
}

TEST(ExperimentStages, QuickEspPaperIsWholeAndNamesItsPrereg) {
  const fs::path dir = fresh_dir("esp-quick");
  const CliResult r =
      run_cli("experiment esp-paper --quick --threads 2 --quiet --json-out '" +
              (dir / "r.json").string() + "' --out '" + (dir / "r.html").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(slurp(dir / "r.json"));
  EXPECT_EQ(j.at("settings").at("seeds"), 1);
  EXPECT_EQ(j.at("cells").size(), 4u);
  EXPECT_EQ(j.at("prereg").at("path"), "bench/prereg/esp-paper-v1.md");
  EXPECT_TRUE(j.at("prereg").at("preregistered").get<bool>());
  const std::string page = slurp(dir / "r.html");
  EXPECT_NE(page.find("data-claim=\"esp-paper.one-head-capped\""), std::string::npos);
  for (const json& run : j.at("runs")) {
    const json& m = run.at("measures").at("final");
    EXPECT_EQ(m.at("correct").get<double>(),
              std::round(run.at("final").at("validation_accuracy").get<double>() *
                         m.at("sequences").get<double>()));
  }
  fs::remove_all(dir);
}

// head-sweep-tuned's judge on hand-made per-seed losses: the gate and every branch of (a)-(c).
TEST(HeadSweepTuned, JudgeEveryBranchOnHandMadeLosses) {
  const ex::Experiment e = ex::make_head_sweep_tuned({});
  ASSERT_EQ(e.cells.size(), 7u);
  auto result = [&](std::map<std::string, std::vector<double>> losses) {
    ex::ExperimentResult r{.experiment = &e};
    r.task = {{"bigram_loss", 2.35}};
    for (const ex::Cell& c : e.cells) {
      const std::vector<double> v =
          losses.count(c.id) ? losses.at(c.id) : std::vector<double>{2.0, 2.0, 2.0, 2.0, 2.0};
      r.cells.push_back(ex::cell_stats(c.id, v));
    }
    return e.judge(r);
  };
  const std::vector<double> good = {1.80, 1.81, 1.79, 1.80, 1.82};
  const auto shifted = [&](double by) {
    std::vector<double> v = good;
    for (double& x : v) x += by;
    return v;
  };
  // Gate: h = 4 above 2.35 - 0.25.
  for (const ex::ClaimVerdict& v : result({{"h=4", shifted(0.35)}}))
    EXPECT_EQ(v.verdict, ex::Verdict::not_learned) << v.id;
  // The U-shape, narrowness the cause.
  auto all = result({{"h=4", good},
                     {"h=1", shifted(0.05)},
                     {"h=32", shifted(0.20)},
                     {"h=32 hd=16", {1.805, 1.812, 1.79, 1.80, 1.818}}});
  EXPECT_EQ(all[0].verdict, ex::Verdict::confirmed);
  EXPECT_EQ(all[1].verdict, ex::Verdict::confirmed);
  EXPECT_EQ(all[2].verdict, ex::Verdict::confirmed);
  // One head better, h = 32 equivalent to h = 4, the control worse than h = 4 and no better than
  // main h = 32: refuted, "more heads hurt, not narrow heads".
  all = result({{"h=4", good},
                {"h=1", shifted(-0.05)},
                {"h=32", {1.801, 1.809, 1.791, 1.802, 1.819}},
                {"h=32 hd=16", shifted(0.10)}});
  EXPECT_EQ(all[0].verdict, ex::Verdict::refuted);
  EXPECT_EQ(all[1].verdict, ex::Verdict::refuted);
  EXPECT_EQ(all[2].verdict, ex::Verdict::refuted);
  EXPECT_NE(all[2].reason.find("more heads hurt, not narrow heads"), std::string::npos);
  // Noise: nothing shown.
  all = result({{"h=4", good}, {"h=1", {1.70, 1.95, 1.75, 1.90, 1.78}}});
  EXPECT_EQ(all[0].verdict, ex::Verdict::not_shown);
}

// head-sweep-budget's judge: per-seed slopes of the h=4 - h=1 gap between its own runs (N/4) and
// a hand-made result at N on the same seeds.
TEST(HeadSweepTuned, BudgetJudgeSlopeAcrossBudgets) {
  const ex::Experiment e = ex::make_head_sweep_budget({});
  ASSERT_EQ(e.cells.size(), 6u);
  EXPECT_EQ(e.cells.front().config.steps, 600);
  auto result = [&](const std::vector<double>& gap_short, const std::vector<double>& gap_full,
                    bool with_other) {
    ex::ExperimentResult r{.experiment = &e};
    r.options.compare_with = nullptr;
    json other{{"format", ex::kResultFormat}, {"runs", json::array()}};
    for (std::size_t s = 0; s < gap_short.size(); ++s) {
      const std::uint64_t seed = 201 + s;
      for (const char* cell : {"h=1", "h=4"}) {
        ex::RunRecord run{.cell = std::string(cell) == "h=1" ? 0u : 2u,  // h=1, h=4
                          .seed = seed,
                          .config = {{"train", {{"steps", 600}}}}};
        run.final.loss = std::string(cell) == "h=1" ? 1.5 : 1.5 + gap_short[s];
        r.runs.push_back(run);
        other["runs"].push_back(
            {{"cell", cell},
             {"seed", seed},
             {"config", {{"train", {{"steps", 2400}}}}},
             {"final",
              {{"validation_loss", std::string(cell) == "h=1" ? 1.4 : 1.4 + gap_full[s]}}}});
      }
    }
    if (with_other) r.options.compare_with = other;
    return e.judge(r).at(0);
  };
  // The gap turns in the split's favour with training: slope below 0.
  ex::ClaimVerdict v =
      result({0.02, 0.03, 0.01, 0.025, 0.015}, {-0.03, -0.04, -0.035, -0.02, -0.05}, true);
  EXPECT_EQ(v.verdict, ex::Verdict::confirmed) << v.reason;
  const double expected =
      ((-0.03 - 0.02) + (-0.04 - 0.03) + (-0.035 - 0.01) + (-0.02 - 0.025) + (-0.05 - 0.015)) / 5 /
      2;
  EXPECT_NEAR(v.numbers.at("slope").get<double>(), expected, 1e-12);
  v = result({-0.03, -0.04, -0.035, -0.02, -0.05}, {0.02, 0.03, 0.01, 0.025, 0.015}, true);
  EXPECT_EQ(v.verdict, ex::Verdict::refuted);
  v = result({0.01, -0.02, 0.03, -0.01, 0.0}, {-0.01, 0.02, 0.0, 0.01, -0.02}, true);
  EXPECT_EQ(v.verdict, ex::Verdict::not_shown);
  EXPECT_EQ(result({0.01, 0.02}, {0.0, 0.0}, false).verdict, ex::Verdict::not_shown);
}

// The long budget: this run is 4N and the other document N, so the other is the "short" end; the
// slope is the same number as when the roles are the other way round.
TEST(HeadSweepTuned, BudgetLongJudgesFromTheOtherEnd) {
  const ex::Experiment e = ex::make_head_sweep_budget_long({});
  EXPECT_EQ(e.name, "head-sweep-budget-long");
  EXPECT_EQ(e.prereg, "bench/prereg/head-sweep-budget-long-v1.md");
  ASSERT_EQ(e.cells.size(), 3u);  // h = 1, 4, 8
  EXPECT_EQ(e.cells.front().config.steps, 9600);
  const std::vector<double> at_long = {-0.03, -0.04, -0.035, -0.02, -0.05},
                            at_short = {0.02, 0.03, 0.01, 0.025, 0.015};
  ex::ExperimentResult r{.experiment = &e};
  json other{{"format", ex::kResultFormat}, {"runs", json::array()}};
  for (std::size_t s = 0; s < at_long.size(); ++s) {
    const std::uint64_t seed = 501 + s;
    for (const char* cell : {"h=1", "h=4"}) {
      const bool one = std::string(cell) == "h=1";
      ex::RunRecord run{
          .cell = one ? 0u : 1u, .seed = seed, .config = {{"train", {{"steps", 9600}}}}};
      run.final.loss = one ? 1.3 : 1.3 + at_long[s];
      r.runs.push_back(run);
      other["runs"].push_back({{"cell", cell},
                               {"seed", seed},
                               {"config", {{"train", {{"steps", 2400}}}}},
                               {"final", {{"validation_loss", one ? 1.4 : 1.4 + at_short[s]}}}});
    }
  }
  r.options.compare_with = other;
  const ex::ClaimVerdict v = e.judge(r).at(0);
  EXPECT_EQ(v.verdict, ex::Verdict::confirmed) << v.reason;
  EXPECT_EQ(v.numbers.at("budgets"), json({2400, 9600}));
  double expected = 0;
  for (std::size_t s = 0; s < at_long.size(); ++s) expected += (at_long[s] - at_short[s]) / 5 / 2;
  EXPECT_NEAR(v.numbers.at("slope").get<double>(), expected, 1e-12);
  // The same budget on both sides is an error naming --compare-with.
  for (json& run : other["runs"]) run["config"]["train"]["steps"] = 9600;
  r.options.compare_with = other;
  EXPECT_THROW(e.judge(r), Error);
}

}  // namespace
}  // namespace headcount::testing
