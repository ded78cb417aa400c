// The packed GEMM's bf16 path (packed_gemm.h, simd/gemm.h): pack_weights(..., DType::bf16) and
// packed_gemm on every instruction set this CPU runs (AMX tiles on amx_bf16 where k is a multiple
// of 32, vdpbf16ps on avx512_bf16, widened fp32
// multiply-adds on avx512, avx2 and generic), each against a float64 reference computed on the
// bf16-rounded inputs within a bound derived below; the rounding kernel against
// headcount::to_bf16 bit for bit; and the invariance the encoder relies on: a row's result is
// bitwise the same alone or inside any m, at any position, on 1 or 2 threads.
#include <gtest/gtest.h>

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
#include "simd/gemm.h"

namespace headcount::testing {
namespace {

using layers::GemmEpilogue;
using namespace packed;

double rounded(float x) { return static_cast<double>(to_float(to_bf16(x))); }

std::vector<float> run(Context& ctx, const std::vector<float>& x, std::int64_t m, std::int64_t k,
                       const Tensor& packed, std::int64_t n, const float* bias,
                       GemmEpilogue epilogue = GemmEpilogue::none) {
  std::vector<float> y(static_cast<std::size_t>(m * n), -7.0f);
  layers::packed_gemm(ctx, {.m = m,
                            .x = x.data(),
                            .ldx = k,
                            .w = &packed,
                            .n = n,
                            .bias = bias,
                            .y = y.data(),
                            .ldy = n,
                            .epilogue = epilogue});
  return y;
}

// Bound, per element, for y = fl(Σ_d x̃_d·w̃_d + b) with x̃, w̃ the bf16 roundings (the reference
// uses the same roundings, so only the arithmetic is measured): a product of two bf16 values
// (8-bit significands) has at most 16 significant bits, so it is exact in fp32 (the inputs
// here are multiples of 2^-23 in [-1, 1], and so are their bf16 roundings, so every product
// and every partial sum is 0 or at least 2^-46 in magnitude: nothing is subnormal, and
// vdpbf16ps's flushing of subnormals never applies); each of the k products is added once to
// the fp32 accumulator, one rounding each whatever the order inside a pair (vdpbf16ps adds
// the pair's two products one after the other; the widened path does two multiply-adds), so
// |ŝ - s| <= γ(k)·Σ|x̃_d·w̃_d| (recursive summation, Higham); the bias adds one more rounding:
//   |ŷ - y| <= γ(k+1)·(Σ|x̃_d·w̃_d| + |b|).
// The GELU epilogue scales it as in test_packed_gemm.cpp: 1.129·bound + |v|·(kErfAbs/2 + 4u).
TEST(PackedGemmBf16, MatchesFloat64OnRoundedInputsWithinDerivedBound) {
  for (Isa isa : isas()) {
    Context ctx({.threads = 2, .isa = isa});
    for (std::int64_t k : {2, 8, 32, 96, 130, 384, 1536})  // 32, 96, 384, 1536: AMX steps
      for (std::int64_t n : {1, 17, 64, 65, 130}) {
        if (k == 1536 && n != 65)
          continue;  // the long depth once (depth blocks 0..5 and a partial panel)
        const std::vector<float> w = uniform(static_cast<std::size_t>(k * n), 10 + k * n);
        const std::vector<float> bias = uniform(static_cast<std::size_t>(n), 20 + n, 0.5f);
        const Tensor packed = layers::pack_weights(w.data(), k, n, n, DType::bf16);
        ASSERT_EQ(packed.dtype(), DType::bf16);
        for (std::int64_t m : {1, 5, 6, 7, 13, 97}) {
          const std::vector<float> x = uniform(static_cast<std::size_t>(m * k), 30 + m);
          for (GemmEpilogue e : {GemmEpilogue::none, GemmEpilogue::gelu_erf}) {
            const std::vector<float> y = run(ctx, x, m, k, packed, n, bias.data(), e);
            double worst = 0;  // largest error as a fraction of its bound
            for (std::int64_t r = 0; r < m; ++r)
              for (std::int64_t c = 0; c < n; ++c) {
                double s = 0, magnitude = 0;
                for (std::int64_t d = 0; d < k; ++d) {
                  const double p = rounded(x[r * k + d]) * rounded(w[d * n + c]);
                  s += p;
                  magnitude += std::fabs(p);
                }
                const double v = s + bias[c];
                double bound = gamma(k + 1) * (magnitude + std::fabs(bias[c]));
                double exact = v;
                if (e == GemmEpilogue::gelu_erf) {
                  exact = gelu64(v);
                  bound = kGeluLipschitz * bound + std::fabs(v) * (0.5 * kErfAbs + 4 * kU);
                }
                worst = std::max(worst, std::fabs(y[r * n + c] - exact) / (bound + 1e-300));
              }
            EXPECT_LE(worst, 1.0) << isa_name(isa) << " m " << m << " n " << n << " k " << k
                                  << " epilogue " << static_cast<int>(e);
          }
        }
      }
  }
}

// The rounding of x, bit for bit headcount::to_bf16 (round to nearest even, NaN kept quiet) on
// every ISA: ties both ways, the largest finite values (rounding up to inf), infinities, NaNs,
// subnormals, signed zeros, and random floats; lengths with a partial last vector.
TEST(PackedGemmBf16, RoundingKernelEqualsToBf16Bitwise) {
  std::vector<float> x;
  for (std::uint32_t bits :
       {0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x7f7fffffu,
        0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffa00000u, 0x00000001u,
        0x807fffffu, 0x00408000u}) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    x.push_back(f);
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 4000; ++i) {
    const std::uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    x.push_back(f);
  }
  for (Isa isa : isas()) {
    const simd::GemmKernels& kernels = simd::gemm_kernels(isa);
    for (std::int64_t n :
         {static_cast<std::int64_t>(x.size()), std::int64_t{13}, std::int64_t{1}}) {
      std::vector<std::uint16_t> y(static_cast<std::size_t>(n) + 1, 0xabcd);
      kernels.to_bf16(x.data(), y.data(), n);
      for (std::int64_t i = 0; i < n; ++i)
        ASSERT_EQ(y[static_cast<std::size_t>(i)], to_bf16(x[static_cast<std::size_t>(i)]).bits)
            << isa_name(isa) << " element " << i;
      EXPECT_EQ(y[static_cast<std::size_t>(n)], 0xabcd) << isa_name(isa) << ": wrote past n";
    }
  }
}

// A row alone (m = 1) against the same row inside every m = 1..40 (and 97, 200: several row
// blocks), at the end and in the middle, on 1 and 2 threads: bitwise equal, so every register
// tile shape is compared with the single-row one on every ISA.
TEST(PackedGemmBf16, RowResultDoesNotDependOnMPositionOrThreads) {
  const std::int64_t k = 514, n = 130;  // three depth blocks, the last partial; a partial panel
  const std::vector<float> w = uniform(static_cast<std::size_t>(k * n), 1);
  expect_row_invariance(layers::pack_weights(w.data(), k, n, n, DType::bf16), k, n, 40);
}

// The same on a depth the AMX tiles take (a multiple of 32): every chunk of 32 rows, every
// partial tile of 16, a row in the padded last tile of a call.
TEST(PackedGemmBf16, TileRowResultDoesNotDependOnMPositionOrThreads) {
  const std::int64_t k = 512, n = 130;
  const std::vector<float> w = uniform(static_cast<std::size_t>(k * n), 5);
  expect_row_invariance(layers::pack_weights(w.data(), k, n, n, DType::bf16), k, n, 40);
}

// Without vdpbf16ps (avx512, avx2, generic) packed_gemm widens x once and each panel once per
// task and runs the fp32 tiles; the bf16 kernel it replaced there widened every pair inside its
// loop. Both must give the same bits (same exact products, same fp32 accumulation order and
// multiply-add): the old kernel is called directly, panel by panel, beside packed_gemm, over
// row counts of every tile height, depths across the depth blocks of both kernels, partial
// panels and both epilogues.
TEST(PackedGemmBf16, WidenedPathEqualsTheBf16KernelBitwise) {
  int compared = 0;
  for (Isa isa : isas()) {
    const simd::GemmKernels& kernels = simd::gemm_kernels(isa);
    if (kernels.isa == Isa::avx512_bf16 || kernels.isa == Isa::amx_bf16)
      continue;  // vdpbf16ps or tiles: their own kernels, other order
    Context ctx({.threads = 2, .isa = isa});
    for (std::int64_t k : {2, 130, 386})
      for (std::int64_t n : {1, 64, 130}) {
        const std::vector<float> w = uniform(static_cast<std::size_t>(k * n), 40 + k * n);
        const std::vector<float> bias = uniform(static_cast<std::size_t>(n), 50 + n, 0.5f);
        const Tensor packed = layers::pack_weights(w.data(), k, n, n, DType::bf16);
        const std::int64_t nr = packed.size(2), lanes = k / 2 * nr;
        for (std::int64_t m : {1, 5, 6, 7, 97, 200}) {
          const std::vector<float> x = uniform(static_cast<std::size_t>(m * k), 60 + m);
          std::vector<std::uint16_t> xb(static_cast<std::size_t>(m * k));
          for (std::int64_t r = 0; r < m; ++r)
            kernels.to_bf16(x.data() + r * k, xb.data() + r * k, k);
          for (GemmEpilogue e : {GemmEpilogue::none, GemmEpilogue::gelu_erf}) {
            const std::vector<float> y = run(ctx, x, m, k, packed, n, bias.data(), e);
            std::vector<float> old(static_cast<std::size_t>(m * n), -7.0f);
            for (std::int64_t p = 0; p < packed.size(0); ++p)
              kernels.panel_bf16(xb.data(), k, m, packed.data<const std::uint32_t>() + p * lanes, k,
                                 bias.data() + p * nr, old.data() + p * nr, n,
                                 std::min(nr, n - p * nr), e);
            for (std::size_t i = 0; i < y.size(); ++i) {
              std::uint32_t a, b;
              std::memcpy(&a, &y[i], 4);
              std::memcpy(&b, &old[i], 4);
              ASSERT_EQ(a, b) << isa_name(isa) << " k " << k << " n " << n << " m " << m
                              << " element " << i;
            }
            ++compared;
          }
        }
      }
  }
  EXPECT_GT(compared, 0);  // generic at least
}

// The AMX kernels are in Isa::amx_bf16's table only, so no other ISA's results change with them
// (on a CPU without AMX, or with HEADCOUNT_ISA below amx_bf16, the dispatch is as before), and
// that table has them whenever the ISA resolves to it: bf16 always, int8 with AMX-INT8.
TEST(PackedGemmBf16, AmxKernelsOnlyInTheAmxTable) {
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512_bf16}) {
    if (!isa_supported(isa)) continue;
    const simd::GemmKernels& kernels = simd::gemm_kernels(isa);
    EXPECT_EQ(kernels.panel_bf16_amx, nullptr) << isa_name(isa);
    EXPECT_EQ(kernels.panel_i8_amx, nullptr) << isa_name(isa);
  }
  if (!isa_supported(Isa::amx_bf16)) {
    EXPECT_NE(best_isa(), Isa::amx_bf16);
    GTEST_SKIP() << "no AMX here (or HEADCOUNT_ISA caps it): the AMX table is not reachable";
  }
  const simd::GemmKernels& amx = simd::gemm_kernels(Isa::amx_bf16);
  EXPECT_EQ(amx.isa, Isa::amx_bf16);
  EXPECT_NE(amx.panel_bf16_amx, nullptr);
  EXPECT_EQ(amx.panel_i8_amx != nullptr, simd::amx::int8_available());
  // fp32 and the vector kernels stay avx512_bf16's: fp32 results do not change with AMX.
  const simd::GemmKernels& below = simd::gemm_kernels(Isa::avx512_bf16);
  EXPECT_EQ(amx.panel, below.panel);
  EXPECT_EQ(amx.panel_bf16, below.panel_bf16);
  EXPECT_EQ(amx.panel_i8, below.panel_i8);
}

TEST(PackedGemmBf16, BadArgumentsAreErrors) {
  const std::vector<float> w(15, 1.0f);
  expect_error([&] { layers::pack_weights(w.data(), 5, 3, 3, DType::bf16); },
               {"weights", "even k", "got 5"});
  expect_error([&] { layers::pack_weights(w.data(), 5, 3, 3, DType::f64); },
               {"weights dtype", "f32, bf16 or i8"});
}

}  // namespace
}  // namespace headcount::testing
