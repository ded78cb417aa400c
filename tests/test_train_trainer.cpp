// The training loop: a tiny model learns the copy (induction) task, a resumed run continues
// bitwise identically, the data order is a function of (seed, step), and a warm step
// reallocates no model buffer or context memory.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
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

// A data-parallel replica (train::Replica; MPI's side is src/distributed/data_parallel.cpp).
// One replica of every row, with nothing to reduce, is the one-process run bitwise: the global
// normaliser is then the batch's own count.
TEST(TrainReplica, OneReplicaOfEveryRowIsTheOneProcessRun) {
  Context ctx({.threads = 2});
  train::Trainer plain(ctx, tiny_copy(3)), replica(ctx, tiny_copy(3));
  int reductions = 0;
  replica.set_replica({.row_begin = 0,
                       .row_end = 16,
                       .reduce = [&](std::vector<train::Parameter>&, double&) { ++reductions; }});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(plain.train_step(), replica.train_step());
  EXPECT_EQ(reductions, 3);
  for (std::size_t i = 0; i < plain.model().parameters().size(); ++i)
    EXPECT_EQ(
        0, std::memcmp(plain.model().parameters()[i].value.data<const float>(),
                       replica.model().parameters()[i].value.data<const float>(),
                       static_cast<std::size_t>(plain.model().parameters()[i].value.numel()) * 4));
}

// Two replicas in one process, threads and a barrier standing in for MPI (the reduce adds the
// two replicas' gradients and losses, replica 0's first), against one process on the global
// batch from the same parameters, each step. The loss bound is the one derived in
// tests/mpi/test_data_parallel.cpp: (gamma_N + gamma_{N+P+1}) * loss * (1 + gamma_N) in
// double, N = batch * seq_len, P = 2. Both replicas end each step with the same parameters.
TEST(TrainReplica, TwoReplicasMatchOneProcessOnTheGlobalBatch) {
  train::TrainConfig c = tiny_copy(3);
  c.batch = 5;  // rows [0, 3) and [3, 5)
  Context c_one({.threads = 1}), c0({.threads = 1}), c1({.threads = 1});
  train::Trainer one(c_one, c), r0(c0, c), r1(c1, c);
  std::barrier<> sync(2);
  std::vector<float> slot[2];
  double loss_slot[2] = {0, 0};
  auto reduce_for = [&](int me) {
    return [&, me](std::vector<train::Parameter>& params, double& loss) {
      slot[me].clear();
      for (const train::Parameter& p : params)
        slot[me].insert(slot[me].end(), p.grad.data<const float>(),
                        p.grad.data<const float>() + p.grad.numel());
      loss_slot[me] = loss;
      sync.arrive_and_wait();
      std::size_t at = 0;
      for (train::Parameter& p : params)
        for (std::int64_t i = 0; i < p.grad.numel(); ++i, ++at)
          p.grad.data<float>()[i] = slot[0][at] + slot[1][at];
      loss = loss_slot[0] + loss_slot[1];
      sync.arrive_and_wait();  // neither slot is refilled before both are read
    };
  };
  r0.set_replica({.row_begin = 0, .row_end = 3, .reduce = reduce_for(0)});
  r1.set_replica({.row_begin = 3, .row_end = 5, .reduce = reduce_for(1), .writer = false});
  const double u = std::ldexp(1.0, -53), N = static_cast<double>(c.batch * one.task().seq_len());
  auto gamma = [u](double n) { return n * u / (1 - n * u); };
  for (int step = 0; step < 3; ++step) {
    for (std::size_t i = 0; i < one.model().parameters().size(); ++i)
      std::memcpy(one.model().parameters()[i].value.data<float>(),
                  r0.model().parameters()[i].value.data<const float>(),
                  static_cast<std::size_t>(one.model().parameters()[i].value.numel()) * 4);
    const double l1 = one.train_step();
    double lb = 0;
    std::thread other([&] { lb = r1.train_step(); });
    const double la = r0.train_step();
    other.join();
    EXPECT_EQ(la, lb);
    EXPECT_LE(std::fabs(la - l1), (gamma(N) + gamma(N + 3)) * l1 * (1 + gamma(N)))
        << "step " << step << ": " << la << " vs " << l1;
    for (std::size_t i = 0; i < r0.model().parameters().size(); ++i)
      EXPECT_EQ(
          0, std::memcmp(r0.model().parameters()[i].value.data<const float>(),
                         r1.model().parameters()[i].value.data<const float>(),
                         static_cast<std::size_t>(r0.model().parameters()[i].value.numel()) * 4));
  }
}

TEST(TrainReplica, RowsAndReduceAreChecked) {
  Context ctx;
  train::Trainer t(ctx, tiny_copy(1));
  auto none = [](std::vector<train::Parameter>&, double&) {};
  expect_error([&] { t.set_replica({.row_begin = 3, .row_end = 3, .reduce = none}); },
               {"replica rows", "batch = 16", "[3, 3)"});
  expect_error([&] { t.set_replica({.row_begin = 8, .row_end = 17, .reduce = none}); },
               {"replica rows", "[8, 17)"});
  expect_error([&] { t.set_replica({.row_begin = 0, .row_end = 4}); }, {"replica.reduce"});
  EXPECT_EQ(t.replica(), nullptr);
  train::Batch b = t.task().train_batch(1, 0, 2);
  expect_error([&] { t.model().forward_backward(ctx, b, {.loss_normalizer = -1}); },
               {"options.loss_normalizer", "-1"});
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
