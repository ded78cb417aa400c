// The SIMD layer: the vectorised exp's error bound, and every micro-kernel of every
// instruction set against plain loops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "headcount/context.h"
#include "headcount/tensor.h"
#include "simd/tiles.h"

namespace headcount::testing {
namespace {

std::vector<Isa> isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512_bf16})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

// The bound stated in tiles_impl.h: <= 2 ulp relative error over the range a softmax uses
// (x <= 0 down to where exp underflows), and over the whole finite range it accepts.
TEST(VectorExp, WithinTwoUlpEverywhere) {
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.0f; v += 0.000731f) x.push_back(v);
  while (x.size() % 16) x.push_back(0.0f);
  std::vector<float> y(x.size());
  for (Isa isa : isas()) {
    simd::vector_exp(isa, x.data(), y.data(), static_cast<std::int64_t>(x.size()));
    double worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double exact = std::exp(static_cast<double>(x[i]));
      const double ulp = std::ldexp(1.0, std::ilogb(exact) - 23);
      worst = std::max(worst, std::fabs(y[i] - exact) / ulp);
    }
    EXPECT_LE(worst, 2.0) << isa_name(isa);
  }
}

// Below ln(FLT_MIN) every ISA returns exactly 0 (no subnormal results: on Intel a vscalefps
// that underflows takes a microcode assist), and just above it a normal number.
TEST(VectorExp, NoSubnormalResults) {
  std::vector<float> x;
  for (float v = -103.9f; v < -87.34f; v += 0.37f) x.push_back(v);
  x.push_back(-87.33f);
  while (x.size() % 16) x.push_back(-87.33f);
  std::vector<float> y(x.size());
  for (Isa isa : isas()) {
    simd::vector_exp(isa, x.data(), y.data(), static_cast<std::int64_t>(x.size()));
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (x[i] < -87.34f)
        EXPECT_EQ(y[i], 0.0f) << isa_name(isa) << " exp(" << x[i] << ")";
      else
        EXPECT_GE(y[i], std::numeric_limits<float>::min())
            << isa_name(isa) << " exp(" << x[i] << ")";
    }
  }
}

TEST(VectorExp, UnderflowAndMinusInfinityGiveZero) {
  std::vector<float> x = {-INFINITY, -1e30f, -110.0f, -104.0f, 0.0f, 1.0f, -0.0f, 88.0f,
                          -50.0f,    -1.0f,  2.0f,    3.0f,    4.0f, 5.0f, 6.0f,  7.0f};
  std::vector<float> y(16);
  for (Isa isa : isas()) {
    simd::vector_exp(isa, x.data(), y.data(), 16);
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_EQ(y[1], 0.0f);
    EXPECT_EQ(y[2], 0.0f);
    EXPECT_EQ(y[3], 0.0f);
    EXPECT_EQ(y[4], 1.0f) << isa_name(isa);
    EXPECT_EQ(y[6], 1.0f);
    EXPECT_TRUE(std::isfinite(y[7]));
  }
}

// The softmax's 2^x (vec_math.h): <= 2 ulp relative error over [-126, 0], the range its
// arguments s - m take down to where the result would be subnormal, and over the positive
// range the header promises (x <= 127); exactly 0 below -126, -inf included, on every ISA.
TEST(VectorExp2, WithinTwoUlpOverTheSoftmaxRange) {
  std::vector<float> x;
  for (float v = -126.0f; v <= 127.0f; v += 0.000977f) x.push_back(v);
  for (float v = -1.0f; v <= 0.0f; v += 1.0f / 4096)
    x.push_back(v);  // near 0, where most of P lies
  x.push_back(-126.0f);
  x.push_back(127.0f);
  while (x.size() % 16) x.push_back(0.0f);
  std::vector<float> y(x.size());
  for (Isa isa : isas()) {
    simd::vector_exp2(isa, x.data(), y.data(), static_cast<std::int64_t>(x.size()));
    double worst = 0;
    float worst_x = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double exact = std::exp2(static_cast<double>(x[i]));
      const double ulp = std::ldexp(1.0, std::ilogb(exact) - 23);
      const double err = std::fabs(y[i] - exact) / ulp;
      if (err > worst) worst = err, worst_x = x[i];
    }
    EXPECT_LE(worst, 2.0) << isa_name(isa) << " at x = " << worst_x;
  }
}

