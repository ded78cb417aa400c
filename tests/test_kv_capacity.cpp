// The claims protocol's E-F (kv-capacity): its judge on hand-made per-seed test accuracies (the
// gate's two halves and every branch of both rules), the grid's KV bytes, the uptraining helper's
// plumbing, and a quick run through the CLI that carries the conversion measures.
#include <gtest/gtest.h>
#include <unistd.h>

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
};

std::vector<ex::ClaimVerdict> judge(const ex::Experiment& e, const HandMade& h) {
  ex::ExperimentResult r{.experiment = &e};
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
        run.measures["final"] = {{"control_a", {{"validation_accuracy", h.control_a[s]}}},
                                 {"conversion",
                                  {{{"kv_heads", 2},
                                    {"converted", {{"validation_accuracy", h.converted[s]}}},
                                    {"uptrained", {{"validation_accuracy", h.uptrained[s]}}}},
                                   {{"kv_heads", 1},
                                    {"converted", {{"validation_accuracy", h.converted[s]}}},
                                    {"uptrained", {{"validation_accuracy", h.uptrained[s]}}}}}}};
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

}  // namespace
}  // namespace headcount::testing
