// The one place headcount calls BLAS. Row-major C[m, n] (+)= op(A)[m, k] · op(B)[k, n], with
// leading dimensions in elements so that A, B and C can be column ranges of wider matrices.
// op(X) is X or, with the transpose flag, Xᵀ read in place: the training backward's
// dX = dY·Wᵀ (trans_b) and dW = Xᵀ·dY (trans_a) need no transposed copies.
#pragma once

#include <cstdint>

#include "headcount/context.h"

namespace headcount::layers {

struct GemmArgs {
  std::int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;  // [m, k] row-major, or [k, m] with trans_a
  std::int64_t lda = 0;
  const float* b = nullptr;  // [k, n] row-major, or [n, k] with trans_b
  std::int64_t ldb = 0;
  float* c = nullptr;
  std::int64_t ldc = 0;
  bool accumulate = false;  // C += A·B instead of C = A·B
  bool trans_a = false;     // use Aᵀ: a holds the k x m matrix
  bool trans_b = false;     // use Bᵀ: b holds the n x k matrix
};

// Splits the rows over the context's workers, each calling single-threaded OpenBLAS, so
// one pool of threads runs everything (see gemm.cpp).
void gemm(Context& ctx, const GemmArgs& args);

}  // namespace headcount::layers