TEST(VectorExp2, BelowMinus126AndMinusInfinityGiveZero) {
  std::vector<float> x = {-INFINITY, -1e30f, -150.0f, -126.5f, -126.0001f, -126.0f, 0.0f,   -0.0f,
                          -125.9f,   -1.0f,  -0.5f,   0.5f,    1.0f,       3.0f,    -60.0f, 127.0f};
  std::vector<float> y(16);
  for (Isa isa : isas()) {
    simd::vector_exp2(isa, x.data(), y.data(), 16);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(y[i], 0.0f) << isa_name(isa) << " 2^" << x[i];
    EXPECT_EQ(y[5], std::numeric_limits<float>::min()) << isa_name(isa);
    EXPECT_EQ(y[6], 1.0f) << isa_name(isa);
    EXPECT_EQ(y[7], 1.0f) << isa_name(isa);
    EXPECT_NEAR(y[10], std::sqrt(0.5), 2 * std::ldexp(1.0, -24)) << isa_name(isa);  // 2 ulp of 2^-1
    EXPECT_EQ(y[9], 0.5f) << isa_name(isa);
    EXPECT_EQ(y[12], 2.0f) << isa_name(isa);
    EXPECT_EQ(y[13], 8.0f) << isa_name(isa);
    EXPECT_EQ(y[14], std::ldexp(1.0f, -60)) << isa_name(isa);
    EXPECT_EQ(y[15], std::ldexp(1.0f, 127)) << isa_name(isa);
  }
}

TEST(TileKernels, ScoresAndWeightedSumMatchPlainLoops) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (Isa isa : isas()) {
    const simd::TileKernels& k = simd::tile_kernels(isa);
    const std::int64_t w = k.vector_floats;
    for (std::int64_t rows : {1, 5, 6, 7, 13, 64}) {
      for (std::int64_t depth : {1, 8, 59}) {
        const std::int64_t cols = 3 * w, ldk = cols + w;
        std::vector<float> q(rows * depth), kt(depth * ldk), s(rows * cols);
        for (float& v : q) v = normal(rng);
        for (float& v : kt) v = normal(rng);
        k.scores_f32(q.data(), depth, kt.data(), ldk, depth, s.data(), cols, rows, cols, 0.5f,
                     nullptr);
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t c = 0; c < cols; ++c) {
            double dot = 0, mag = 0;
            for (std::int64_t d = 0; d < depth; ++d) {
              dot += double(q[r * depth + d]) * kt[d * ldk + c];
              mag += std::fabs(double(q[r * depth + d]) * kt[d * ldk + c]);
            }
            // fp32 dot product of length depth: |error| <= depth·u·sum|terms| (gamma_n).
            ASSERT_NEAR(s[r * cols + c], 0.5 * dot, 0.5 * depth * std::ldexp(mag, -24) + 1e-30)
                << isa_name(isa) << " r" << r << " c" << c;
          }
        // weighted sum: acc = alpha·acc + p·v
        const std::int64_t keys = depth, width = 2 * w;
        std::vector<float> p(rows * keys), v(keys * width), acc(rows * width), alpha(rows);
        for (float& x : p) x = std::fabs(normal(rng));
        for (float& x : v) x = normal(rng);
        for (float& x : acc) x = normal(rng);
        for (float& x : alpha) x = std::fabs(normal(rng));
        std::vector<float> before = acc;
        k.weighted_sum_f32(p.data(), keys, 1, v.data(), width, keys, acc.data(), width, rows, width,
                           alpha.data());
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t e = 0; e < width; ++e) {
            double want = double(alpha[r]) * before[r * width + e], mag = std::fabs(want);
            for (std::int64_t c = 0; c < keys; ++c) {
              want += double(p[r * keys + c]) * v[c * width + e];
              mag += std::fabs(double(p[r * keys + c]) * v[c * width + e]);
            }
            ASSERT_NEAR(acc[r * width + e], want, (keys + 2) * std::ldexp(mag, -24) + 1e-30)
                << isa_name(isa);
          }
      }
    }
  }
}

