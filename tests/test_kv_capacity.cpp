// The claims protocol's E-F (kv-capacity): its judge on hand-made per-seed test accuracies (the
// gate's two halves and every branch of both rules), the grid's KV bytes, the uptraining helper's
// plumbing, and a quick run through the CLI that carries the conversion measures.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <vector>

#include "cli_runner.h"
#include "experiments/experiments.h"
#include "experiments/model_cost.h"
#include "experiments/runner.h"
#include "experiments/uptrain.h"
#include "headcount/compress.h"
#include "headcount/train/definition.h"

namespace headcount::testing {
namespace {

namespace ex = headcount::experiments;
using nlohmann::json;
using Values = std::vector<double>;

const Values kGood = {0.99, 0.98, 1.00, 0.99, 0.98};
const Values kNearGood = {0.991, 0.978, 0.999, 0.992, 0.981};
const Values kPoor = {0.50, 0.52, 0.48, 0.51, 0.49};

struct HandMade {
  std::map<std::string, Values> cells;  // test accuracy per cell (default kPoor)
  Values control_a = kGood, uptrained = kGood, converted = kPoor;
  double pilot_mha = 0.99;
  std::string key = "validation_accuracy";  // the char-LM arm's: validation_loss
  double bigram = 0;                        // the char-LM arm's gate reads the task's baseline
};

std::vector<ex::ClaimVerdict> judge(const ex::Experiment& e, const HandMade& h) {
  ex::ExperimentResult r{.experiment = &e};
  if (h.bigram > 0) r.task = {{"bigram_loss", h.bigram}};
  r.options.pilot = {
      {"envelope",
       {{"cells",
         {{"kv=8",
           {{"points",
             {{{"lr", 3e-4}, {"metric", 0.4}}, {{"lr", 1e-3}, {"metric", h.pilot_mha}}}}}}}}}}};
  for (std::size_t i = 0; i < e.cells.size(); ++i) {
    const ex::Cell& c = e.cells[i];
    const Values v = h.cells.count(c.id) ? h.cells.at(c.id) : kPoor;
    r.cells.push_back(ex::cell_stats(c.id, v));
    for (std::size_t s = 0; s < v.size(); ++s) {
      ex::RunRecord run{.cell = i, .seed = s + 1};
      if (c.id == "kv=8")
        run.measures["final"] = {{"control_a", {{h.key, h.control_a[s]}}},
                                 {"conversion",
                                  {{{"kv_heads", 2},
                                    {"converted", {{h.key, h.converted[s]}}},
                                    {"uptrained", {{h.key, h.uptrained[s]}}}},
                                   {{"kv_heads", 1},
                                    {"converted", {{h.key, h.converted[s]}}},
                                    {"uptrained", {{h.key, h.uptrained[s]}}}}}}};
      r.runs.push_back(run);
    }
  }
  return e.judge(r);
}

ex::Verdict price(const ex::Experiment& e, const HandMade& h) { return judge(e, h).at(0).verdict; }
ex::Verdict recovery(const ex::Experiment& e, const HandMade& h) {
  return judge(e, h).at(1).verdict;
}

ex::ExperimentOptions test_stage() {
  ex::ExperimentOptions o;
  o.stage = ex::Stage::test;
  o.steps = 400;
  return o;
}

TEST(KvCapacity, GridAndKvBytes) {
  const ex::Experiment e = ex::make_kv_capacity(test_stage());
  ASSERT_EQ(e.cells.size(), 4u);
  EXPECT_EQ(e.prereg, "bench/prereg/kv-capacity-v1.md");
  std::map<std::string, std::int64_t> bytes;
  for (const ex::Cell& c : e.cells) {
    EXPECT_EQ(c.config.model.heads, 8);
    EXPECT_GT(c.config.model.rope_base, 0.0f);
    EXPECT_EQ(c.config.task.at("split"), "test");
    train::ModelConfig m = c.config.model;
    m.vocab = 129;  // the task's: 64 keys, 64 values, the filler
    bytes[c.id] = ex::model_cost(train::resolve(m), 32, 16).kv_cache_bytes_per_token;
  }
  // 2 layers x (K, V) x kv_heads x head_dim x 4 bytes: the equal-bytes arm holds MHA's cache.
  EXPECT_EQ(bytes.at("kv=8"), 2 * 2 * 8 * 8 * 4);
  EXPECT_EQ(bytes.at("kv=2"), 2 * 2 * 2 * 8 * 4);
  EXPECT_EQ(bytes.at("kv=1"), 2 * 2 * 1 * 8 * 4);
  EXPECT_EQ(bytes.at("kv=1 hd=64"), bytes.at("kv=8"));
  ex::ExperimentOptions pilot = test_stage();
  pilot.stage = ex::Stage::pilot;
  const ex::Experiment p = ex::make_kv_capacity(pilot);
  EXPECT_EQ(p.cells.front().config.task.at("split"), "dev");
  EXPECT_FALSE(p.at_final);  // the pilot picks learning rates only
  EXPECT_TRUE(e.at_final);
}

TEST(KvCapacity, GateFailsWithoutALearnedMha) {
  const ex::Experiment e = ex::make_kv_capacity(test_stage());
  HandMade h{.cells = {{"kv=8", kGood}}, .pilot_mha = 0.85};
  EXPECT_EQ(price(e, h), ex::Verdict::not_learned);
  EXPECT_EQ(recovery(e, h), ex::Verdict::not_learned);
  h = {.cells = {{"kv=8", {0.95, 0.80, 0.85, 0.90, 0.88}}}};  // test mean 0.876
  EXPECT_EQ(price(e, h), ex::Verdict::not_learned);
}

TEST(KvCapacity, PriceOfSharingFollowsTheRule) {
  const ex::Experiment e = ex::make_kv_capacity(test_stage());
  // kv 8 beats kv 1, kv 2 below kv 8: confirmed.
  EXPECT_EQ(price(e, {.cells = {{"kv=8", kGood}, {"kv=1", kPoor}, {"kv=2", kPoor}}}),
            ex::Verdict::confirmed);
  // kv 2 beating kv 8 (impossible to explain by capacity) blocks it: not shown.
  const Values better = {1.0, 1.0, 1.0, 1.0, 1.0}, good = {0.95, 0.92, 0.94, 0.93, 0.94};
  EXPECT_EQ(price(e, {.cells = {{"kv=8", good}, {"kv=1", kPoor}, {"kv=2", better}}}),
            ex::Verdict::not_shown);
  // kv 1 equivalent to kv 8, or better: refuted.
  EXPECT_EQ(price(e, {.cells = {{"kv=8", kGood}, {"kv=1", kNearGood}}}), ex::Verdict::refuted);
  EXPECT_EQ(price(e, {.cells = {{"kv=8", good}, {"kv=1", better}}}), ex::Verdict::refuted);
  // A difference inside the noise: not shown.
  EXPECT_EQ(price(e, {.cells = {{"kv=8", kGood}, {"kv=1", {0.99, 0.90, 1.0, 0.93, 0.97}}}}),
            ex::Verdict::not_shown);
  const auto v = judge(e, {.cells = {{"kv=8", kGood}, {"kv=1", kPoor}}}).at(0);
  EXPECT_TRUE(v.numbers.contains("equal_kv_bytes_vs_kv8"));
}

TEST(KvCapacity, UptrainingRecoversFollowsTheRule) {
  const ex::Experiment e = ex::make_kv_capacity(test_stage());
  const std::map<std::string, Values> cells = {{"kv=8", kGood}};
  // Uptrained equivalent to control A, scratch kv 2 poor: confirmed.
  EXPECT_EQ(recovery(e, {.cells = cells, .control_a = kGood, .uptrained = kNearGood}),
            ex::Verdict::confirmed);
  // ... but a scratch kv 2 model better than the uptrained one: not shown.
  const Values fair = {0.95, 0.94, 0.96, 0.95, 0.94};
  EXPECT_EQ(
      recovery(e,
               {.cells = {{"kv=8", kGood}, {"kv=2", kGood}}, .control_a = fair, .uptrained = fair}),
      ex::Verdict::not_shown);
  // Control A better than uptrained: refuted.
  EXPECT_EQ(recovery(e, {.cells = cells, .control_a = kGood, .uptrained = kPoor}),
            ex::Verdict::refuted);
  // Inside the noise: not shown.
  EXPECT_EQ(
      recovery(e, {.cells = cells, .control_a = kGood, .uptrained = {0.99, 0.90, 1.0, 0.93, 0.97}}),
      ex::Verdict::not_shown);
}

// Rung 2 (the long budget) is v1's grid with 256 keys: every other field of every cell is v1's.
TEST(KvCapacity, LongBudgetIsRungTwo) {
  const ex::Experiment v1 = ex::make_kv_capacity(test_stage());
  const ex::Experiment e = ex::make_kv_capacity_long(test_stage());
  EXPECT_EQ(e.name, "kv-capacity-long");
  EXPECT_EQ(e.prereg, "bench/prereg/kv-capacity-long-v1.md");
  EXPECT_EQ(e.budget_seconds, 0);
  EXPECT_NE(e.budget.find("256 keys"), std::string::npos) << e.budget;
  EXPECT_NE(e.budget.find("seeds 701-705"), std::string::npos) << e.budget;
  ASSERT_EQ(e.cells.size(), v1.cells.size());
  for (std::size_t i = 0; i < e.cells.size(); ++i) {
    EXPECT_EQ(e.cells[i].config.task.at("keys"), 256);
    train::TrainConfig same = e.cells[i].config;
    same.task["keys"] = 64;
    EXPECT_EQ(train::to_json(same), train::to_json(v1.cells[i].config)) << e.cells[i].id;
  }
  EXPECT_EQ(ex::make_kv_capacity_long({}).cells.front().config.steps, 14000);
  // Its rules cite its own registration, in v1's words.
  const auto v = judge(e, {.cells = {{"kv=8", kGood}, {"kv=1", kPoor}}});
  EXPECT_EQ(v.at(0).verdict, ex::Verdict::confirmed);
  EXPECT_TRUE(
      v.at(0).rule.starts_with("bench/prereg/kv-capacity-long-v1.md: primary kv 8 vs "
                               "kv 1, paired test accuracy (95 % t-interval, floor 0.02)"))
      << v.at(0).rule;
}

// The char-LM arm: E-C's h = 8 cell with fewer K/V heads, at 4N; its rules read test loss (lower
// is better, floor 0.01 nats) and its gate is E-C's (bigram - 0.25).
TEST(KvCapacity, CharLmArmJudgesTestLoss) {
  const ex::Experiment e = ex::make_kv_capacity_charlm_long(test_stage());
  EXPECT_EQ(e.name, "kv-capacity-charlm-long");
  EXPECT_EQ(e.prereg, "bench/prereg/kv-capacity-charlm-long-v1.md");
  EXPECT_EQ(e.metric_kind, ex::MetricKind::loss);
  ASSERT_EQ(e.cells.size(), 3u);  // kv 8, 2, 1
  const ex::Experiment ec = ex::make_head_sweep_tuned(test_stage());
  for (const ex::Cell& c : e.cells) {
    EXPECT_EQ(c.config.model.kv_heads, c.labels.at("kv_heads").get<std::int64_t>());
    train::TrainConfig as_ec = c.config;
    as_ec.model.kv_heads = 0;  // E-C's cell leaves it at "one per query head"
    for (const ex::Cell& h8 : ec.cells)
      if (h8.id == "h=8") EXPECT_EQ(train::to_json(as_ec), train::to_json(h8.config)) << c.id;
  }
  EXPECT_EQ(ex::make_kv_capacity_charlm_long({}).cells.front().config.steps, 9600);
  EXPECT_TRUE(e.at_final);

  const Values good = {1.30, 1.31, 1.29, 1.32, 1.30}, near = {1.302, 1.309, 1.293, 1.318, 1.301},
               worse = {1.40, 1.42, 1.41, 1.39, 1.40};
  auto verdicts = [&](HandMade h) {
    h.key = "validation_loss";
    if (h.bigram == 0) h.bigram = 2.5;
    for (const char* c : {"kv=8", "kv=2", "kv=1"})
      if (!h.cells.count(c)) h.cells[c] = good;
    return judge(e, h);
  };
  // The gate: the MHA cell must reach bigram - 0.25.
  auto v = verdicts({.cells = {{"kv=8", good}}, .bigram = 1.5});
  EXPECT_EQ(v.at(0).verdict, ex::Verdict::not_learned);
  EXPECT_EQ(v.at(1).verdict, ex::Verdict::not_learned);
  // Price of sharing: lower loss at kv 8 confirms; kv 1 equivalent refutes.
  v = verdicts({.cells = {{"kv=8", good}, {"kv=1", worse}}, .control_a = good, .uptrained = near});
  EXPECT_EQ(v.at(0).verdict, ex::Verdict::confirmed) << v.at(0).reason;
  EXPECT_FALSE(v.at(0).numbers.contains("equal_kv_bytes_vs_kv8"));
  EXPECT_NE(v.at(0).rule.find("paired test loss (95 % t-interval, floor 0.01 nats)"),
            std::string::npos);
  v = verdicts({.cells = {{"kv=8", good}, {"kv=1", near}}, .control_a = good, .uptrained = near});
  EXPECT_EQ(v.at(0).verdict, ex::Verdict::refuted);
  // Uptraining: equivalent to control A confirms; control A lower refutes.
  EXPECT_EQ(v.at(1).verdict, ex::Verdict::confirmed) << v.at(1).reason;
  v = verdicts({.cells = {{"kv=8", good}}, .control_a = good, .uptrained = worse});
  EXPECT_EQ(v.at(1).verdict, ex::Verdict::refuted);
  // Scratch kv 2 better than the uptrained model blocks "recovers".
  v = verdicts({.cells = {{"kv=8", good}, {"kv=2", good}}, .control_a = worse, .uptrained = worse});
  EXPECT_EQ(v.at(1).verdict, ex::Verdict::not_shown) << v.at(1).reason;
}

// The helper continues a model exactly as given: with no steps it is the model it was handed.
TEST(KvCapacity, UptrainingStartsFromTheConvertedModel) {
  ex::ExperimentOptions o = test_stage();
  const ex::Experiment e = ex::make_kv_capacity(o);
  train::TrainConfig c = e.cells.front().config;
  c.steps = 30;
  Context ctx({.threads = 1});
  train::Trainer trainer(ctx, c);
  for (int s = 0; s < 30; ++s) trainer.train_step();
  const model::Weights pooled =
      model::convert_kv_heads(train::to_weights(trainer.model()), 2, KvConvertMethod::mean);
  train::Model converted = train::from_weights(pooled);
  const train::TaskMetrics direct = ex::evaluate(ctx, converted, trainer.task(), c.batch, 0);
  const train::TaskMetrics none =
      ex::uptrain_and_evaluate(ctx, c, pooled, 2, {.steps = 0, .peak_lr = 3e-4, .min_lr = 3e-5});
  EXPECT_EQ(none.loss, direct.loss);
  EXPECT_EQ(none.accuracy, direct.accuracy);
  const train::TaskMetrics some =
      ex::uptrain_and_evaluate(ctx, c, pooled, 2, {.steps = 20, .peak_lr = 3e-3, .min_lr = 3e-4});
  EXPECT_NE(some.loss, direct.loss);
  EXPECT_TRUE(std::isfinite(some.loss));
}

TEST(KvCapacity, QuickRunCarriesTheConversion) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("hc-ef-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const CliResult r =
      run_cli("experiment kv-capacity --quick --threads 2 --quiet --json-out '" +
              (dir / "r.json").string() + "' --out '" + (dir / "r.html").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(cli_runner_detail::slurp(dir / "r.json"));
  EXPECT_EQ(j.at("prereg").at("path"), "bench/prereg/kv-capacity-v1.md");
  EXPECT_EQ(j.at("cells").size(), 2u);
  EXPECT_EQ(j.at("task").at("split"), "test");
  ASSERT_EQ(j.at("verdicts").size(), 2u);
  EXPECT_EQ(j.at("verdicts").at(0).at("verdict"), "task not learned");
  const json& m = j.at("runs").at(0).at("measures").at("final");
  EXPECT_EQ(m.at("uptrain_steps"), 5);
  EXPECT_EQ(m.at("conversion").size(), 2u);
  EXPECT_TRUE(m.at("control_a").contains("validation_accuracy"));
  EXPECT_TRUE(fs::file_size(dir / "r.html") > 1000);
  fs::remove_all(dir);
}

// The char-LM arm through the CLI (`--budget long` finds it): conversion measures in nats.
TEST(KvCapacity, CharLmArmQuickRun) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("hc-ef-lm-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const CliResult r = run_cli(
      "experiment kv-capacity-charlm --budget long --quick --threads 2 --quiet --json-out '" +
      (dir / "r.json").string() + "' --out '" + (dir / "r.html").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(cli_runner_detail::slurp(dir / "r.json"));
  EXPECT_EQ(j.at("prereg").at("path"), "bench/prereg/kv-capacity-charlm-long-v1.md");
  EXPECT_EQ(j.at("cells").size(), 2u);
  ASSERT_EQ(j.at("verdicts").size(), 2u);
  const json& m = j.at("runs").at(0).at("measures").at("final");
  EXPECT_EQ(m.at("conversion").size(), 2u);
  const double control_a = m.at("control_a").at("validation_loss").get<double>();
  EXPECT_TRUE(std::isfinite(control_a) && control_a > 0);
  EXPECT_TRUE(fs::file_size(dir / "r.html") > 1000);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace headcount::testing
