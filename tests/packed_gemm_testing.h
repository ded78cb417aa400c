// What the packed GEMM's tests share (test_packed_gemm.cpp, _bf16.cpp, _i8.cpp): the ISAs this
// CPU runs, seeded inputs, one call, fp32's unit roundoff and γ(j), the GELU constants their
// bounds use, and the row-invariance check every weight dtype must pass.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "headcount/context.h"
#include "layers/packed_gemm.h"

namespace headcount::testing::packed {

using layers::GemmEpilogue;

inline std::vector<Isa> isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx_bf16})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

inline std::vector<float> uniform(std::size_t count, std::uint64_t seed, float bound = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-bound, bound);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<float> run(Context& ctx, const std::vector<float>& x, std::int64_t m,
                              std::int64_t k, const Tensor& packed, std::int64_t n,
                              const float* bias, GemmEpilogue epilogue = GemmEpilogue::none) {
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

constexpr double kU = 0x1p-24;  // unit roundoff of fp32
inline double gamma(std::int64_t j) {
  return static_cast<double>(j) * kU / (1.0 - static_cast<double>(j) * kU);
}

// Max |gelu'(v)| = Φ(√2) + √2·φ(√2) = 1.1289: how far GELU moves an error in its input.
constexpr double kGeluLipschitz = 1.129;
// The vectorised erf's error bound stated in gemm_impl.h (measured by ErfWithinStatedBound:
// max 3.22e-7 absolute and relative with FMA, 3.52e-7 on generic SSE2; 6 ulp of 1 at most).
constexpr double kErfAbs = 4e-7;

inline double gelu64(double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }

// A row alone (m = 1) against the same row inside every m = 1..max_m (and 97, 200: several row
// blocks), at the end and in the middle of the matrix, on 1 and 2 threads, with and without the
// GELU epilogue: bitwise equal. Every m exercises a different register tile for the last rows,
// so every tile shape of every ISA is compared with the single-row one.
inline void expect_row_invariance(const Tensor& packed, std::int64_t k, std::int64_t n,
                                  std::int64_t max_m) {
  const std::vector<float> bias = uniform(static_cast<std::size_t>(n), 2);
  const std::vector<float> probe = uniform(static_cast<std::size_t>(k), 3);
  for (Isa isa : isas()) {
    Context one({.threads = 1, .isa = isa}), two({.threads = 2, .isa = isa});
    for (GemmEpilogue e : {GemmEpilogue::none, GemmEpilogue::gelu_erf}) {
      const std::vector<float> alone = run(one, probe, 1, k, packed, n, bias.data(), e);
      std::vector<std::int64_t> ms;
      for (std::int64_t m = 1; m <= max_m; ++m) ms.push_back(m);
      ms.push_back(97);
      ms.push_back(200);
      for (std::int64_t m : ms) {
        std::vector<float> x = uniform(static_cast<std::size_t>(m * k), 100 + m);
        for (std::int64_t pos : {m - 1, m / 2}) {
          std::copy(probe.begin(), probe.end(), x.begin() + pos * k);
          for (Context* ctx : {&one, &two}) {
            const std::vector<float> y = run(*ctx, x, m, k, packed, n, bias.data(), e);
            for (std::int64_t c = 0; c < n; ++c)
              ASSERT_EQ(y[static_cast<std::size_t>(pos * n + c)],
                        alone[static_cast<std::size_t>(c)])
                  << isa_name(isa) << " m " << m << " row " << pos << " column " << c << " threads "
                  << ctx->threads();
          }
        }
      }
    }
  }
}

}  // namespace headcount::testing::packed