// The score product's column maxima (col_max) are the maxima of what it stored, and a softmax
// step given them writes the same bits as one that reads the tile for them: every row count
// (full and short register tiles, several row blocks), NaN scores (never taken), a column of
// NaN only (-inf), and -inf scores.
TEST(TileKernels, ScoreColumnMaximaAreTheSoftmaxsOwn) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              minus_inf = -std::numeric_limits<float>::infinity();
  for (Isa isa : isas()) {
    const simd::TileKernels& k = simd::tile_kernels(isa);
    const std::int64_t w = k.vector_floats;
    for (std::int64_t rows : {1, 5, 6, 7, 13, 96}) {
      const std::int64_t depth = 19, cols = 5 * w, lds = cols + w;
      std::vector<float> q(rows * depth), kt(depth * cols), s(rows * lds), col_max(cols, 123.0f);
      for (float& v : q) v = normal(rng);
      for (float& v : kt) v = normal(rng);
      kt[3] = nan;                                         // column 3: NaN in every row
      q[(rows / 2) * depth + 2] = nan;                     // a NaN row: NaN in every column
      if (rows > 1) kt[depth / 2 * cols + 7] = -INFINITY;  // column 7: -inf or NaN rows
      k.scores_f32(q.data(), depth, kt.data(), cols, depth, s.data(), lds, rows, cols, 0.25f,
                   col_max.data());
      for (std::int64_t c = 0; c < cols; ++c) {
        float want = minus_inf;
        for (std::int64_t r = 0; r < rows; ++r)
          want = s[r * lds + c] > want ? s[r * lds + c] : want;
        ASSERT_EQ(std::memcmp(&col_max[c], &want, 4), 0)
            << isa_name(isa) << " rows " << rows << " column " << c;
      }
      std::vector<float> s2 = s, max(cols), sum(cols, 1.0f), alpha(cols);
      for (std::int64_t c = 0; c < cols; ++c) max[c] = c % 4 == 0 ? minus_inf : normal(rng);
      std::vector<float> max2 = max, sum2 = sum, alpha2 = alpha;
      k.softmax_columns(s.data(), lds, rows, cols, max.data(), sum.data(), alpha.data(), nullptr);
      k.softmax_columns(s2.data(), lds, rows, cols, max2.data(), sum2.data(), alpha2.data(),
                        col_max.data());
      ASSERT_EQ(std::memcmp(s.data(), s2.data(), s.size() * 4), 0)
          << isa_name(isa) << " rows " << rows;
      ASSERT_EQ(std::memcmp(max.data(), max2.data(), max.size() * 4), 0) << isa_name(isa);
      ASSERT_EQ(std::memcmp(sum.data(), sum2.data(), sum.size() * 4), 0) << isa_name(isa);
      ASSERT_EQ(std::memcmp(alpha.data(), alpha2.data(), alpha.size() * 4), 0) << isa_name(isa);
    }
  }
}

