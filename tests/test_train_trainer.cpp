// The training loop: a tiny model learns the copy (induction) task, a resumed run continues
// bitwise identically, the data order is a function of (seed, step), and a warm step
// reallocates no model buffer or context memory.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "expect_error.h"
#include "headcount/train/trainer.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("headcount_train_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  return dir;
}

train::TrainConfig tiny_copy(std::int64_t steps) {
  train::TrainConfig c;
  c.task = {{"name", "copy"}, {"seq_len", 16}, {"alphabet", 8}};
  c.model = {.layers = 2, .d_model = 32, .heads = 2, .d_ff = 64};
  c.optim = {.lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 20, .weight_decay = 0.01};
  c.steps = steps;
  c.batch = 16;
  c.seed = 7;
  c.log_every = 0;
  return c;
}

// The rule, stated before the run: a 2-layer, 2-head, d_model 32 decoder trained 500 steps of
// batch 16 on copy (8 random symbols of an alphabet of 8, a separator, the 8 again) predicts
// the repeated symbols with >= 90% validation token accuracy. Chance is 1/8; the first
// repeated symbol is guessable only at chance, so 90% needs the induction mechanism (previous-
// token head + copy head) on the later ones.
TEST(TrainSmoke, TinyModelLearnsCopy) {
  Context ctx({.threads = 2});
  train::Trainer trainer(ctx, tiny_copy(500));
  const train::TaskMetrics before = trainer.evaluate();
  trainer.run("");
  const train::TaskMetrics after = trainer.validation().back().metrics;
  EXPECT_LT(before.accuracy, 0.3);
  EXPECT_GE(after.accuracy, 0.9) << "loss " << after.loss;
  RecordProperty("accuracy", std::to_string(after.accuracy));
  EXPECT_LT(after.loss, before.loss);
  EXPECT_EQ(trainer.step(), 500);
  EXPECT_EQ(trainer.losses().size(), 500u);
}

TEST(TrainResume, ContinuesBitwise) {
  constexpr std::int64_t kHalf = 6;
  Context ctx({.threads = 2});
  train::Trainer straight(ctx, tiny_copy(2 * kHalf));
  straight.run("");

  const fs::path dir = temp_dir("resume");
  {
    train::Trainer first(ctx, tiny_copy(2 * kHalf));
    while (first.step() < kHalf) first.train_step();
    first.save(dir.string());
  }
  std::unique_ptr<train::Trainer> resumed = train::Trainer::resume(ctx, dir.string());
  EXPECT_EQ(resumed->step(), kHalf);
  resumed->run("");
  ASSERT_EQ(resumed->losses().size(), straight.losses().size());
  for (std::size_t i = 0; i < straight.losses().size(); ++i)
    EXPECT_EQ(resumed->losses()[i], straight.losses()[i]) << i;
  const auto& a = straight.model().parameters();
  const auto& b = resumed->model().parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(std::memcmp(a[i].value.data<const float>(), b[i].value.data<const float>(),
                          a[i].value.bytes()),
              0)
        << a[i].name;
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(std::memcmp(straight.optimizer().second_moments()[i].data<const float>(),
                          resumed->optimizer().second_moments()[i].data<const float>(),
                          a[i].value.bytes()),
              0);
  EXPECT_EQ(resumed->state()["curve"], straight.state()["curve"]);
  fs::remove_all(dir);
}

// Every piece of the step owns its summation order (the GEMM: one accumulator per output in
// depth order, layers/gemm.h; column sums and LayerNorm's statistics in fixed row order; the
// attention backward's fixed-order reduction), so the run is a function of the config alone:
// 1, 2 and 3 threads give the same losses and the same bits in every parameter and moment.
// A resumed run may therefore use another thread count.
TEST(TrainResume, BitwiseForAnyThreadCount) {
  auto run = [](int threads) {
    Context ctx({.threads = threads});
    auto trainer = std::make_unique<train::Trainer>(ctx, tiny_copy(5));
    trainer->run("");
    std::vector<std::vector<float>> state;
    for (const auto& p : trainer->model().parameters())
      state.emplace_back(p.value.data<const float>(),
                         p.value.data<const float>() + p.value.numel());
    for (const auto& m : trainer->optimizer().second_moments())
      state.emplace_back(m.data<const float>(), m.data<const float>() + m.numel());
    return std::pair{trainer->losses(), state};
  };
  const auto one = run(1);
  for (int threads : {2, 3}) {
    const auto other = run(threads);
    EXPECT_EQ(other.first, one.first) << threads << " threads";
    EXPECT_TRUE(other.second == one.second) << threads << " threads: parameters or moments differ";
  }
}

TEST(TrainResume, RejectsAMissingOrForeignCheckpoint) {
  Context ctx;
  const fs::path dir = temp_dir("missing");
  expect_error([&] { train::Trainer::resume(ctx, dir.string()); }, {"checkpoint"});
}

TEST(TrainTrainer, SameSeedSameRunOtherSeedOtherRun) {
  Context ctx({.threads = 2});
  train::Trainer a(ctx, tiny_copy(3)), b(ctx, tiny_copy(3));
  train::TrainConfig other = tiny_copy(3);
  other.seed = 8;
  train::Trainer c(ctx, other);
  for (int i = 0; i < 3; ++i) {
    const double la = a.train_step(), lb = b.train_step(), lc = c.train_step();
    EXPECT_EQ(la, lb);
    EXPECT_NE(la, lc);
  }
}

TEST(TrainTrainer, WarmStepAllocatesNoContextMemory) {
  Context ctx({.threads = 2});
  train::Trainer t(ctx, tiny_copy(4));
  t.train_step();
  t.train_step();
  const std::int64_t allocations = ctx.allocations();
  t.train_step();
  t.train_step();
  EXPECT_EQ(ctx.allocations(), allocations);
}

TEST(TrainTrainer, ConfigErrorsNameTheField) {
  Context ctx;
  train::TrainConfig c = tiny_copy(1);
  c.model.causal = false;  // the copy task is causal
  expect_error([&] { train::Trainer t(ctx, c); }, {"model.causal"});
  c = tiny_copy(1);
  c.task = {{"name", "no-such-task"}};
  expect_error([&] { train::Trainer t(ctx, c); }, {"no-such-task"});
  expect_error(
      [] {
        train::train_config_from_json(nlohmann::json{{"task", {{"name", "copy"}}}, {"modle", {}}});
      },
      {"modle"});
  expect_error(
      [] {
        train::train_config_from_json(nlohmann::json{{"model", {{"layers", 2}}}});
      },
      {"task"});
  expect_error(
      [] {
        train::train_config_from_json(
            nlohmann::json{{"task", {{"name", "copy"}}}, {"train", {{"batch", 0}}}});
      },
      {"train.batch"});
  const train::TrainConfig round = train::train_config_from_json(train::to_json(tiny_copy(5)));
  EXPECT_EQ(train::to_json(round), train::to_json(tiny_copy(5)));
}

}  // namespace
}  // namespace headcount::testing
