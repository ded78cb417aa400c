// The encoder's residual + LayerNorm (layers/add_layer_norm) against a long-double reference,
// and the same bits for a row whatever rows and threads surround it.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "headcount/context.h"
#include "layers/layer_norm.h"
#include "packed_gemm_testing.h"

using namespace headcount;

namespace {

struct Rows {
  std::int64_t rows, width;
  std::vector<float> x, residual, gamma, beta;
};

Rows make_rows(std::int64_t rows, std::int64_t width, float offset, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Rows r{rows, width, {}, {}, {}, {}};
  for (std::int64_t i = 0; i < rows * width; ++i) r.x.push_back(offset + normal(rng));
  for (std::int64_t i = 0; i < rows * width; ++i) r.residual.push_back(normal(rng));
  for (std::int64_t i = 0; i < width; ++i) r.gamma.push_back(1.0f + 0.5f * normal(rng));
  for (std::int64_t i = 0; i < width; ++i) r.beta.push_back(0.1f * normal(rng));
  return r;
}

}  // namespace

// Every output within 4 roundings of fp32 of the exact value: the normalised value z is
// computed in double (error ~1e-15 relative) and rounded to fp32 (1), then z·gamma (2) and
// + beta (3) round in fp32; 4 · 2^-24 · (|z·gamma| + |beta|) covers them with room for an
// unfused multiply-add. Widths cover the 32-lane sums' body and tail and the 8-float vectors of
// the normalisation; an offset of 1000 with unit spread checks that the two-pass variance does
// not cancel. Every instruction set this CPU runs (the row kernel is compiled per ISA).
TEST(AddLayerNorm, MatchesLongDoubleWithinFp32Rounding) {
  for (Isa isa : headcount::testing::packed::isas()) {
    SCOPED_TRACE(isa_name(isa));
    Context ctx({.threads = 1, .isa = isa});
    for (std::int64_t width : {1, 7, 8, 9, 17, 31, 32, 33, 63, 384, 1000})
      for (float offset : {0.0f, 1000.0f})
        for (bool with_residual : {false, true}) {
          Rows r = make_rows(5, width, offset,
                             static_cast<std::uint32_t>(width * 7 + (with_residual ? 1 : 0)));
          std::vector<float> y = r.x;
          const float eps = 1e-12f;
          layers::add_layer_norm(ctx, y.data(), with_residual ? r.residual.data() : nullptr, r.rows,
                                 width, r.gamma.data(), r.beta.data(), eps);
          for (std::int64_t row = 0; row < r.rows; ++row) {
            std::vector<long double> v(static_cast<std::size_t>(width));
            long double mean = 0;
            for (std::int64_t c = 0; c < width; ++c) {
              // The residual add itself is fp32, as in the encoder.
              const float sum = with_residual ? r.x[row * width + c] + r.residual[row * width + c]
                                              : r.x[row * width + c];
              v[static_cast<std::size_t>(c)] = sum;
              mean += sum;
            }
            mean /= width;
            long double var = 0;
            for (long double e : v) var += (e - mean) * (e - mean);
            var /= width;
            const long double inv_std = 1.0L / std::sqrt(var + eps);
            for (std::int64_t c = 0; c < width; ++c) {
              const long double z = (v[static_cast<std::size_t>(c)] - mean) * inv_std;
              const long double want = z * r.gamma[c] + r.beta[c];
              const double bound =
                  4.0 * std::ldexp(1.0, -24) *
                  static_cast<double>(std::fabs(z * r.gamma[c]) +
                                      std::fabs(static_cast<long double>(r.beta[c])));
              ASSERT_LE(std::fabs(static_cast<double>(y[row * width + c] - want)), bound)
                  << "width " << width << " offset " << offset << " residual " << with_residual
                  << " row " << row << " column " << c;
            }
          }
        }
  }
}

// A row's result depends on nothing but the row: alone, among 67 rows (several tasks), on 1
// or 2 threads, the bits agree. Batch invariance of the embeddings rests on this.
TEST(AddLayerNorm, RowBitsIndependentOfRowsAndThreads) {
  for (Isa isa : headcount::testing::packed::isas()) {
    SCOPED_TRACE(isa_name(isa));
    const std::int64_t width = 384, rows = 67;
    Rows r = make_rows(rows, width, 0.3f, 11);
    std::vector<float> together = r.x;
    Context two(ContextOptions{.threads = 2, .isa = isa});
    layers::add_layer_norm(two, together.data(), r.residual.data(), rows, width, r.gamma.data(),
                           r.beta.data(), 1e-12f);
    Context one({.threads = 1, .isa = isa});
    for (std::int64_t row : {0, 15, 16, 66}) {
      std::vector<float> alone(r.x.begin() + row * width, r.x.begin() + (row + 1) * width);
      layers::add_layer_norm(one, alone.data(), r.residual.data() + row * width, 1, width,
                             r.gamma.data(), r.beta.data(), 1e-12f);
      for (std::int64_t c = 0; c < width; ++c)
        ASSERT_EQ(std::bit_cast<std::uint32_t>(alone[c]),
                  std::bit_cast<std::uint32_t>(together[row * width + c]))
            << "row " << row << " column " << c;
    }
  }
}
