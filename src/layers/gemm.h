// The one place headcount calls BLAS. Row-major C[m, n] (+)= A[m, k] · B[k, n], with leading
// dimensions in elements so that A, B and C can be column ranges of wider matrices.
#pragma once

#include <cstdint>

#include "headcount/context.h"

namespace headcount::layers {

struct GemmArgs {
  std::int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  std::int64_t lda = 0;
  const float* b = nullptr;
  std::int64_t ldb = 0;
  float* c = nullptr;
  std::int64_t ldc = 0;
  bool accumulate = false;  // C += A·B instead of C = A·B
};

// Splits the rows over the context's workers, each calling single-threaded OpenBLAS, so
// one pool of threads runs everything (see gemm.cpp).
void gemm(Context& ctx, const GemmArgs& args);

}  // namespace headcount::layers
