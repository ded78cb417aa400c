// The GEMM on a GGUF file's own blocks (layers/block_weights.h, simd/qblock.h), on random Q4_1
// and Q8_0 matrices laid out as ggml stores them:
//   - x's quantization by blocks of 32 follows its rule (range, rounding, sums, NaN, zeros);
//   - the product matches float64 on the same operands (the weights dequantized by ggml.h's
//     independent dequantize(), x as dx · qx) within a bound derived from the kernel's roundings;
//   - every ISA gives the same bits (the AVX2 kernel also on operands that would saturate a
//     naive vpmaddubsw), and a row's result is the same alone, in any batch and on
//     1 or 2 threads;
//   - bad sources are errors naming the part and the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "expect_error.h"
#include "headcount/context.h"
#include "headcount/ggml.h"
#include "layers/block_weights.h"
#include "layers/packed_gemm.h"
#include "packed_gemm_testing.h"
#include "simd/qblock.h"

namespace headcount::testing {
namespace {

using i64 = std::int64_t;
using packed::isas;
using packed::uniform;

constexpr double kU = 0x1.0p-24;  // fp32's unit roundoff

// A random fp16 of magnitude 2^-10 .. 2^-4 (weights' scales), negative when asked.
std::uint16_t random_half(std::mt19937_64& rng, bool negative) {
  const auto exponent = static_cast<std::uint16_t>(5 + rng() % 7);  // 2^(e - 15)
  const auto mantissa = static_cast<std::uint16_t>(rng() % 1024);
  return static_cast<std::uint16_t>((negative ? 0x8000 : 0) | exponent << 10 | mantissa);
}

// `rows` x `cols` in ggml's bytes: Q4_1 (d, m < 0, random nibbles) or Q8_0 (d, q in
// [-127, 127]).
std::vector<std::byte> random_blocks(GgmlType type, i64 rows, i64 cols, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const i64 blocks = rows * cols / 32, bytes = type == GgmlType::q4_1 ? 20 : 34;
  std::vector<std::byte> out(static_cast<std::size_t>(blocks * bytes));
  for (i64 b = 0; b < blocks; ++b) {
    std::byte* block = out.data() + b * bytes;
    const std::uint16_t d = random_half(rng, false);
    std::memcpy(block, &d, 2);
    if (type == GgmlType::q4_1) {
      const std::uint16_t m = random_half(rng, true);
      std::memcpy(block + 2, &m, 2);
      for (i64 j = 0; j < 16; ++j) block[4 + j] = static_cast<std::byte>(rng() % 256);
    } else {
      for (i64 j = 0; j < 32; ++j)
        block[2 + j] = static_cast<std::byte>(static_cast<std::int8_t>(rng() % 255 - 127));
    }
  }
  return out;
}

struct Quantized {
  std::vector<std::int8_t> q;
  std::vector<float> dx, sx;
  std::vector<std::int32_t> sum;
};

Quantized quantize(const std::vector<float>& x, i64 m, i64 k) {
  Quantized r{.q = std::vector<std::int8_t>(static_cast<std::size_t>(m * k)),
              .dx = std::vector<float>(static_cast<std::size_t>(m * k / 32)),
              .sx = std::vector<float>(static_cast<std::size_t>(m * k / 32)),
              .sum = std::vector<std::int32_t>(static_cast<std::size_t>(m * k / 32))};
  for (i64 i = 0; i < m; ++i)
    simd::quantize_blocks(x.data() + i * k, k, r.q.data() + i * k, r.dx.data() + i * k / 32,
                          r.sx.data() + i * k / 32, r.sum.data() + i * k / 32);
  return r;
}

std::vector<float> run(Context& ctx, const layers::BlockWeights& w, const std::vector<float>& x,
                       i64 m) {
  std::vector<float> y(static_cast<std::size_t>(m * w.n), -1.0f);
  layers::packed_gemm(
      ctx, {.m = m, .x = x.data(), .ldx = w.k, .blocks = &w, .n = w.n, .y = y.data(), .ldy = w.n});
  return y;
}

TEST(QBlockGemm, InputQuantizationFollowsItsRule) {
  const i64 k = 96;
  std::vector<float> x = uniform(static_cast<std::size_t>(k), 5, 3.0f);
  x[40] = 0.5f * (x[40] < 0 ? -1 : 1);       // block 1: a value near half a step somewhere
  std::fill(x.begin() + 64, x.end(), 0.0f);  // block 2: all zero
  const Quantized r = quantize(x, 1, k);
  for (i64 b = 0; b < 2; ++b) {
    float amax = 0;
    for (i64 i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    EXPECT_EQ(r.dx[b], amax / 127.0f);
    std::int32_t sum = 0;
    for (i64 i = 0; i < 32; ++i) {
      const std::int8_t q = r.q[b * 32 + i];
      EXPECT_LE(std::abs(q), 127);
      EXPECT_EQ(q, static_cast<std::int8_t>(std::nearbyint(x[b * 32 + i] * (127.0f / amax))));
      // One step of dx at most half away, up to the scale's own rounding.
      EXPECT_LE(std::fabs(q * static_cast<double>(r.dx[b]) - x[b * 32 + i]),
                0.5 * r.dx[b] + 127 * kU * r.dx[b]);
      sum += q;
    }
    EXPECT_EQ(r.sum[b], sum);
    EXPECT_EQ(r.sx[b], r.dx[b] * static_cast<float>(sum));
  }
  EXPECT_EQ(r.dx[2], 0.0f);
  EXPECT_EQ(r.sum[2], 0);
  for (i64 i = 64; i < k; ++i) EXPECT_EQ(r.q[i], 0);
  // A non-finite value makes its block's scale NaN (the row's outputs NaN, never a guess).
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> y = x;
    y[3] = bad;
    const Quantized n = quantize(y, 1, k);
    EXPECT_TRUE(std::isnan(n.dx[0]));
    EXPECT_TRUE(std::isnan(n.sx[0]));
    EXPECT_EQ(n.dx[1], r.dx[1]);
  }
}

// Per output: the kernel sums each block exactly in int32, then per block one rounding for
// d · dx, one for sx = dx · S (Q4_1), and one per fma into the accumulator (2 per block for
// Q4_1, 1 for Q8_0), then one for the bias: with B blocks at most 2B + 3 roundings of terms no
// larger than T = Σ_b (|d·dx|·Σ_i |q_i·qx_i| + |m·dx|·Σ_i |qx_i|) + |bias|, so
// |ŷ - y| <= γ(2B + 3)·T. The reference multiplies ggml's dequantized weights, w_i = fl(d·q_i + m)
// (one rounding: ggml.h), by dx·qx_i in float64: off by u·Σ|w_i·x̂_i| more. Both, in the bound.
TEST(QBlockGemm, MatchesFloat64OnTheSameOperandsWithinDerivedBound) {
  for (Isa isa : isas()) {
    Context ctx({.threads = 2, .isa = isa});
    for (GgmlType type : {GgmlType::q4_1, GgmlType::q8_0})
      for (auto [n, k, m] : {std::tuple<i64, i64, i64>{70, 64, 5}, {130, 576, 9}, {16, 32, 1}}) {
        const std::vector<std::byte> bytes = random_blocks(type, n, k, 11 + n + k);
        const layers::BlockSource source{.type = type, .bytes = bytes, .rows = n, .cols = k};
        const layers::BlockWeights w = layers::BlockWeights::pack({&source, 1});
        EXPECT_EQ(w.n, n);
        std::vector<float> dense(static_cast<std::size_t>(n * k));
        dequantize(type, bytes, n * k, dense.data());
        const std::vector<float> x = uniform(static_cast<std::size_t>(m * k), 3 + m, 2.0f);
        const Quantized qx = quantize(x, m, k);
        const std::vector<float> y = run(ctx, w, x, m);
        const i64 blocks = k / 32, block_bytes = type == GgmlType::q4_1 ? 20 : 34;
        double worst = 0;
        for (i64 r = 0; r < m; ++r)
          for (i64 c = 0; c < n; ++c) {
            double ref = 0, t = 0;
            for (i64 b = 0; b < blocks; ++b) {
              const std::byte* block = bytes.data() + (c * blocks + b) * block_bytes;
              std::uint16_t dh, mh = 0;
              std::memcpy(&dh, block, 2);
              if (type == GgmlType::q4_1) std::memcpy(&mh, block + 2, 2);
              const double d = fp16_to_float(dh),
                           mn = type == GgmlType::q4_1 ? fp16_to_float(mh) : 0;
              const double dx = qx.dx[static_cast<std::size_t>(r * blocks + b)];
              double qq = 0, qs = 0;
              for (i64 i = 0; i < 32; ++i) {
                const double xq = qx.q[static_cast<std::size_t>(r * k + b * 32 + i)];
                const double wv = dense[static_cast<std::size_t>(c * k + b * 32 + i)];
                ref += wv * (dx * xq);
                t += std::fabs(wv * dx * xq) * kU;
                qq += std::fabs((wv - mn) / d * xq);  // |q_i · qx_i| (exact: w is d·q + m)
                qs += std::fabs(xq);
              }
              t += (std::fabs(d * dx) * qq + std::fabs(mn * dx) * qs);
            }
            const double roundings = 2.0 * blocks + 3;
            const double bound = roundings * kU / (1 - roundings * kU) * t + 1e-30;
            const double err = std::fabs(y[static_cast<std::size_t>(r * n + c)] - ref);
            worst = std::max(worst, err / bound);
            ASSERT_LE(err, bound) << ggml_type_name(type) << " " << isa_name(isa) << " n " << n
                                  << " k " << k << " row " << r << " col " << c;
          }
        std::printf("[ qblock   ] %s %s n %lld k %lld m %lld: worst error %.3g of the bound\n",
                    ggml_type_name(type).c_str(), isa_name(isa), static_cast<long long>(n),
                    static_cast<long long>(k), static_cast<long long>(m), worst);
      }
  }
}

// The property the decoder's determinism rests on, and the ISAs' agreement: one row's outputs
// are the same bits alone (m = 1: the decode tile), at every position of batches of 2..11
// (the 4-row tiles and their tails), on 1 and 2 threads, and on every ISA (the scalar kernel is
// the reference the vpdpbusd kernel matches).
TEST(QBlockGemm, RowResultsAreBitwiseTheSameInAnyBatchThreadAndIsa) {
  for (GgmlType type : {GgmlType::q4_1, GgmlType::q8_0}) {
    const i64 n = 200, k = 160;
    const std::vector<std::byte> bytes = random_blocks(type, n, k, 77);
    const layers::BlockSource source{.type = type, .bytes = bytes, .rows = n, .cols = k};
    const layers::BlockWeights w = layers::BlockWeights::pack({&source, 1});
    const std::vector<float> probe = uniform(static_cast<std::size_t>(k), 99, 1.5f);
    Context generic({.threads = 1, .isa = Isa::generic});
    const std::vector<float> expected = run(generic, w, probe, 1);
    for (Isa isa : isas())
      for (int threads : {1, 2}) {
        Context ctx({.threads = threads, .isa = isa});
        EXPECT_EQ(run(ctx, w, probe, 1), expected) << isa_name(isa);
        for (i64 m = 2; m <= 11; ++m)
          for (i64 at : {i64{0}, m / 2, m - 1}) {
            std::vector<float> x = uniform(static_cast<std::size_t>(m * k), 1000 + m, 1.5f);
            std::copy(probe.begin(), probe.end(), x.begin() + at * k);
            const std::vector<float> y = run(ctx, w, x, m);
            ASSERT_EQ(std::vector<float>(y.begin() + at * n, y.begin() + (at + 1) * n), expected)
                << ggml_type_name(type) << " " << isa_name(isa) << " threads " << threads << " m "
                << m << " row " << at;
          }
      }
  }
}

// One kernel table over every panel of w (y is m x ldy, columns past n left as they were).
void run_kernel(const simd::QBlockKernels& kernels, const layers::BlockWeights& w,
                const Quantized& qx, i64 m, const float* bias, float* y, i64 ldy) {
  const i64 blocks = w.k / 32, nr = simd::kQPanelRows;
  const i64 panel_bytes = nr / simd::kQGroupRows * blocks * simd::qblock_bytes(w.format);
  const simd::QuantizedRows rows{
      .q = qx.q.data(), .dx = qx.dx.data(), .sx = qx.sx.data(), .sum = qx.sum.data(), .k = w.k};
  for (i64 p = 0; p * nr < w.n; ++p)
    kernels.panel(w.format, rows, m, w.packed.data<const std::uint8_t>() + p * panel_bytes,
                  bias == nullptr ? nullptr : bias + p * nr, y + p * nr, ldy,
                  std::min(nr, w.n - p * nr));
}

// The AVX2 kernel against the scalar one, bit for bit, on the operands that break a naive
// vpmaddubsw: Q8_0's stored u = q + 128 reaches 255, and 255 · 127 + 255 · 127 = 64770 would
// saturate int16 (qblock_avx2.cpp: why the kernel never does). Rows of q = ±127, alternating
// signs, zeros and random values, nibbles of 15, fp16 scales at the extremes (largest normal,
// subnormals, ±0, negative); x rows that quantize to all +127, all -127 and alternating signs.
// 40 output rows: full and partial 8-row halves; 1 to 5 x rows: every tile and its tails.
TEST(QBlockGemm, Avx2KernelIsBitwiseTheScalarOneOnExtremeOperands) {
  if (!isa_supported(Isa::avx2)) GTEST_SKIP() << "this host (or HEADCOUNT_ISA) has no AVX2";
  const simd::QBlockKernels& avx2 = simd::qblock_kernels(Isa::avx2);
  const simd::QBlockKernels& scalar = simd::qblock_kernels(Isa::generic);
  ASSERT_EQ(avx2.isa, Isa::avx2);
  ASSERT_EQ(scalar.isa, Isa::generic);
  const i64 n = 40, k = 128, blocks = k / 32, ldy = n + 3;
  const std::uint16_t scales[] = {0x3c00, 0x7bff, 0x0001, 0x03ff, 0x8400, 0x0000, 0x8000, 0x2e66};
  std::mt19937_64 rng(52);
  for (GgmlType type : {GgmlType::q8_0, GgmlType::q4_1}) {
    const i64 bytes_per_block = type == GgmlType::q4_1 ? 20 : 34;
    std::vector<std::byte> bytes(static_cast<std::size_t>(n * blocks * bytes_per_block));
    for (i64 c = 0; c < n; ++c)
      for (i64 b = 0; b < blocks; ++b) {
        std::byte* block = bytes.data() + (c * blocks + b) * bytes_per_block;
        const std::uint16_t d = c < 8 ? std::uint16_t{0x3c00} : scales[(c + b) % 8];
        std::memcpy(block, &d, 2);
        const i64 pattern = c % 6;
        if (type == GgmlType::q8_0) {
          for (i64 i = 0; i < 32; ++i) {
            const int q = pattern == 0   ? 127
                          : pattern == 1 ? -127
                          : pattern == 2 ? (i % 2 == 0 ? 127 : -127)
                          : pattern == 3 ? 0
                          : pattern == 4 ? static_cast<int>(rng() % 255) - 127
                                         : (i % 2 == 0 ? 127 : 0);
            block[2 + i] = static_cast<std::byte>(static_cast<std::int8_t>(q));
          }
        } else {
          const std::uint16_t mins[] = {0xbc00, 0xfbff, 0x8001, 0x7bff, 0x0000, 0x83ff};
          std::memcpy(block + 2, &mins[pattern], 2);
          for (i64 j = 0; j < 16; ++j)
            block[4 + j] = static_cast<std::byte>(pattern == 0   ? 0xff
                                                  : pattern == 1 ? 0x00
                                                  : pattern == 2 ? 0xf0
                                                                 : rng() % 256);
        }
      }
    const layers::BlockSource source{.type = type, .bytes = bytes, .rows = n, .cols = k};
    const layers::BlockWeights w = layers::BlockWeights::pack({&source, 1});
    const i64 m = 5;
    std::vector<float> x(static_cast<std::size_t>(m * k));
    const std::vector<float> noise = uniform(static_cast<std::size_t>(k), 3, 2.0f);
    for (i64 i = 0; i < k; ++i) {
      x[static_cast<std::size_t>(i)] = 1.0f;                               // qx = +127
      x[static_cast<std::size_t>(k + i)] = -1.0f;                          // qx = -127
      x[static_cast<std::size_t>(2 * k + i)] = i % 2 == 0 ? 0.5f : -0.5f;  // ±127
      x[static_cast<std::size_t>(3 * k + i)] = noise[static_cast<std::size_t>(i)];
      x[static_cast<std::size_t>(4 * k + i)] = i % 4 < 2 ? -3.0f : 3.0f;  // pairs of a sign
    }
    const Quantized qx = quantize(x, m, k);
    ASSERT_EQ(qx.q[0], 127);
    ASSERT_EQ(qx.q[static_cast<std::size_t>(k)], -127);
    std::vector<float> bias = uniform(static_cast<std::size_t>(n), 9, 4.0f);
    bias.resize(64, std::numeric_limits<float>::quiet_NaN());  // past n: never read
    for (const float* b :
         {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())})
      for (i64 rows = 1; rows <= m; ++rows) {
        std::vector<float> expected(static_cast<std::size_t>(rows * ldy), -7.0f), got = expected;
        run_kernel(scalar, w, qx, rows, b, expected.data(), ldy);
        run_kernel(avx2, w, qx, rows, b, got.data(), ldy);
        // Bits, not values: -0 against +0 and NaN payloads would show too.
        for (std::size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(expected[i]))
              << ggml_type_name(type) << " rows " << rows << " output " << i / ldy << ", "
              << i % ldy << (b == nullptr ? "" : " with bias") << ": " << got[i] << " against "
              << expected[i];
        if (type == GgmlType::q8_0 && b == nullptr) {
          // Row 0 of W (q = 127, d = 1) times x's row 0 (qx = 127): each block's sum is
          // 32 · 127 · 127 = 516128, exact in fp32; a saturating vpmaddubsw would give 32 ·
          // 32767 / 2 per block instead. qblock.h's float steps from there, by hand.
          float acc = 0;
          for (i64 bl = 0; bl < blocks; ++bl)
            acc = std::fma(516128.0f, 1.0f * qx.dx[static_cast<std::size_t>(bl)], acc);
          EXPECT_EQ(got[0], acc);
        }
      }
  }
}

// Stacked parts and a row order: packed row i is part row row_order[i], which the product
// shows (one-hot x picks no row; a whole random x compares each output with its source row's).
TEST(QBlockGemm, StackedPartsAndRowOrderPickTheRowsAsked) {
  Context ctx({.threads = 2});
  const i64 k = 64;
  const std::vector<std::byte> a = random_blocks(GgmlType::q4_1, 4, k, 1),
                               b = random_blocks(GgmlType::q4_1, 3, k, 2);
  const std::vector<i64> order = {2, 0, 3, 1};
  const layers::BlockSource parts[] = {
      {.type = GgmlType::q4_1, .bytes = a, .rows = 4, .cols = k, .row_order = order},
      {.type = GgmlType::q4_1, .bytes = b, .rows = 3, .cols = k}};
  const layers::BlockWeights stacked = layers::BlockWeights::pack(parts);
  ASSERT_EQ(stacked.n, 7);
  const layers::BlockSource lone_a{.type = GgmlType::q4_1, .bytes = a, .rows = 4, .cols = k},
      lone_b{.type = GgmlType::q4_1, .bytes = b, .rows = 3, .cols = k};
  const std::vector<float> x = uniform(static_cast<std::size_t>(k), 4);
  const std::vector<float> ya = run(ctx, layers::BlockWeights::pack({&lone_a, 1}), x, 1),
                           yb = run(ctx, layers::BlockWeights::pack({&lone_b, 1}), x, 1),
                           y = run(ctx, stacked, x, 1);
  for (i64 i = 0; i < 4; ++i)
    EXPECT_EQ(y[static_cast<std::size_t>(i)], ya[static_cast<std::size_t>(order[i])]);
  for (i64 i = 0; i < 3; ++i)
    EXPECT_EQ(y[static_cast<std::size_t>(4 + i)], yb[static_cast<std::size_t>(i)]);
}

TEST(QBlockGemm, NonFiniteInputRowGivesNaNOutputsOnlyInThatRow) {
  Context ctx({.threads = 2});
  const i64 n = 64, k = 64;
  const std::vector<std::byte> bytes = random_blocks(GgmlType::q8_0, n, k, 8);
  const layers::BlockSource source{.type = GgmlType::q8_0, .bytes = bytes, .rows = n, .cols = k};
  const layers::BlockWeights w = layers::BlockWeights::pack({&source, 1});
  std::vector<float> x = uniform(static_cast<std::size_t>(3 * k), 6);
  x[static_cast<std::size_t>(k + 40)] = std::numeric_limits<float>::infinity();
  const std::vector<float> y = run(ctx, w, x, 3);
  for (i64 c = 0; c < n; ++c) {
    EXPECT_TRUE(std::isfinite(y[static_cast<std::size_t>(c)]));
    EXPECT_TRUE(std::isnan(y[static_cast<std::size_t>(n + c)]));
    EXPECT_TRUE(std::isfinite(y[static_cast<std::size_t>(2 * n + c)]));
  }
}

TEST(QBlockGemm, BadSourcesAreErrorsNamingThePartAndField) {
  const std::vector<std::byte> q41 = random_blocks(GgmlType::q4_1, 2, 64, 1),
                               q80 = random_blocks(GgmlType::q8_0, 2, 64, 1);
  auto pack = [](std::initializer_list<layers::BlockSource> parts) {
    (void)layers::BlockWeights::pack(
        std::span<const layers::BlockSource>(parts.begin(), parts.size()));
  };
  expect_error([&] { pack({}); }, {"block weights", "at least one"});
  expect_error([&] { pack({{.type = GgmlType::f32, .bytes = q41, .rows = 2, .cols = 64}}); },
               {"part 0 type", "Q4_1 or Q8_0", "F32"});
  expect_error([&] { pack({{.type = GgmlType::q4_1, .bytes = q41, .rows = 2, .cols = 48}}); },
               {"part 0 cols", "multiple of 32", "48"});
  expect_error([&] { pack({{.type = GgmlType::q4_1, .bytes = q41, .rows = 3, .cols = 64}}); },
               {"part 0 bytes", "120", "80"});
  expect_error(
      [&] {
        pack({{.type = GgmlType::q4_1, .bytes = q41, .rows = 2, .cols = 64},
              {.type = GgmlType::q8_0, .bytes = q80, .rows = 2, .cols = 64}});
      },
      {"part 1 type", "Q4_1", "Q8_0"});
  const std::vector<i64> twice = {1, 1};
  expect_error(
      [&] {
        pack({{.type = GgmlType::q4_1, .bytes = q41, .rows = 2, .cols = 64, .row_order = twice}});
      },
      {"part 0 row_order[1]", "not taken before", "1"});
  Context ctx;
  const layers::BlockSource source{.type = GgmlType::q4_1, .bytes = q41, .rows = 2, .cols = 64};
  const layers::BlockWeights w = layers::BlockWeights::pack({&source, 1});
  std::vector<float> x(64), y(2);
  expect_error(
      [&] {
        layers::packed_gemm(
            ctx, {.m = 1, .x = x.data(), .ldx = 64, .blocks = &w, .n = 3, .y = y.data(), .ldy = 3});
      },
      {"n", "2 rows", "3"});
  expect_error(
      [&] {
        layers::packed_gemm(ctx, {.m = 1,
                                  .x = x.data(),
                                  .ldx = 64,
                                  .blocks = &w,
                                  .n = 2,
                                  .y = y.data(),
                                  .ldy = 2,
                                  .epilogue = layers::GemmEpilogue::gelu_erf});
      },
      {"epilogue", "none"});
}

}  // namespace
}  // namespace headcount::testing
