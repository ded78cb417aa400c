// Training with the heads (and the FFN) over ranks against one process. Every rank also runs
// the one process (the models are tiny). Each step starts both from the same state: the one
// process's checkpoint, resumed and split (so the split of AdamW's moments is exercised too).
// Run by CTest for 1 to 4 ranks: the configurations' kv_heads (12) and d_ff (48) divide by
// each.
//
// The bound. A heads-parallel rank computes each head whole; what changes is the grouping of
// the sums over heads (x·W_o) and FFN columns (g·W_down) in the forward and of the sums into
// dL/dh in the backward: rank parts, then the all-reduce. By backward error analysis (Higham
// 3.1) a sum of K products rounded in any grouping is the exact sum of the products with each
// weight perturbed by a relative theta, |theta| <= gamma_K: both runs are exact runs of
// weights within gamma_K of the given ones. The loss change such perturbations cause is
// measured on the one process: W_o and W_down scaled element-wise by (1 +- gamma_K) with
// random signs, three draws; the bound is 4x the largest change (the factor and the draws as
// the PyTorch parity fixture's, tests/test_train_parity.cpp) + the double sum's own gamma_N.
// A head or FFN column on the wrong rank, taken twice or missed changes the loss by orders of
// magnitude more.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "headcount/cost.h"
#include "headcount/distributed.h"
#include "headcount/error.h"
#include "headcount/train/trainer.h"
#include "mpi_testing.h"