// One online-softmax step down columns, against the same step in double.
// mask_columns against its definition: s[k, c] becomes -inf outside [lo[c], hi[c]), every
// other value untouched (bitwise), including lo > hi, empty and whole-tile intervals.
TEST(TileKernels, MaskColumnsHidesExactlyTheKeysOutsideEachInterval) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (Isa isa : isas()) {
    const simd::TileKernels& k = simd::tile_kernels(isa);
    const std::int64_t cols = 4 * k.vector_floats, keys = 37, lds = cols + 3;
    std::vector<std::int32_t> lo(cols), hi(cols);
    for (std::int64_t c = 0; c < cols; ++c) {
      lo[c] = static_cast<std::int32_t>(c % 5 == 0 ? 0 : rng() % keys);
      hi[c] = static_cast<std::int32_t>(
          c % 7 == 0 ? keys + 9 : rng() % (keys + 1));  // some hi < lo: all hidden
    }
    std::vector<float> s(keys * lds), before;
    for (float& v : s) v = normal(rng);
    before = s;
    k.mask_columns(s.data(), lds, keys, cols, lo.data(), hi.data());
    for (std::int64_t r = 0; r < keys; ++r)
      for (std::int64_t c = 0; c < lds; ++c) {
        const float got = s[r * lds + c], was = before[r * lds + c];
        if (c < cols && (r < lo[c] || r >= hi[c])) {
          ASSERT_EQ(got, -std::numeric_limits<float>::infinity())
              << isa_name(isa) << " key " << r << " column " << c;
        } else {
          ASSERT_EQ(std::memcmp(&got, &was, sizeof got), 0)
              << isa_name(isa) << " key " << r << " column " << c;
        }
      }
  }
}

// One online-softmax step down columns, against the same step in double. The step takes
// exp(s - m) as 2^(fl(s·log2e) - fl(m·log2e)), so the error of one term is 2^x's 2 ulp
// (relative 2^-22) plus its argument's: the two rounded products (u·|s|·log2e and
// u·|m|·log2e), the subtraction (u·|x|) and log2e's own rounding (u/2·|s - m|·log2e), each
// times ln 2 in the result: relative u·(|s| + |m| + 1.5·|s - m|).
TEST(TileKernels, SoftmaxColumnsIsOneOnlineSoftmaxStep) {
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const float minus_inf = -std::numeric_limits<float>::infinity();
  for (Isa isa : isas()) {
    const simd::TileKernels& k = simd::tile_kernels(isa);
    const std::int64_t cols = 2 * k.vector_floats, keys = 9;
    std::vector<float> s(keys * cols), max(cols), sum(cols), alpha(cols);
    for (float& x : s) x = normal(rng);
    for (std::int64_t c = 0; c < cols; ++c) {
      max[c] = c % 3 == 0 ? minus_inf : normal(rng);  // some columns start empty
      sum[c] = max[c] == minus_inf ? 0.0f : 1.0f + std::fabs(normal(rng));
    }
    for (std::int64_t r = 0; r < keys; ++r)
      s[r * cols + 1] = minus_inf;  // column 1 sees nothing...
    max[1] = minus_inf;
    sum[1] = 0.0f;
    s[4 * cols + 2] = minus_inf;  // ...column 2 loses one key
    const std::vector<float> s0 = s, max0 = max, sum0 = sum;
    k.softmax_columns(s.data(), cols, keys, cols, max.data(), sum.data(), alpha.data(), nullptr);
    for (std::int64_t c = 0; c < cols; ++c) {
      double m = max0[c];
      for (std::int64_t r = 0; r < keys; ++r) m = std::max<double>(m, s0[r * cols + c]);
      if (m == -INFINITY) {
        EXPECT_EQ(alpha[c], 1.0f) << isa_name(isa);
        EXPECT_EQ(sum[c], 0.0f);
        for (std::int64_t r = 0; r < keys; ++r) EXPECT_EQ(s[r * cols + c], 0.0f);
        continue;
      }
      const double a = std::exp(double(max0[c]) - m);
      auto term_bound = [m](double x) {
        return std::ldexp(1.0, -22) +
               std::ldexp(std::fabs(x) + std::fabs(m) + 1.5 * std::fabs(x - m), -24);
      };
      double worst_term = 0;
      double l = a * sum0[c];
      for (std::int64_t r = 0; r < keys; ++r) {
        const double e = std::exp(double(s0[r * cols + c]) - m);
        l += e;
        if (e == 0) {  // a masked key (-inf)
          EXPECT_EQ(s[r * cols + c], 0.0f);
          continue;
        }
        worst_term = std::max(worst_term, term_bound(s0[r * cols + c]));
        EXPECT_NEAR(s[r * cols + c], e, term_bound(s0[r * cols + c]) * e + 1e-30) << isa_name(isa);
      }
      EXPECT_EQ(max[c], float(m));
      if (a == 0) {
        EXPECT_EQ(alpha[c], 0.0f);  // the column was empty before this step
      } else {
        worst_term = std::max(worst_term, term_bound(max0[c]));
        EXPECT_NEAR(alpha[c], a, term_bound(max0[c]) * a);
      }
      // each term (and alpha) as above, plus keys + 1 fp32 additions
      EXPECT_NEAR(sum[c], l, (worst_term + (keys + 1) * std::ldexp(1.0, -24)) * l);
    }
  }
}

