// Every bad input to the kernels is an Error that names the parameter and says
// "expected X, got Y" (one test per error), never a crash, an abort or a NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "headcount/attention.h"
#include "headcount/error.h"
#include "kernels/view_checks.h"

namespace headcount::testing {
namespace {

struct Fixture {
  Tensor q{DType::f32, {2, 5, 4, 8}};
  Tensor k{DType::f32, {2, 6, 2, 8}};
  Tensor v{DType::f32, {2, 6, 2, 3}};
  Tensor out{DType::f32, {2, 5, 4, 3}};
  Tensor lse{DType::f32, {2, 4, 5}};
  AttentionParams params() const {
    return {.q = q.view(), .k = k.view(), .v = v.view(), .out = out.view(), .lse = lse.view()};
  }
};

// The message of the Error both kernels throw (they must agree), or "no error".
std::string error_of(const AttentionParams& p) {
  std::string messages[2];
  int i = 0;
  for (Kernel kernel : {Kernel::reference, Kernel::streaming}) {
    Context ctx;
    try {
      attention(ctx, kernel, p);
      messages[i] = "no error";
    } catch (const Error& e) {
      messages[i] = e.what();
    }
    ++i;
  }
  EXPECT_EQ(messages[0], messages[1]);
  return messages[0];
}

#define EXPECT_ERROR(params, text) EXPECT_EQ(error_of(params), text)

template <typename F>
std::string error_text(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(KernelValidation, AcceptsTheFixture) {
  Fixture f;
  EXPECT_ERROR(f.params(), "no error");
}

TEST(KernelValidation, HeadsNotDivisibleByKvHeads) {
  Fixture f;
  Tensor k(DType::f32, {2, 6, 3, 8}), v(DType::f32, {2, 6, 3, 3});
  AttentionParams p = f.params();
  p.k = k.view();
  p.v = v.view();
  EXPECT_ERROR(p, "kv_heads: expected a divisor of heads = 4, got 3");
}

TEST(KernelValidation, ZeroSizes) {
  Fixture f;
  AttentionParams p = f.params();
  p.q.shape[1] = 0;
  EXPECT_ERROR(
      p, "q shape: expected every size >= 1 [batch, q_len, heads, head_dim], got [2, 0, 4, 8]");
  p = f.params();
  p.k.shape[1] = -3;
  EXPECT_ERROR(
      p,
      "k shape: expected every size >= 1 [batch, kv_len, kv_heads, head_dim], got [2, -3, 2, 8]");
}

TEST(KernelValidation, ShapeMismatches) {
  Fixture f;
  Tensor k(DType::f32, {2, 6, 2, 7});
  AttentionParams p = f.params();
  p.k = k.view();
  EXPECT_ERROR(p, "k shape: expected [2, 6, 2, 8] (batch and head_dim of q), got [2, 6, 2, 7]");
  Tensor v(DType::f32, {2, 5, 2, 3});
  p = f.params();
  p.v = v.view();
  EXPECT_ERROR(
      p, "v shape: expected [2, 6, 2, 3] (batch, kv_len and kv_heads of k), got [2, 5, 2, 3]");
  Tensor out(DType::f32, {2, 5, 4, 8});
  p = f.params();
  p.out = out.view();
  EXPECT_ERROR(
      p, "out shape: expected [2, 5, 4, 3] [batch, q_len, heads, v_head_dim], got [2, 5, 4, 8]");
  Tensor lse(DType::f32, {2, 5, 4});
  p = f.params();
  p.lse = lse.view();
  EXPECT_ERROR(p, "lse shape: expected [2, 4, 5] [batch, heads, q_len], got [2, 5, 4]");
  Tensor q3(DType::f32, {2, 5, 32});
  p = f.params();
  p.q = q3.view();
  EXPECT_ERROR(p, "q rank: expected 4 dims [batch, q_len, heads, head_dim], got 3 dims [2, 5, 32]");
  p = f.params();
  p.k = TensorView{};
  EXPECT_ERROR(p, "k: expected a tensor [batch, kv_len, kv_heads, head_dim], got no data");
}

TEST(KernelValidation, StrideMismatches) {
  Fixture f;
  AttentionParams p = f.params();
  p.q.strides[3] = -1;
  EXPECT_ERROR(p, "q strides: expected non-negative strides, got [160, 32, 8, -1]");
  p = f.params();
  p.out.strides[1] = 0;  // two queries would write one address
  EXPECT_ERROR(p,
               "out strides: expected non-zero strides on every dimension of size > 1 (an output), "
               "got [60, 0, 3, 1]");
}

TEST(KernelValidation, DtypeMismatch) {
  Fixture f;
  Tensor q(DType::f64, {2, 5, 4, 8});
  AttentionParams p = f.params();
  p.q = q.view();
  EXPECT_ERROR(p, "q dtype: expected f32 or bf16, got f64");
  Tensor k16(DType::bf16, {2, 6, 2, 8});
  p = f.params();
  p.k = k16.view();
  EXPECT_ERROR(p, "k and v dtype: expected f32 (the dtype of q), got bf16 and f32");
}

TEST(KernelValidation, ScaleNotFinite) {
  Fixture f;
  AttentionParams p = f.params();
  p.scale = std::numeric_limits<float>::quiet_NaN();
  EXPECT_ERROR(p, "scale: expected a finite number, got nan");
  p.scale = std::numeric_limits<float>::infinity();
  EXPECT_ERROR(p, "scale: expected a finite number, got inf");
}

TEST(KernelValidation, MasksOfTheWrongShape) {
  Fixture f;
  AttentionParams p = f.params();
  const std::vector<std::int64_t> three = {6, 6, 6};
  p.key_lengths = three;
  EXPECT_ERROR(p, "key_lengths: expected 2 entries (one per batch element), got 3");
  const std::vector<std::int64_t> too_long = {6, 7};
  p.key_lengths = too_long;
  EXPECT_ERROR(p, "key_lengths[1]: expected 0 to kv_len = 6, got 7");
  p = f.params();
  p.window_left = -2;
  EXPECT_ERROR(p, "window_left: expected -1 (unbounded) or >= 0, got -2");
  Tensor bias(DType::f32, {2, 2, 5, 6});
  p = f.params();
  p.bias = bias.view();
  EXPECT_ERROR(p, "bias shape: expected [1 or 2, 1 or 4, 5, 6], got [2, 2, 5, 6]");
  Tensor bias3(DType::f32, {5, 6, 1});
  p.bias = bias3.view();
  EXPECT_ERROR(
      p,
      "bias rank: expected 4 dims [batch or 1, heads or 1, q_len, kv_len], got 3 dims [5, 6, 1]");
}

TEST(KernelValidation, NonFiniteValues) {
  Fixture f;
  f.k.data<float>()[f.k.view().offset({1, 2, 1, 3})] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_ERROR(f.params(), "k: expected finite values, got nan at [1, 2, 1, 3]");
  Fixture g;
  Tensor bias(DType::f32, {1, 1, 5, 6});
  bias.data<float>()[7] = std::numeric_limits<float>::infinity();
  AttentionParams p = g.params();
  p.bias = bias.view();
  EXPECT_ERROR(p, "bias: expected finite values or -inf, got inf at [0, 0, 1, 1]");
  bias.data<float>()[7] = -std::numeric_limits<float>::infinity();  // -inf masks: allowed
  EXPECT_ERROR(p, "no error");
}

// check_finite scans unit-stride rows by their exponent bits and walks element by element
// only to name the first bad one: every position of a row (vector body and tail), every
// non-finite class, bf16 as well as f32, and values at the edge of finite that must pass.
TEST(KernelValidation, NonFiniteFoundAtEveryPositionBothDtypes) {
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  // Near the largest finite value and subnormal, in f32 and after rounding to bf16 alike.
  const float fine[] = {3.0e38f, -3.0e38f, 1.0e-40f, -0.0f};
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor t(dtype, {2, 3, 2, 19});  // 19: a vector body and a tail on every ISA
    auto set = [&](std::int64_t off, float x) {
      if (dtype == DType::f32)
        t.data<float>()[off] = x;
      else
        t.data<bf16>()[off] = to_bf16(x);
    };
    for (std::int64_t off = 0; off < t.view().numel(); ++off) set(off, 0.5f);
    for (std::int64_t off = 0; off < t.view().numel(); off += 7) {
      for (float x : fine) {
        set(off, x);
        EXPECT_NO_THROW(kernels::check_finite(t.view(), "q"));
      }
      for (float x : bad) {
        set(off, x);
        const std::int64_t d = off % 19, c = off / 19 % 2, b = off / 38 % 3, a = off / 114;
        std::ostringstream want;
        want << "q: expected finite values, got "
             << (std::isnan(x) ? "nan"
                 : x > 0       ? "inf"
                               : "-inf")
             << " at [" << a << ", " << b << ", " << c << ", " << d << "]";
        EXPECT_EQ(error_text([&] { kernels::check_finite(t.view(), "q"); }), want.str())
            << "offset " << off;
      }
      set(off, 0.5f);
    }
  }
}

// The streaming kernel checks q, k and v in chunks of 1024 rows over the pool
// (kernels::check_finite_inputs); the error must still name the first bad element, as
// validate() does, whatever the thread count, wherever the bad values sit among the chunks,
// and on strided rows (which are walked).
TEST(KernelValidation, StreamingNamesTheFirstBadValueOnAnyThreadCount) {
  const std::int64_t n = 700;  // q: 2 x 700 x 4 rows = 5600 rows, six chunks; k and v three
  Tensor q(DType::f32, {2, n, 4, 16}), k(DType::f32, {2, n, 2, 16}), v(DType::f32, {2, n, 2, 12});
  Tensor out(DType::f32, {2, n, 4, 12});
  for (Tensor* t : {&q, &k, &v})
    for (std::int64_t i = 0; i < t->view().numel(); ++i) t->data<float>()[i] = 0.25f;
  const AttentionParams p{.q = q.view(), .k = k.view(), .v = v.view(), .out = out.view()};
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  struct Bad {
    Tensor* t;
    std::int64_t a, b, c, d;
    float x;
  };
  // One bad value in the last chunk of v and one earlier in q: q is named (checked first), at
  // its own position; then each alone.
  const std::vector<std::vector<Bad>> cases = {
      {{&v, 1, n - 1, 1, 11, nan}, {&q, 1, 3, 2, 5, -inf}},
      {{&v, 1, n - 1, 1, 11, nan}},
      {{&k, 0, 513, 0, 0, inf}, {&k, 1, 2, 1, 15, nan}},
      {{&q, 0, 0, 0, 0, nan}},
  };
  for (const auto& bads : cases) {
    for (const Bad& bad : bads)
      bad.t->data<float>()[bad.t->view().offset({bad.a, bad.b, bad.c, bad.d})] = bad.x;
    std::string want;
    try {
      validate(p);
      want = "no error";
    } catch (const Error& e) {
      want = e.what();
    }
    EXPECT_NE(want, "no error");
    for (int threads : {1, 2, 3}) {
      Context ctx({.threads = threads});
      // Nothing is written before the error (n 700 runs on packed heads: copies, then tasks).
      std::fill_n(out.data<float>(), out.view().numel(), 7.0f);
      EXPECT_EQ(error_text([&] { attention_streaming(ctx, p); }), want) << threads << " threads";
      EXPECT_EQ(std::count(out.data<float>(), out.data<float>() + out.view().numel(), 7.0f),
                out.view().numel())
          << threads << " threads: an output was written before the error";
    }
    for (const Bad& bad : bads)
      bad.t->data<float>()[bad.t->view().offset({bad.a, bad.b, bad.c, bad.d})] = 0.25f;
  }
  // A strided q (every other element of a wider buffer) is walked, not scanned by rows.
  Tensor wide(DType::f32, {2, n, 4, 32});
  for (std::int64_t i = 0; i < wide.view().numel(); ++i) wide.data<float>()[i] = 0.25f;
  AttentionParams strided = p;
  strided.q = wide.view();
  strided.q.shape[3] = 16;
  strided.q.strides[3] = 2;
  wide.data<float>()[wide.view().offset({1, 5, 3, 2 * 7})] = inf;
  wide.data<float>()[wide.view().offset({1, 5, 3, 2 * 7 + 1})] =
      nan;  // between elements: never read
  Context ctx({.threads = 2});
  EXPECT_EQ(error_text([&] { attention_streaming(ctx, strided); }),
            "q: expected finite values, got inf at [1, 5, 3, 7]");
  // Unit-stride rows that are not one flat range (the first 16 of every 32 floats, as a column
  // range of a fused projection is): scanned row by row, indices counted across chunks.
  wide.data<float>()[wide.view().offset({1, 5, 3, 2 * 7})] = 0.25f;
  wide.data<float>()[wide.view().offset({1, 5, 3, 2 * 7 + 1})] = 0.25f;
  AttentionParams columns = p;
  columns.q = wide.view();
  columns.q.shape[3] = 16;
  // Row [1, 10, 1] is row 2841, in the chunk of rows 2048-3071 that crosses from batch 0 to 1.
  wide.data<float>()[wide.view().offset({1, 10, 1, 20})] = nan;  // past the columns: never read
  EXPECT_EQ(error_text([&] { attention_streaming(ctx, columns); }), "no error");
  wide.data<float>()[wide.view().offset({1, 10, 1, 9})] = -inf;
  EXPECT_EQ(error_text([&] { attention_streaming(ctx, columns); }),
            "q: expected finite values, got -inf at [1, 10, 1, 9]");
  // The heads of one position next to each other, positions 53 floats apart (q of a fused
  // [q | k | v] projection): each position's 3 x 16 floats are scanned as one run. 3 heads
  // put chunk edges inside runs: row 1024 is [0, 341, 1], row 3071 is [1, 323, 2].
  Tensor fused(DType::f32, {2, n, 53});
  for (std::int64_t i = 0; i < fused.view().numel(); ++i) fused.data<float>()[i] = 0.25f;
  Tensor q3(DType::f32, {2, n, 3, 16}), out3(DType::f32, {2, n, 3, 12}),
      k3(DType::f32, {2, n, 1, 16}), v3(DType::f32, {2, n, 1, 12});
  for (Tensor* t : {&k3, &v3})
    for (std::int64_t i = 0; i < t->view().numel(); ++i) t->data<float>()[i] = 0.25f;
  AttentionParams runs{.q = q3.view(), .k = k3.view(), .v = v3.view(), .out = out3.view()};
  runs.q.data = fused.view().data;
  runs.q.strides = {n * 53, 53, 16, 1};
  auto at = [&](std::int64_t a, std::int64_t b, std::int64_t col) -> float& {
    return fused.data<float>()[(a * n + b) * 53 + col];
  };
  at(0, 341, 48) = nan;  // past the run: never read
  at(1, 323, 52) = inf;
  EXPECT_EQ(error_text([&] { attention_streaming(ctx, runs); }), "no error");
  for (const auto& [a, b, c, d] : std::vector<std::array<std::int64_t, 4>>{{0, 341, 0, 15},
                                                                           {0, 341, 1, 0},
                                                                           {0, 341, 2, 15},
                                                                           {1, 323, 2, 15},
                                                                           {1, 324, 0, 0},
                                                                           {1, n - 1, 2, 15}}) {
    at(a, b, c * 16 + d) = -inf;
    std::ostringstream want;
    want << "q: expected finite values, got -inf at [" << a << ", " << b << ", " << c << ", " << d
         << "]";
    for (int threads : {1, 2, 3}) {
      Context each({.threads = threads});
      EXPECT_EQ(error_text([&] { attention_streaming(each, runs); }), want.str())
          << threads << " threads";
    }
    at(a, b, c * 16 + d) = 0.25f;
  }
}

// Packed heads in two chunks (9 heads of 2 MiB of K and V, 8 to the 16 MiB budget): the tasks
// of the first chunk write outputs before the second is copied, so k and v must be checked
// before anything runs; a bad value in the last head leaves out untouched. (Checking K and V
// inside the copy instead was tried: perf gave the same share of time to copy + scan, ~5% at
// n 1000, head_dim 256, since the copy then paid the reads the scan had paid. Not kept.)
TEST(KernelValidation, StreamingChecksEveryChunkBeforeWritingOutputs) {
  const std::int64_t n = 4096, heads = 9;
  Tensor q(DType::f32, {1, n, heads, 64}), k(DType::f32, {1, n, heads, 64}),
      v(DType::f32, {1, n, heads, 64});
  Tensor out(DType::f32, {1, n, heads, 64});
  for (Tensor* t : {&q, &k, &v}) std::fill_n(t->data<float>(), t->view().numel(), 0.25f);
  std::fill_n(out.data<float>(), out.view().numel(), 7.0f);
  v.data<float>()[v.view().offset({0, n - 1, heads - 1, 63})] =
      std::numeric_limits<float>::quiet_NaN();
  Context ctx({.threads = 2});
  const AttentionParams p{.q = q.view(), .k = k.view(), .v = v.view(), .out = out.view()};
  EXPECT_EQ(error_text([&] { attention_streaming(ctx, p); }),
            "v: expected finite values, got nan at [0, 4095, 8, 63]");
  EXPECT_EQ(std::count(out.data<float>(), out.data<float>() + out.view().numel(), 7.0f),
            out.view().numel());
}

TEST(KernelValidation, ProbabilitiesOnlyOnTheReferencePath) {
  Fixture f;
  Tensor probs(DType::f32, {2, 4, 5, 6});
  AttentionParams p = f.params();
  p.probs_mode = ProbsMode::per_head;
  p.probs = probs.view();
  Context ctx;
  EXPECT_NO_THROW(attention_reference(ctx, p));
  try {
    attention_streaming(ctx, p);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "probs_mode: expected none on the streaming kernel (only the reference "
                 "materialises probabilities), got per_head");
  }
  Tensor wrong(DType::f32, {2, 5, 5});
  p.probs_mode = ProbsMode::averaged;
  p.probs = wrong.view();
  EXPECT_THROW(attention_reference(ctx, p), Error);
}

TEST(KernelValidation, ParseKernel) {
  EXPECT_EQ(parse_kernel("reference"), Kernel::reference);
  EXPECT_EQ(parse_kernel("streaming"), Kernel::streaming);
  try {
    parse_kernel("flash");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "kernel: expected reference or streaming, got flash");
  }
}

