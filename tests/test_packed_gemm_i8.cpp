// The packed GEMM's int8 path (packed_gemm.h, simd/gemm.h): the row quantiser (round to
// nearest, one scale per row, the zero and non-finite rows); pack_weights(..., DType::i8)
// against an independent quantisation of the columns here; the GEMM on every instruction set
// this CPU runs (vpdpbusd on avx512_bf16, widened int32 multiplies on avx512, avx2, generic)
// against an exact int64 sum of the quantised values and a float64 epilogue, within a bound
// derived below; the result against the unquantised product within the quantisation bound;
// and the invariance the encoder relies on: a row's result is bitwise the same alone or
// inside any m, at any position, on 1 or 2 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "expect_error.h"
#include "headcount/context.h"
#include "layers/packed_gemm.h"
#include "packed_gemm_testing.h"
#include "simd/amx.h"

namespace headcount::testing {
namespace {

using layers::GemmEpilogue;
using namespace packed;

// The quantisation of one vector as gemm.h states it, written out here on its own.
struct Quantised {
  std::vector<int> q;
  float scale = 0;
};
Quantised quantise(const float* v, std::int64_t n, std::int64_t stride) {
  float maxabs = 0;
  for (std::int64_t i = 0; i < n; ++i) maxabs = std::max(maxabs, std::fabs(v[i * stride]));
  Quantised out;
  out.scale = maxabs / 127.0f;
  const float inv = maxabs > 0 ? 127.0f / maxabs : 0.0f;
  for (std::int64_t i = 0; i < n; ++i)
    out.q.push_back(
        static_cast<int>(std::clamp(std::nearbyint(v[i * stride] * inv), -127.0f, 127.0f)));
  return out;
}

// The row quantiser on every ISA: q - 128 within half a step of x·127/max (the kernel may round
// x·(127/max) once, with a fused multiply-add, or twice: either is round to nearest of a value
// within one fp32 rounding of the same product), the largest |x| at ±127, the scale max/127;
// an all-zero row gives scale 0 and bytes 128; a NaN or an infinity anywhere gives scale NaN.
TEST(PackedGemmI8, QuantiserRoundsToNearestAndFlagsBadRows) {
  for (Isa isa : isas()) {
    const simd::GemmKernels& kernels = simd::gemm_kernels(isa);
    for (std::int64_t n : {1, 13, 16, 384, 1537}) {
      std::vector<float> x = uniform(static_cast<std::size_t>(n), 40 + n, 3.0f);
      x[static_cast<std::size_t>(n / 2)] = -3.5f;  // the row's largest magnitude
      std::vector<std::uint8_t> q(static_cast<std::size_t>(n) + 1, 0xee);
      float scale = -1;
      kernels.quantize_u8(x.data(), n, q.data(), &scale);
      EXPECT_EQ(scale, 3.5f / 127.0f) << isa_name(isa);
      EXPECT_EQ(q[static_cast<std::size_t>(n / 2)], 1)
          << isa_name(isa) << ": -3.5 is -127, stored as 1";
      EXPECT_EQ(q[static_cast<std::size_t>(n)], 0xee) << isa_name(isa) << ": wrote past n";
      for (std::int64_t i = 0; i < n; ++i) {
        const double t = static_cast<double>(x[static_cast<std::size_t>(i)]) * 127.0 / 3.5;
        EXPECT_LE(std::fabs((q[static_cast<std::size_t>(i)] - 128) - t), 0.5 + 1e-5)
            << isa_name(isa) << " n " << n;
      }
      for (float tiny : {0.0f, 1e-38f, 1e-45f}) {  // zero, and maxima whose 127 / max overflows
        std::vector<float> row(static_cast<std::size_t>(n), tiny);
        kernels.quantize_u8(row.data(), n, q.data(), &scale);
        EXPECT_EQ(scale, 0.0f) << isa_name(isa) << " row of " << tiny;
        EXPECT_TRUE(std::all_of(q.begin(), q.begin() + n, [](std::uint8_t b) { return b == 128; }))
            << isa_name(isa) << " row of " << tiny;
      }
      for (float bad :
           {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
            -std::numeric_limits<float>::infinity()}) {
        for (std::int64_t at : {std::int64_t{0}, n - 1}) {
          std::vector<float> row = x;
          row[static_cast<std::size_t>(at)] = bad;
          kernels.quantize_u8(row.data(), n, q.data(), &scale);
          EXPECT_TRUE(std::isnan(scale)) << isa_name(isa) << " n " << n << " bad value at " << at;
        }
      }
    }
  }
}

// Bound, per element, for y = fl(fl(float(S))·fl(s_x·s_w)) + b with S the exact integer sum
// Σ_d q_x·q_w (the kernel's int32 sums are exact: |S| <= k·127·127, and (q_x + 128)·q_w summed
// stays below 2^31 for these k), so only the epilogue rounds: the conversion of S (exact below
// 2^24, else one rounding), the scale product, the multiply and the bias add: four roundings,
//   |ŷ - y| <= γ(4)·(|S·s_x·s_w| + |b|),
// and the GELU epilogue as in test_packed_gemm.cpp: 1.129·bound + |v|·(kErfAbs/2 + 4u).
// Second bound, the quantisation itself, against the unquantised Σ x·w: |x - s_x·q_x| <= s_x/2
// and |w - s_w·q_w| <= s_w/2 (round to nearest), so per product
//   |x·w - s_x·q_x·s_w·q_w| <= |x|·s_w/2 + |w|·s_x/2 + s_x·s_w/4,
// summed over d, plus the epilogue's bound above (no GELU there).
TEST(PackedGemmI8, ExactIntegerSumsAndDerivedBounds) {
  for (Isa isa : isas()) {
    Context ctx({.threads = 2, .isa = isa});
    for (std::int64_t k : {4, 8, 64, 388, 1536})  // 64, 1536: AMX tile steps
      for (std::int64_t n : {1, 17, 64, 65, 130}) {
        if (k == 1536 && n != 65)
          continue;  // the long depth once (two depth blocks, a partial panel)
        std::vector<float> w = uniform(static_cast<std::size_t>(k * n), 10 + k * n);
        if (n > 1)
          for (std::int64_t d = 0; d < k; ++d)
            w[static_cast<std::size_t>(d * n + 1)] = 0.0f;  // an all-zero column
        const std::vector<float> bias = uniform(static_cast<std::size_t>(n), 20 + n, 0.5f);
        const Tensor packed = layers::pack_weights(w.data(), k, n, n, DType::i8);
        ASSERT_EQ(packed.dtype(), DType::i8);
        std::vector<Quantised> wq;
        for (std::int64_t c = 0; c < n; ++c) wq.push_back(quantise(w.data() + c, k, n));
        for (std::int64_t m : {1, 5, 6, 7, 13, 97}) {
          const std::vector<float> x = uniform(static_cast<std::size_t>(m * k), 30 + m, 2.0f);
          for (GemmEpilogue e : {GemmEpilogue::none, GemmEpilogue::gelu_erf}) {
            const std::vector<float> y = run(ctx, x, m, k, packed, n, bias.data(), e);
            double worst = 0, worst_quant = 0;  // largest errors as fractions of their bounds
            for (std::int64_t r = 0; r < m; ++r) {
              // x's bytes from the ISA's own quantiser (checked above): it may round a near-tie
              // the other way from quantise(), which rounds x·(127/max) twice.
              Quantised xq;
              std::vector<std::uint8_t> bytes(static_cast<std::size_t>(k));
              simd::gemm_kernels(isa).quantize_u8(x.data() + r * k, k, bytes.data(), &xq.scale);
              for (std::uint8_t b : bytes) xq.q.push_back(int{b} - 128);
              for (std::int64_t c = 0; c < n; ++c) {
                std::int64_t s = 0;
                double exact = 0, quant_bound = 0;
                const double sx = xq.scale, sw = wq[static_cast<std::size_t>(c)].scale;
                for (std::int64_t d = 0; d < k; ++d) {
                  s += std::int64_t{xq.q[static_cast<std::size_t>(d)]} *
                       wq[static_cast<std::size_t>(c)].q[static_cast<std::size_t>(d)];
                  const double xv = x[static_cast<std::size_t>(r * k + d)],
                               wv = w[static_cast<std::size_t>(d * n + c)];
                  exact += xv * wv;
                  quant_bound += std::fabs(xv) * sw / 2 + std::fabs(wv) * sx / 2 + sx * sw / 4;
                }
                const double sv = static_cast<double>(s) * sx * sw;
                const double v = sv + bias[static_cast<std::size_t>(c)];
                double bound =
                    gamma(4) * (std::fabs(sv) + std::fabs(bias[static_cast<std::size_t>(c)]));
                double want = v;
                const double got = y[static_cast<std::size_t>(r * n + c)];
                if (e == GemmEpilogue::gelu_erf) {
                  want = gelu64(v);
                  bound = kGeluLipschitz * bound + std::fabs(v) * (0.5 * kErfAbs + 4 * kU);
                } else {
                  worst_quant = std::max(
                      worst_quant, std::fabs(got - (exact + bias[static_cast<std::size_t>(c)])) /
                                       (quant_bound + bound + 1e-300));
                }
                worst = std::max(worst, std::fabs(got - want) / (bound + 1e-300));
              }
            }
            EXPECT_LE(worst, 1.0) << isa_name(isa) << " m " << m << " n " << n << " k " << k
                                  << " epilogue " << static_cast<int>(e);
            EXPECT_LE(worst_quant, 1.0) << isa_name(isa) << " m " << m << " n " << n << " k " << k;
          }
        }
      }
  }
}

// A row alone (m = 1) against the same row inside every m = 1..40 (and 97, 200: several row
// blocks), at the end and in the middle, on 1 and 2 threads: bitwise equal on every ISA (the
// row's quantisation and sums depend on that row only).
TEST(PackedGemmI8, RowResultDoesNotDependOnMPositionOrThreads) {
  const std::int64_t k = 1540, n = 130;  // three depth blocks, the last 4 deep; a partial panel
  const std::vector<float> w = uniform(static_cast<std::size_t>(k * n), 1);
  expect_row_invariance(layers::pack_weights(w.data(), k, n, n, DType::i8), k, n, 40);
}

// The same on a depth the AMX tiles take (a multiple of 64): every chunk of 32 rows, every
// partial tile of 16.
TEST(PackedGemmI8, TileRowResultDoesNotDependOnMPositionOrThreads) {
  const std::int64_t k = 640, n = 130;
  const std::vector<float> w = uniform(static_cast<std::size_t>(k * n), 4);
  expect_row_invariance(layers::pack_weights(w.data(), k, n, n, DType::i8), k, n, 40);
}

// AMX-INT8 (TDPBUSD) against vpdpbusd, bitwise: the same bytes, exact int32 sums and the same
// epilogue code (gemm_impl.h's finish_i8), over every row count up to three chunks of 32, depths
// of 1 to 24 tile steps (and one that is not a whole step: vpdpbusd for both), partial panels,
// both epilogues, 1 and 2 threads; with NaN rows among them.
TEST(PackedGemmI8, AmxTilesEqualVnniBitwise) {
  if (!isa_supported(Isa::amx_bf16) || !simd::amx::int8_available())
    GTEST_SKIP() << "no AMX-INT8 here (or HEADCOUNT_ISA caps it)";
  ASSERT_NE(simd::gemm_kernels(Isa::amx_bf16).panel_i8_amx, nullptr);
  for (int threads : {1, 2}) {
    Context amx({.threads = threads, .isa = Isa::amx_bf16});
    Context vnni({.threads = threads, .isa = Isa::avx512_bf16});
    for (std::int64_t k : {64, 68, 384, 1536})
      for (std::int64_t n : {1, 17, 64, 130}) {
        const std::vector<float> w = uniform(static_cast<std::size_t>(k * n), 70 + k + n);
        const std::vector<float> bias = uniform(static_cast<std::size_t>(n), 80 + n, 0.5f);
        const Tensor packed = layers::pack_weights(w.data(), k, n, n, DType::i8);
        for (std::int64_t m : {1, 2, 15, 16, 17, 31, 32, 33, 47, 96, 97, 200}) {
          if (k == 1536 && m != 33 && m != 200) continue;  // the long depth twice
          std::vector<float> x = uniform(static_cast<std::size_t>(m * k), 90 + m, 3.0f);
          if (m > 2) x[static_cast<std::size_t>(k + 3)] = std::numeric_limits<float>::quiet_NaN();
          for (GemmEpilogue e : {GemmEpilogue::none, GemmEpilogue::gelu_erf}) {
            const std::vector<float> a = run(amx, x, m, k, packed, n, bias.data(), e);
            const std::vector<float> b = run(vnni, x, m, k, packed, n, bias.data(), e);
            ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
                << "k " << k << " n " << n << " m " << m << " threads " << threads << " epilogue "
                << static_cast<int>(e);
          }
        }
      }
  }
}

// A row holding a NaN or an infinity comes out NaN (never a finite number made from a
// saturated scale); the other rows are unaffected.
TEST(PackedGemmI8, NonFiniteRowGivesNaNRow) {
  const std::int64_t k = 64, n = 20, m = 3;
  const std::vector<float> w = uniform(static_cast<std::size_t>(k * n), 7);
  const Tensor packed = layers::pack_weights(w.data(), k, n, n, DType::i8);
  std::vector<float> x = uniform(static_cast<std::size_t>(m * k), 8);
  Context ctx({.threads = 1});
  const std::vector<float> clean = run(ctx, x, m, k, packed, n, nullptr);
  x[static_cast<std::size_t>(k + 5)] = std::numeric_limits<float>::infinity();
  const std::vector<float> y = run(ctx, x, m, k, packed, n, nullptr);
  for (std::int64_t c = 0; c < n; ++c) {
    EXPECT_TRUE(std::isnan(y[static_cast<std::size_t>(n + c)])) << "column " << c;
    EXPECT_EQ(y[static_cast<std::size_t>(c)], clean[static_cast<std::size_t>(c)]);
    EXPECT_EQ(y[static_cast<std::size_t>(2 * n + c)], clean[static_cast<std::size_t>(2 * n + c)]);
  }
}

TEST(PackedGemmI8, BadArgumentsAreErrors) {
  std::vector<float> w(18, 1.0f);
  expect_error([&] { layers::pack_weights(w.data(), 6, 3, 3, DType::i8); },
               {"weights", "multiple of 4", "got 6"});
  const std::vector<float> deep(65540, 0.5f);
  expect_error([&] { layers::pack_weights(deep.data(), 65540, 1, 1, DType::i8); },
               {"weights", "k <= 65536", "got 65540"});
  w[4] = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { layers::pack_weights(w.data(), 4, 3, 3, DType::i8); },
               {"weights", "finite", "row 1, column 1"});
}

}  // namespace
}  // namespace headcount::testing
