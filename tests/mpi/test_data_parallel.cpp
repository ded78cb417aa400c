// Data over ranks: the row split; data-parallel training against one process on the global
// batch (every rank also runs the one process: the model is tiny); the sentence split of embed
// against one process (bitwise). Run by CTest for 1 to 4 ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "headcount/distributed.h"
#include "headcount/error.h"
#include "headcount/train/trainer.h"
#include "mpi_testing.h"

namespace headcount::testing {
namespace {

namespace hd = headcount::distributed;
using i64 = std::int64_t;

// A tiny decoder on copy; batch 7, so 2, 3 and 4 ranks get uneven shards.
train::TrainConfig tiny_copy(i64 steps) {
  train::TrainConfig c;
  c.task = {{"name", "copy"}, {"seq_len", 16}, {"alphabet", 8}};
  c.model = {.layers = 2, .d_model = 32, .heads = 2, .d_ff = 64};
  c.optim = {.lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 2, .weight_decay = 0.01};
  c.steps = steps;
  c.batch = 7;
  c.seed = 7;
  c.log_every = 0;
  return c;
}

train::Batch rows_of(const train::Batch& b, i64 begin, i64 end) {
  train::Batch out{.batch = end - begin, .seq_len = b.seq_len, .tokens = {}, .targets = {}};
  out.tokens.assign(b.tokens.begin() + begin * b.seq_len, b.tokens.begin() + end * b.seq_len);
  out.targets.assign(b.targets.begin() + begin * b.seq_len, b.targets.begin() + end * b.seq_len);
  return out;
}

TEST(DataParallel, ShardRowsCoverTheRowsInOrder) {
  for (i64 rows : {0, 1, 5, 7, 12})
    for (int ranks = 1; ranks <= 5; ++ranks) {
      i64 next = 0;
      for (int r = 0; r < ranks; ++r) {
        const hd::RowShard s = hd::shard_rows(rows, ranks, r);
        EXPECT_EQ(s.begin, next);
        EXPECT_TRUE(s.size() == rows / ranks || s.size() == rows / ranks + 1);
        next = s.end;
      }
      EXPECT_EQ(next, rows);
    }
}

// The premise of the bounds: a row's logits (so its loss and its dlogits) do not depend on the
// other rows of its batch: this rank's rows computed alone are bitwise the global batch's.
TEST(DataParallel, RowsComputeTheSameAloneAsInTheGlobalBatch) {
  const train::TrainConfig c = tiny_copy(1);
  Context ctx({.threads = 1});
  train::Trainer t(ctx, c);
  const train::Batch global = t.task().train_batch(c.seed, 0, c.batch);
  const hd::RowShard mine = hd::shard_rows(c.batch, world_size(), world_rank());
  const i64 V = t.model().config().vocab, T = global.seq_len;
  std::vector<float> all(static_cast<std::size_t>(c.batch * T * V)),
      part(static_cast<std::size_t>(mine.size() * T * V));
  t.model().forward(ctx, global, all.data());
  t.model().forward(ctx, rows_of(global, mine.begin, mine.end), part.data());
  EXPECT_EQ(0, std::memcmp(part.data(), all.data() + mine.begin * T * V, part.size() * 4));
}

// The all-reduce in buckets: each element is the sum of the ranks' gradients. Against the sum
// in float64 of every rank's gradient (gathered): any order of summing P floats errs by at most
// gamma_{P-1} * sum |g_r| (Higham 4.2), so a bucket misplaced, dropped or summed twice fails
// (an error of order |g|). With one rank: bitwise. Buckets of 1000 bytes: some hold one
// parameter, others several small ones (LayerNorm and bias vectors of 32 values).
TEST(DataParallel, GradientBucketsSumTheRanksGradients) {
  const train::TrainConfig c = tiny_copy(1);
  Context ctx({.threads = 1});
  train::Trainer t(ctx, c);
  const train::Batch global = t.task().train_batch(c.seed, 0, c.batch);
  const int P = world_size();
  const hd::RowShard mine = hd::shard_rows(c.batch, P, world_rank());
  i64 scored = 0;
  for (std::int32_t target : global.targets) scored += target >= 0 ? 1 : 0;
  std::vector<train::Parameter>& params = t.model().parameters();
  double loss =
      t.model()
          .forward_backward(ctx, rows_of(global, mine.begin, mine.end), {.loss_normalizer = scored})
          .loss;
  std::vector<float> flat;
  for (const train::Parameter& p : params)
    flat.insert(flat.end(), p.grad.data<const float>(),
                p.grad.data<const float>() + p.grad.numel());
  std::vector<float> every(flat.size() * static_cast<std::size_t>(P));
  MPI_Allgather(flat.data(), static_cast<int>(flat.size()), MPI_FLOAT, every.data(),
                static_cast<int>(flat.size()), MPI_FLOAT, MPI_COMM_WORLD);
  std::vector<double> losses(static_cast<std::size_t>(P));
  MPI_Allgather(&loss, 1, MPI_DOUBLE, losses.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD);

  hd::CommStats stats;
  hd::allreduce_gradients(MPI_COMM_WORLD, params, &loss, "the test's all-reduce",
                          {.bucket_bytes = 1000, .watchdog = {.timeout_seconds = 60}}, &stats);
  std::size_t at = 0, bad = 0;
  for (const train::Parameter& p : params)
    for (i64 i = 0; i < p.grad.numel(); ++i, ++at) {
      double sum = 0, abs = 0;
      for (int r = 0; r < P; ++r) {
        const double g = every[static_cast<std::size_t>(r) * flat.size() + at];
        sum += g;
        abs += std::fabs(g);
      }
      const double got = p.grad.data<const float>()[i];
      // Rounding the float64 sum to compare: the result is a float, so half an ulp more.
      const double bound = gamma_n(P - 1) * abs + kU * std::fabs(sum);
      if (P == 1 ? got != flat[at] : std::fabs(got - sum) > bound) {
        if (++bad <= 5)
          ADD_FAILURE() << p.name << "[" << i << "]: " << got << " vs " << sum << " (bound "
                        << bound << ")";
      }
    }
  EXPECT_EQ(bad, 0u);
  double loss_sum = 0, loss_abs = 0;
  for (double l : losses) {
    loss_sum += l;
    loss_abs += std::fabs(l);
  }
  EXPECT_LE(std::fabs(loss - loss_sum), gamma_d(2 * P) * loss_abs);
  // Handed to MPI: every gradient value once, and the loss.
  EXPECT_EQ(stats.bytes_sent, static_cast<i64>(flat.size()) * 4 + 8);
}

// Each step of a data-parallel run against one process on the same parameters and the global
// batch. Before each step the one-process trainer takes the data-parallel parameters, so each
// step is compared from the same state. The loss: one process sums the N = batch * seq_len
// row losses (each >= 0, bitwise the same on both sides by the premise above) in double in row
// order, then multiplies by 1/S; a rank sums its N_r <= N rows, multiplies by the same 1/S, and
// the all-reduce sums P such doubles. Each is within gamma_{N-1} resp. gamma_{N_r + P} (one
// more rounding for the product) of the exact sum times 1/S, and the terms are positive, so
//   |loss_P - loss_1| <= (gamma_N + gamma_{N + P + 1}) * loss_1 * (1 + gamma_N)
// in double (u = 2^-53). A row taken twice or missed changes the loss by about its share,
// loss / batch: far outside. After each step every rank holds the same parameter bits.
TEST(DataParallel, EveryStepsLossEqualsOneProcessOnTheGlobalBatch) {
  constexpr i64 kSteps = 4;
  const train::TrainConfig c = tiny_copy(kSteps);
  Context ctx({.threads = 1});
  train::Trainer one(ctx, c), dp(ctx, c);
  hd::CommStats stats;
  hd::make_data_parallel(MPI_COMM_WORLD, dp,
                         {.bucket_bytes = 4096, .watchdog = {.timeout_seconds = 60}}, &stats);
  ASSERT_NE(dp.replica(), nullptr);
  EXPECT_EQ(dp.replica()->writer, world_rank() == 0);
  const double N = static_cast<double>(c.batch * one.task().seq_len());
  const int P = world_size();
  for (i64 s = 0; s < kSteps; ++s) {
    for (std::size_t i = 0; i < one.model().parameters().size(); ++i) {
      const Tensor& from = dp.model().parameters()[i].value;
      std::memcpy(one.model().parameters()[i].value.data<float>(), from.data<const float>(),
                  static_cast<std::size_t>(from.numel()) * 4);
    }
    const double l1 = one.train_step(), lp = dp.train_step();
    const double bound = (gamma_d(N) + gamma_d(N + P + 1)) * l1 * (1 + gamma_d(N));
    if (P == 1)
      EXPECT_EQ(lp, l1) << "step " << s;
    else
      EXPECT_LE(std::fabs(lp - l1), bound) << "step " << s << ": " << lp << " vs " << l1;
    EXPECT_TRUE(same_on_every_rank(dp.model().parameters())) << "step " << s;
    if (P == 1) {  // one rank: the whole step, so the next parameters, are bitwise one process's
      for (std::size_t i = 0; i < one.model().parameters().size(); ++i)
        EXPECT_EQ(
            0, std::memcmp(one.model().parameters()[i].value.data<const float>(),
                           dp.model().parameters()[i].value.data<const float>(),
                           static_cast<std::size_t>(one.model().parameters()[i].value.numel()) * 4))
            << "step " << s << " " << one.model().parameters()[i].name;
    }
  }
  // Handed to MPI per step: every gradient value once, and the loss.
  EXPECT_EQ(stats.bytes_sent, kSteps * (dp.model().parameter_count() * 4 + 8));
}

TEST(DataParallel, MoreRanksThanRowsIsAnErrorOnEveryRank) {
  train::TrainConfig c = tiny_copy(1);
  c.batch = 1;
  Context ctx({.threads = 1});
  train::Trainer t(ctx, c);
  if (world_size() == 1) {
    hd::make_data_parallel(MPI_COMM_WORLD, t);
    EXPECT_NE(t.replica(), nullptr);
    return;
  }
  try {
    hd::make_data_parallel(MPI_COMM_WORLD, t);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ranks"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("batch = 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.replica(), nullptr);
}

// Sentences over ranks: bitwise the one process's embeddings, in input order, including ranks
// with no sentence (2 sentences over 3 or 4 ranks).
TEST(DataParallel, EmbedSentencesIsBitwiseOneProcess) {
  if (!std::filesystem::exists(std::filesystem::path(default_model_dir()) / "model.safetensors"))
    GTEST_SKIP() << "all-MiniLM-L6-v2 not found in " << default_model_dir()
                 << " (run scripts/setup.sh)";
  const BertEncoder encoder = BertEncoder::load(default_model_dir());
  const std::vector<std::string> texts = {
      "The cat sat on the mat.",
      "A much longer sentence, with commas, clauses and a number or two (42, 1984), so that "
      "its batch is padded differently from the short ones.",
      "Short.",
      "Attention is all you need.",
      "Heads are slices of one budget.",
      "",
      "Ring attention passes key and value blocks around the ranks.",
      "MPI",
      "Embeddings in input order, written by rank 0.",
      "Le chat est assis sur le tapis.",
      "One more to make eleven."};
  Context ctx({.threads = 1});
  for (const std::size_t count : {texts.size(), std::size_t{2}}) {
    const std::vector<std::string> some(texts.begin(), texts.begin() + static_cast<long>(count));
    hd::CommStats stats;
    const Tensor got = hd::embed_sentences(MPI_COMM_WORLD, ctx, encoder, some, {.batch_size = 3},
                                           {.timeout_seconds = 60}, &stats);
    if (world_rank() != 0) {
      EXPECT_TRUE(got.empty());
      continue;
    }
    const Tensor want = encoder.embed(ctx, some, {.batch_size = 32});
    ASSERT_EQ(got.numel(), want.numel());
    EXPECT_EQ(0, std::memcmp(got.data<const float>(), want.data<const float>(),
                             static_cast<std::size_t>(want.numel()) * 4))
        << count << " sentences";
    EXPECT_EQ(stats.bytes_received,
              (static_cast<i64>(count) -
               hd::shard_rows(static_cast<i64>(count), world_size(), 0).size()) *
                  encoder.dim() * 4);
  }
}

}  // namespace
}  // namespace headcount::testing