// Both schedules: parallel_for (one shared counter) and parallel_for_ranges (a range per
// worker, then stealing).
void run_region(Context& ctx, bool ranged, std::int64_t count,
                FunctionRef<void(std::int64_t, int)> fn) {
  if (ranged)
    ctx.parallel_for_ranges(count, fn);
  else
    ctx.parallel_for(count, fn);
}

TEST(Context, RejectsBadThreadCountsAndRunsEveryTaskOnce) {
  EXPECT_THROW(Context({.threads = 0}), Error);
  Context ctx({.threads = 2});
  for (const bool ranged : {false, true}) {
    std::vector<int> hits(1000, 0);
    run_region(ctx, ranged, 1000, [&](std::int64_t task, int worker) {
      ASSERT_GE(worker, 0);
      ASSERT_LT(worker, 2);
      hits[static_cast<std::size_t>(task)] += 1;
    });
    for (int h : hits) ASSERT_EQ(h, 1) << "ranged " << ranged;
  }
}

// Regions back to back (the workers catch the next one while they spin), regions after a
// pause longer than the spin (they have gone to sleep and are woken), and a pool with more
// threads than cores (it never spins; more ranges than tasks for small counts): every task
// once, every time, on both schedules, alternating. TSan runs this one too.
TEST(Context, RegionsBackToBackAndAfterSleepRunEveryTaskOnce) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (const int threads : {2, cores + 2}) {
    Context ctx({.threads = threads});
    std::vector<std::atomic<int>> hits(64);
    for (int region = 0; region < 300; ++region) {
      if (region % 50 == 49) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      const std::int64_t count = 1 + region % 64;
      const bool ranged = region % 3 != 0;
      run_region(ctx, ranged, count, [&](std::int64_t task, int worker) {
        ASSERT_LT(worker, std::min<std::int64_t>(threads, count));
        hits[static_cast<std::size_t>(task)].fetch_add(1, std::memory_order_relaxed);
      });
      for (std::int64_t t = 0; t < 64; ++t)
        ASSERT_EQ(hits[static_cast<std::size_t>(t)].exchange(0), t < count ? 1 : 0)
            << "threads " << threads << ", region " << region << ", ranged " << ranged << ", task "
            << t;
    }
  }
}

