// The packed GEMM of the encoder's projections (layers/packed_gemm.h): against a float64
// reference within a bound derived from k, its vectorised erf/GELU against std::erf, and the
// property it exists for: a row's result is bitwise the same alone or inside any m, at any
// position, on 1 or 2 threads, for every instruction set this CPU runs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "expect_error.h"
#include "headcount/context.h"
#include "layers/feed_forward.h"
#include "layers/packed_gemm.h"
#include "layers/task_grid.h"
#include "packed_gemm_testing.h"
#include "simd/tuning.h"

namespace headcount::testing {
namespace {

using layers::GemmEpilogue;
using namespace packed;

// Bound, per element, for y = fl(fl(sum_d x_d·w_d) + b): the kernel accumulates the k products
// one after another into one fp32 accumulator, one rounding per step with FMA (two without, on
// the generic ISA), so |ŝ - s| <= γ(k+1)·Σ|x_d·w_d| (Higham, recursive summation; γ(j) =
// j·u/(1 - j·u), u = 2^-24); adding the bias rounds once more, so
//   |ŷ - y| <= γ(k+2)·(Σ|x_d·w_d| + |b|).
// The float64 reference errs by ~k·2^-53 of the same sum, 2^-29 of the bound: negligible.
// With the GELU epilogue the linear error is scaled by at most max|gelu'| = 1.129, and the
// vectorised GELU adds 0.5·|v|·kErfAbs (the erf's error, times 0.5·v) plus 4 roundings of
// terms no larger than |v| (x/√2, 1 + erf, 0.5·x, the product): 4u·|v|.
TEST(PackedGemm, MatchesFloat64WithinDerivedBound) {
  for (Isa isa : isas()) {
    Context ctx({.threads = 2, .isa = isa});
    // 769: two depth blocks of tuning::gemm_depth_block() (768), the second one row deep, so
    // the partial sums' round trip through y is checked.
    static_assert(tuning::gemm_depth_block() == 768, "pick a k just past one depth block");
    for (std::int64_t k : {1, 7, 129, 385, 769})
      for (std::int64_t n : {1, 17, 64, 65, 130}) {
        const std::vector<float> w = uniform(static_cast<std::size_t>(k * n), 10 + k * n);
        const std::vector<float> bias = uniform(static_cast<std::size_t>(n), 20 + n, 0.5f);
        const Tensor packed = layers::pack_weights(w.data(), k, n, n);
        // 97 and 200 rows on 2 threads: row groups (packed_gemm.cpp), 200 with a short last block.
        for (std::int64_t m : {1, 2, 5, 6, 7, 13, 70, 97, 200}) {
          const std::vector<float> x = uniform(static_cast<std::size_t>(m * k), 30 + m);
          for (GemmEpilogue e : {GemmEpilogue::none, GemmEpilogue::gelu_erf}) {
            const std::vector<float> y = run(ctx, x, m, k, packed, n, bias.data(), e);
            double worst = 0;  // largest error as a fraction of its bound
            for (std::int64_t r = 0; r < m; ++r)
              for (std::int64_t c = 0; c < n; ++c) {
                double s = 0, magnitude = 0;
                for (std::int64_t d = 0; d < k; ++d) {
                  const double p = static_cast<double>(x[r * k + d]) * w[d * n + c];
                  s += p;
                  magnitude += std::fabs(p);
                }
                const double v = s + bias[c];
                double bound = gamma(k + 2) * (magnitude + std::fabs(bias[c]));
                double exact = v;
                if (e == GemmEpilogue::gelu_erf) {
                  exact = gelu64(v);
                  bound = kGeluLipschitz * bound + std::fabs(v) * (0.5 * kErfAbs + 4 * kU);
                }
                worst = std::max(worst, std::fabs(y[r * n + c] - exact) / bound);
              }
            EXPECT_LE(worst, 1.0) << isa_name(isa) << " m " << m << " n " << n << " k " << k
                                  << " epilogue " << static_cast<int>(e);
          }
        }
      }
  }
}

// A row alone against the same row inside every m = 1..70, 97 and 200, on 1 and 2 threads
// (packed_gemm_testing.h).
TEST(PackedGemm, RowResultDoesNotDependOnMPositionOrThreads) {
  const std::int64_t k = 129, n = 130;  // k odd, n not a multiple of the panel width
  const std::vector<float> w = uniform(static_cast<std::size_t>(k * n), 1);
  expect_row_invariance(layers::pack_weights(w.data(), k, n, n), k, n, 70);
}

// The task split on its own, over row counts around the block and group edges, 1 to 5
// threads and 1 to 24 panels: every (row, panel) in exactly one task; row blocks contiguous,
// in order, and never empty except where a grid has more blocks than rows; a grouped grid
// (threads > 1 and at least one block per worker) has as many groups as workers, blocks of
// whole 6-row register tiles unless that would leave its last block empty, and worker w's
// range of parallel_for_ranges (tasks [count·w/T, count·(w+1)/T), context.cpp) holds exactly
// the tasks of group w, all its panels: the rows a core multiplies are the rows it wrote.
TEST(TaskGrid, CoversEveryRowAndPanelOnceAndGivesEachWorkerItsGroup) {
  const std::int64_t block_rows = tuning::gemm_task_rows();
  std::vector<std::int64_t> row_counts = {1,  2,   5,   6,   7,   13,  95,  96,
                                          97, 191, 192, 193, 448, 449, 1000};
  for (std::int64_t m = block_rows * 2 - 7; m <= block_rows * 2 + 7; ++m) row_counts.push_back(m);
  for (std::int64_t m : row_counts)
    for (int threads = 1; threads <= 5; ++threads)
      for (std::int64_t panels : {1, 2, 6, 24}) {
        const layers::TaskGrid grid(m, panels, threads);
        const std::string where = "m " + std::to_string(m) + ", threads " +
                                  std::to_string(threads) + ", panels " + std::to_string(panels);
        std::vector<int> seen(static_cast<std::size_t>(m * panels), 0);
        for (std::int64_t t = 0; t < grid.tasks(); ++t) {
          const std::int64_t p = grid.panel(t), rb = grid.row_block(t);
          ASSERT_TRUE(p >= 0 && p < panels && rb >= 0 && rb < grid.row_blocks)
              << where << ", task " << t;
          for (std::int64_t r = grid.first_row(rb); r < grid.first_row(rb) + grid.rows(rb); ++r)
            ++seen[r * panels + p];
        }
        for (std::size_t i = 0; i < seen.size(); ++i)
          ASSERT_EQ(seen[i], 1) << where << ": row " << i / panels << " panel " << i % panels;
        std::int64_t next_row = 0;
        for (std::int64_t rb = 0; rb < grid.row_blocks; ++rb) {
          ASSERT_EQ(grid.first_row(rb), next_row) << where << ", block " << rb;
          ASSERT_LE(grid.rows(rb), block_rows) << where << ", block " << rb;
          if (grid.row_blocks <= m) EXPECT_GT(grid.rows(rb), 0) << where << ", block " << rb;
          next_row += grid.rows(rb);
        }
        ASSERT_EQ(next_row, m) << where;
        const bool should_group = threads > 1 && (m + block_rows - 1) / block_rows >= threads;
        ASSERT_EQ(grid.grouped, should_group) << where;
        if (!grid.grouped) continue;
        ASSERT_EQ(grid.row_blocks, grid.blocks_per_group * threads) << where;
        EXPECT_GE(grid.block * grid.row_blocks, m) << where;
        if (grid.block % 6 != 0)  // a ragged tile only where whole tiles would empty the last block
          EXPECT_GE((grid.block + 5) / 6 * 6 * (grid.row_blocks - 1), m) << where;
        const std::int64_t count = grid.tasks();
        for (int w = 0; w < threads; ++w)
          for (std::int64_t t = count * w / threads; t < count * (w + 1) / threads; ++t)
            ASSERT_EQ(grid.row_block(t) / grid.blocks_per_group, w) << where << ", task " << t;
      }
}

TEST(PackedGemm, WritesOnlyItsColumnsAndTakesNoBias) {
  const std::int64_t m = 3, k = 5, n = 17, ldy = 20;
  const std::vector<float> w = uniform(static_cast<std::size_t>(k * n), 4),
                           x = uniform(static_cast<std::size_t>(m * k), 5);
  const Tensor packed = layers::pack_weights(w.data(), k, n, n);
  Context ctx;
  std::vector<float> y(static_cast<std::size_t>(m * ldy), 42.0f);
  layers::packed_gemm(
      ctx, {.m = m, .x = x.data(), .ldx = k, .w = &packed, .n = n, .y = y.data(), .ldy = ldy});
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t c = 0; c < ldy; ++c) {
      if (c >= n) {
        EXPECT_EQ(y[r * ldy + c], 42.0f);
        continue;
      }
      double s = 0;
      for (std::int64_t d = 0; d < k; ++d) s += static_cast<double>(x[r * k + d]) * w[d * n + c];
      EXPECT_NEAR(y[r * ldy + c], s, 1e-5);
    }
}

TEST(PackedGemm, BadArgumentsAreErrors) {
  const std::vector<float> w(12, 1.0f), x(8, 1.0f);
  std::vector<float> y(100);
  const Tensor packed = layers::pack_weights(w.data(), 4, 3, 3);
  Context ctx;
  expect_error([&] { layers::pack_weights(w.data(), 0, 3, 3); }, {"weights", "k >= 1"});
  expect_error(
      [&] {
        layers::packed_gemm(
            ctx,
            {.m = 2, .x = x.data(), .ldx = 4, .w = &packed, .n = 65, .y = y.data(), .ldy = 65});
      },
      {"n", "packed into 1 panels"});
  expect_error(
      [&] {
        layers::packed_gemm(
            ctx, {.m = 2, .x = x.data(), .ldx = 3, .w = &packed, .n = 3, .y = y.data(), .ldy = 3});
      },
      {"ldx >= k = 4"});
}

// The epilogue's erf against std::erf in double on every 2^-12 step of [-6, 6] (beyond ±4 it
// returns ±1 exactly, within 1.6e-8 of erf there), and GELU against its float64 form.
TEST(PackedGemm, ErfWithinStatedBound) {
  std::vector<float> x;
  for (int i = -6 * 4096; i <= 6 * 4096; ++i) x.push_back(static_cast<float>(i) / 4096.0f);
  while (x.size() % 16) x.push_back(0.0f);
  std::vector<float> y(x.size());
  for (Isa isa : isas()) {
    const simd::GemmKernels& kernels = simd::gemm_kernels(isa);
    kernels.erf(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
    double worst_abs = 0, worst_rel = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double exact = std::erf(static_cast<double>(x[i]));
      worst_abs = std::max(worst_abs, std::fabs(y[i] - exact));
      if (exact != 0) worst_rel = std::max(worst_rel, std::fabs(y[i] - exact) / std::fabs(exact));
    }
    std::printf("[ erf      ] %s: max abs error %.3g, max rel error %.3g\n", isa_name(isa),
                worst_abs, worst_rel);
    EXPECT_LE(worst_abs, kErfAbs) << isa_name(isa);
    EXPECT_LE(worst_rel, kErfAbs) << isa_name(isa);
    std::vector<float> g(x);
    kernels.gelu_erf(g.data(),
                     static_cast<std::int64_t>(g.size()) - 3);  // a partial last vector too
    for (std::size_t i = 0; i + 3 < x.size(); ++i) {
      const double v = x[i];
      EXPECT_NEAR(g[i], gelu64(v), std::fabs(v) * (0.5 * kErfAbs + 4 * kU) + 1e-30)
          << isa_name(isa) << " x " << v;
    }
    for (std::size_t i = x.size() - 3; i < x.size(); ++i) EXPECT_EQ(g[i], x[i]);
  }
}

}  // namespace
}  // namespace headcount::testing