// The softmax's exponentials are 2^x's bits exactly (vector_exp2, whose bound is tested
// above) of fl(s·log2e) - fl(m·log2e), each product rounded on its own: each P entry and
// alpha against vector_exp2 of that difference made here, over scores that reach below
// exp's underflow from the column's maximum, -inf among them. The key holding the maximum
// gets exactly 1 (the backward's lse = m for a row with one visible key relies on it).
TEST(TileKernels, SoftmaxExponentialsAreExp2BitForBit) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> spread(-170.0f, 5.0f);
  const float minus_inf = -std::numeric_limits<float>::infinity();
  for (Isa isa : isas()) {
    const simd::TileKernels& k = simd::tile_kernels(isa);
    const std::int64_t w = k.vector_floats, cols = 2 * w, keys = 37;
    std::vector<float> s(keys * cols), max(cols), sum(cols, 1.0f), alpha(cols);
    for (float& x : s) x = spread(rng);
    for (std::int64_t c = 0; c < cols; ++c) max[c] = c % 4 == 0 ? minus_inf : spread(rng);
    for (std::int64_t r = 0; r < keys; r += 5) s[r * cols + 3] = minus_inf;
    const std::vector<float> s0 = s, max0 = max;
    k.softmax_columns(s.data(), cols, keys, cols, max.data(), sum.data(), alpha.data(), nullptr);
    std::vector<float> diff(static_cast<std::size_t>(keys * cols + cols)), want(diff.size());
    // volatile: the products must not fuse into the subtraction (-ffp-contract=fast)
    auto base2 = [](float x) {
      volatile float p = x * 1.44269504088896341f;
      return static_cast<float>(p);
    };
    for (std::int64_t r = 0; r < keys; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        diff[r * cols + c] = base2(s0[r * cols + c]) - base2(max[c]);
    for (std::int64_t c = 0; c < cols; ++c) diff[keys * cols + c] = base2(max0[c]) - base2(max[c]);
    simd::vector_exp2(isa, diff.data(), want.data(), static_cast<std::int64_t>(diff.size()));
    for (std::int64_t r = 0; r < keys; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(std::memcmp(&s[r * cols + c], &want[r * cols + c], 4), 0)
            << isa_name(isa) << " key " << r << " column " << c << ": " << s[r * cols + c] << " vs "
            << want[r * cols + c];
    for (std::int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(std::memcmp(&alpha[c], &want[keys * cols + c], 4), 0)
          << isa_name(isa) << " alpha " << c;
    for (std::int64_t c = 0; c < cols; ++c) {
      std::int64_t at = 0;
      for (std::int64_t r = 1; r < keys; ++r) at = s0[r * cols + c] > s0[at * cols + c] ? r : at;
      if (s0[at * cols + c] == max[c])
        EXPECT_EQ(s[at * cols + c], 1.0f) << isa_name(isa) << " column " << c;
    }
  }
}

// The inputs' inf/NaN scan: every length up to 5 vectors (the 4-vector body, single vectors,
// the scalar tail), each of +inf, -inf and NaN at every position, found; the largest finite
// values, subnormals and -0 are not.
TEST(TileKernels, AnyNonFiniteFindsEveryInfAndNaN) {
  const float bad[3] = {std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()};
  for (Isa isa : isas()) {
    const simd::TileKernels& k = simd::tile_kernels(isa);
    for (std::int64_t n = 0; n <= 5 * k.vector_floats + 3; ++n) {
      std::vector<float> x(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i)
        x[i] = i % 4 == 0   ? std::numeric_limits<float>::max()
               : i % 4 == 1 ? -std::numeric_limits<float>::denorm_min()
               : i % 4 == 2 ? -0.0f
                            : -std::numeric_limits<float>::max();
      ASSERT_FALSE(k.any_non_finite_f32(x.data(), n)) << isa_name(isa) << " n " << n;
      for (std::int64_t i = 0; i < n; ++i)
        for (float b : bad) {
          const float keep = x[i];
          x[i] = b;
          ASSERT_TRUE(k.any_non_finite_f32(x.data(), n))
              << isa_name(isa) << " n " << n << " at " << i << " " << b;
          x[i] = keep;
        }
    }
  }
}

// The Q^T transpose: m rows of `depth` floats (each row its own allocation, with a
// distinct value per element, NaN bit patterns included) into columns ldout apart; every m to
// 16 and depths around the 16 x 16 blocks. Bit-exact (a copy), and nothing outside the m
// columns written.
TEST(TileKernels, TransposeRowsIsAnExactCopy) {
  for (Isa isa : isas()) {
    const simd::TileKernels& k = simd::tile_kernels(isa);
    for (std::int64_t m = 1; m <= 16; ++m)
      for (std::int64_t depth : {1, 15, 16, 17, 32, 64, 79}) {
        const std::int64_t ldout = 19 + m;  // not a multiple of the vector width
        std::vector<std::vector<std::uint32_t>> rows(static_cast<std::size_t>(m));
        std::vector<const float*> ptrs;
        for (std::int64_t j = 0; j < m; ++j) {
          for (std::int64_t d = 0; d < depth; ++d)
            rows[j].push_back(static_cast<std::uint32_t>((j << 16) | d) |
                              (d % 7 == 3 ? 0x7fc00000u : 0x3f000000u));
          ptrs.push_back(reinterpret_cast<const float*>(rows[j].data()));
        }
        const std::uint32_t fence = 0xdeadbeefu;
        std::vector<std::uint32_t> out(static_cast<std::size_t>(depth * ldout), fence);
        k.transpose_rows_f32(ptrs.data(), m, depth, reinterpret_cast<float*>(out.data()), ldout);
        for (std::int64_t d = 0; d < depth; ++d)
          for (std::int64_t c = 0; c < ldout; ++c)
            ASSERT_EQ(out[d * ldout + c], c < m ? rows[c][d] : fence)
                << isa_name(isa) << " m " << m << " depth " << depth << " at [" << d << ", " << c
                << "]";
      }
  }
}

// The write-out's y = x * s: every length to 3 vectors + 3, the same bits as the scalar product
// (one IEEE multiply either way), y written only on [0, n).
TEST(TileKernels, ScaleIsTheScalarProduct) {
  for (Isa isa : isas()) {
    const simd::TileKernels& k = simd::tile_kernels(isa);
    for (std::int64_t n = 0; n <= 3 * k.vector_floats + 3; ++n) {
      std::vector<float> x(static_cast<std::size_t>(n)), y(static_cast<std::size_t>(n) + 1, -7.0f);
      for (std::int64_t i = 0; i < n; ++i) x[i] = 1.0f / static_cast<float>(3 + i) - 0.1f;
      const float s = 1.0f / 2.9f;
      k.scale_f32(x.data(), s, y.data(), n);
      for (std::int64_t i = 0; i < n; ++i) {
        const float want = x[i] * s;
        ASSERT_EQ(std::memcmp(&y[i], &want, 4), 0) << isa_name(isa) << " n " << n << " at " << i;
      }
      ASSERT_EQ(y[n], -7.0f) << isa_name(isa) << " n " << n;
    }
  }
}

}  // namespace
}  // namespace headcount::testing