// A task's exception reaches the caller of parallel_for whichever thread threw it, instead of
// ending the process (a pool thread) or unwinding the task while others still run it (the
// caller); no more tasks are handed out, from any range; the pool keeps working afterwards.
TEST(Context, TaskExceptionsReachTheCallerFromAnyWorker) {
  for (const bool ranged : {false, true})
    for (const int thrower : {0, 1}) {
      Context ctx({.threads = 2});
      std::atomic<int> started{0};
      std::atomic<int> finished{0};
      const auto region = [&](std::int64_t task, int worker) {
        // The first task of each worker (0 and 1 shared; 0 and 500, the ranges' first) wait for
        // each other, so each worker holds one when the thrower throws.
        if (ranged ? task % 500 == 0 : task < 2) {
          started.fetch_add(1);
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (started.load() < 2 && std::chrono::steady_clock::now() < until)
            std::this_thread::yield();
          if (worker == thrower)
            throw Error("task " + std::to_string(task) + " on worker " + std::to_string(worker));
        }
        finished.fetch_add(1);
      };
      try {
        run_region(ctx, ranged, 1000, region);
        FAIL() << "no exception reached the caller";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("on worker " + std::to_string(thrower)),
                  std::string::npos)
            << e.what();
      }
      EXPECT_EQ(started.load(), 2) << "thrower " << thrower << ", ranged " << ranged;
      EXPECT_LT(finished.load(), 1000);
      std::vector<int> hits(100, 0);
      run_region(ctx, ranged, 100,
                 [&](std::int64_t task, int) { hits[static_cast<std::size_t>(task)] += 1; });
      for (int h : hits) ASSERT_EQ(h, 1);
    }
}

TEST(Tensor, Bf16RoundsToNearestEven) {
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(to_float(to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(to_bf16(1.00390625f).bits, 0x3f80);  // exactly half-way: to even
  EXPECT_EQ(to_bf16(1.01171875f).bits, 0x3f82);  // half-way above an odd: up
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(to_float(to_bf16(std::numeric_limits<float>::infinity()))));
}

TEST(Tensor, ViewsAndShapes) {
  Tensor t(DType::f32, {2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.bytes(), 96u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data<float>()) % 64, 0u);
  const TensorView v = t.view();
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.shape_string(), "[2, 3, 4]");
  EXPECT_EQ(v.strides_string(), "[12, 4, 1]");
  const TensorView s = TensorView::strided(t.data<float>(), DType::f32, {2, 3, 2}, {12, 4, 2});
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.offset({1, 2, 1}), 22);
  EXPECT_THROW(Tensor(DType::f32, {1, 2, 3, 4, 5}), Error);
  EXPECT_THROW(Tensor(DType::f32, {2, -1}), Error);
}

}  // namespace
}  // namespace headcount::testing