namespace headcount::testing {
namespace {

namespace hd = headcount::distributed;
namespace fs = std::filesystem;
using i64 = std::int64_t;

train::TrainConfig base(i64 steps) {
  train::TrainConfig c;
  c.task = {{"name", "copy"}, {"seq_len", 12}, {"alphabet", 8}};
  c.optim = {.lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 2, .weight_decay = 0.01};
  c.steps = steps;
  c.batch = 5;
  c.seed = 11;
  c.log_every = 0;
  return c;
}

// Pre-LN GELU with every bias: 12 heads of 4 over d_model 32.
train::TrainConfig gpt(i64 steps) {
  train::TrainConfig c = base(steps);
  c.model = {.layers = 2, .d_model = 32, .heads = 12, .head_dim = 4, .d_ff = 48};
  return c;
}

// The Llama pieces with grouped queries: 24 query heads over 12 K/V heads.
train::TrainConfig llama(i64 steps) {
  train::TrainConfig c = base(steps);
  c.model = {.layers = 2, .d_model = 32, .heads = 24, .kv_heads = 12, .head_dim = 4, .d_ff = 48};
  c.model.rms_norm = true;
  c.model.rope_base = 10000;
  c.model.swiglu = true;
  c.model.biases = false;
  c.model.tied_head = true;
  return c;
}

// Post-LN (BERT's placement).
train::TrainConfig post_ln(i64 steps) {
  train::TrainConfig c = gpt(steps);
  c.model.norm = train::NormPlacement::post;
  return c;
}

// A directory of this rank's own under the temporary directory.
fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() /
               ("headcount-heads-train-" + std::to_string(getpid()) + "-" + name);
  fs::create_directories(p);
  return p;
}

bool is_block_part(const std::string& name) {
  return name.find(".attn.") != std::string::npos || name.find(".ffn.") != std::string::npos;
}

// The loss change of W_o and W_down perturbed as a regrouped sum may perturb them (file
// comment), the largest of three draws, on `model` (restored after).
double regrouping_loss_change(Context& ctx, train::Model& model, const train::Batch& batch) {
  const train::ModelConfig& c = model.config();
  const double loss = model.forward(ctx, batch, nullptr);
  double largest = 0;
  std::mt19937_64 rng(5);
  for (int draw = 0; draw < 3; ++draw) {
    std::vector<std::vector<float>> saved;
    for (train::Parameter& p : model.parameters()) {
      const bool w_o = p.name.ends_with("attn.w_o"), w_down = p.name.ends_with("ffn.w_down");
      if (!w_o && !w_down) continue;
      const double g = gamma_n(static_cast<double>(w_o ? c.heads * c.head_dim : c.d_ff));
      float* v = p.value.data<float>();
      saved.emplace_back(v, v + p.value.numel());
      for (i64 i = 0; i < p.value.numel(); ++i)
        v[i] = static_cast<float>(v[i] * (1.0 + ((rng() & 1) ? g : -g)));
    }
    largest = std::max(largest, std::fabs(model.forward(ctx, batch, nullptr) - loss));
    std::size_t k = 0;
    for (train::Parameter& p : model.parameters())
      if (p.name.ends_with("attn.w_o") || p.name.ends_with("ffn.w_down"))
        std::copy(saved[k].begin(), saved[k].end(), p.value.data<float>()), ++k;
  }
  return largest;
}

// Steps of the one process and of the heads-parallel run from the same state, each step.
void every_step_matches_one_process(const train::TrainConfig& c) {
  Context ctx({.threads = 1});
  const int P = world_size();
  train::Trainer one(ctx, c);
  const fs::path dir = scratch("state");
  hd::CommStats stats;
  double largest = 0, smallest_bound = 1e300;  // printed: docs/distributed.md quotes them
  for (i64 s = 0; s < c.steps; ++s) {
    one.save(dir.string());  // every rank writes its own copy of the same state
    std::unique_ptr<train::Trainer> split = train::Trainer::resume(ctx, dir.string());
    hd::make_heads_parallel(MPI_COMM_WORLD, *split, {.timeout_seconds = 60}, &stats);
    ASSERT_TRUE(split->tensor_parallel());
    EXPECT_EQ(split->parameter_count(), one.model().parameter_count());
    const train::Batch batch = one.task().train_batch(c.seed, s, c.batch);
    const double envelope = regrouping_loss_change(ctx, one.model(), batch);
    const double l1 = one.train_step(), lp = split->train_step();
    const double N = static_cast<double>(c.batch * one.task().seq_len());
    const double bound = 4 * envelope + gamma_d(N) * std::fabs(l1);
    largest = std::max(largest, std::fabs(lp - l1));
    smallest_bound = std::min(smallest_bound, bound);
    if (P == 1)
      EXPECT_EQ(lp, l1) << "step " << s;
    else
      EXPECT_LE(std::fabs(lp - l1), bound)
          << "step " << s << ": " << lp << " vs " << l1 << " (envelope " << envelope << ")";
    EXPECT_TRUE(same_on_every_rank(split->model().parameters(),
                                   [](const std::string& name) { return !is_block_part(name); }))
        << "step " << s;
    if (P == 1)  // one rank holds the whole model: the step is bitwise the one process's
      for (std::size_t i = 0; i < one.model().parameters().size(); ++i)
        EXPECT_EQ(
            0, std::memcmp(one.model().parameters()[i].value.data<const float>(),
                           split->model().parameters()[i].value.data<const float>(),
                           static_cast<std::size_t>(one.model().parameters()[i].value.numel()) * 4))
            << "step " << s << " " << one.model().parameters()[i].name;
  }
  if (world_rank() == 0)
    std::printf("heads over %d ranks: largest loss difference %.3g, smallest bound %.3g\n", P,
                largest, smallest_bound);
  // Handed to MPI per step: 4 sums of [N, d_model] floats a block (2 forward, 2 backward; none
  // on one rank, whose outputs are whole) and the norm's double.
  const i64 N = c.batch * one.task().seq_len();
  const CommunicationCost cost = communication_cost({.d_model = c.model.d_model,
                                                     .heads = c.model.heads,
                                                     .kv_heads = c.model.kv_heads,
                                                     .head_dim = c.model.head_dim,
                                                     .seq_len = one.task().seq_len(),
                                                     .batch = c.batch,
                                                     .d_ff = c.model.d_ff},
                                                    P);
  ASSERT_TRUE(cost.block_possible);
  EXPECT_EQ(cost.block_train_step_bytes, P == 1 ? 0 : 4 * N * c.model.d_model * 4);
  EXPECT_EQ(stats.bytes_sent, c.steps * (c.model.layers * cost.block_train_step_bytes + 8));
  fs::remove_all(dir);
}

TEST(HeadsParallelTraining, PreLayerNormGeluStepsMatchOneProcess) {
  every_step_matches_one_process(gpt(4));
}
TEST(HeadsParallelTraining, LlamaGroupedQueryStepsMatchOneProcess) {
  every_step_matches_one_process(llama(4));
}
TEST(HeadsParallelTraining, PostLayerNormStepsMatchOneProcess) {
  every_step_matches_one_process(post_ln(3));
}

// The checkpoint of a heads-parallel run holds the whole model: a one-process trainer resumed
// from it evaluates as the split run does (within the bound), and at one rank bitwise.
TEST(HeadsParallelTraining, CheckpointHoldsTheWholeModel) {
  const train::TrainConfig c = gpt(3);
  Context ctx({.threads = 1});
  train::Trainer split(ctx, c);
  hd::make_heads_parallel(MPI_COMM_WORLD, split, {.timeout_seconds = 60});
  for (i64 s = 0; s < c.steps; ++s) split.train_step();
  // One directory per job (rank 0's pid): CTest runs the 1- to 4-rank jobs side by side.
  int job = getpid();
  MPI_Bcast(&job, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const fs::path dir =
      fs::temp_directory_path() / ("headcount-heads-train-checkpoint-" + std::to_string(job));
  if (world_rank() == 0) fs::remove_all(dir);
  split.save(dir.string());  // collective; rank 0 writes
  MPI_Barrier(MPI_COMM_WORLD);
  const train::TaskMetrics split_metrics = split.evaluate();
  std::unique_ptr<train::Trainer> whole = train::Trainer::resume(ctx, dir.string());
  EXPECT_EQ(whole->step(), c.steps);
  EXPECT_EQ(whole->losses(), split.losses());
  const train::Batch batch = whole->task().validation_batch(0, c.batch);
  const double envelope = regrouping_loss_change(ctx, whole->model(), batch);
  const train::TaskMetrics whole_metrics = whole->evaluate();
  if (world_size() == 1)
    EXPECT_EQ(whole_metrics.loss, split_metrics.loss);
  else
    EXPECT_LE(std::fabs(whole_metrics.loss - split_metrics.loss), 4 * envelope + 1e-12)
        << whole_metrics.loss << " vs " << split_metrics.loss;
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(dir);
}

// Bad counts end every rank before any work, naming the count.
TEST(HeadsParallelTraining, RanksMustDivideKvHeadsAndDff) {
  train::TrainConfig c = gpt(1);
  c.model.heads = c.model.kv_heads = 2;
  c.model.head_dim = 16;
  Context ctx({.threads = 1});
  train::Trainer t(ctx, c);
  if (world_size() <= 2) {
    hd::make_heads_parallel(MPI_COMM_WORLD, t);
    EXPECT_TRUE(t.tensor_parallel());
    return;
  }
  try {
    hd::make_heads_parallel(MPI_COMM_WORLD, t);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_heads = 2"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(t.tensor_parallel());
}

}  // namespace
}  // namespace headcount::testing
