// The GEMM of the training executor and of cross-attention: row-major C[m, n] (+)= op(A)[m, k]
// · op(B)[k, n], with leading dimensions in elements so that A, B and C can be column ranges of
// wider matrices. op(X) is X or, with the transpose flag, Xᵀ read in place: the training
// backward's dX = dY·Wᵀ (trans_b) and dW = Xᵀ·dY (trans_a).
//
// It runs on the packed GEMM's micro-kernels (simd/gemm.h's StridedPanel), not on a BLAS: the
// weights change every training step, so they are not packed once as the inference
// projections are; instead op(A) and op(B) are read where they lie (a transposed A through its
// depth stride), and only panels of op(B) that cannot be (Bᵀ's, and a ragged last one) are
// copied into 64-column panels per call. The tasks are packed_gemm's TaskGrid. So every
// element of C is one fp32 accumulator over d = 0..k-1 in order (starting from C's value with
// `accumulate`), then + bias: the result does not depend on the thread count or on which rows
// are multiplied with it, as the inference side's, and no library's choice of kernel for this
// CPU (OpenBLAS falls back to its Prescott kernel on CPUs it does not know) changes the speed
// or the bits.
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
  float* c = nullptr;  // [m, n], row stride ldc; must not overlap a or b
  std::int64_t ldc = 0;
  const float* bias = nullptr;  // [n] added to every row after the sum (one rounding), or null
  bool accumulate = false;      // C += A·B instead of C = A·B
  bool trans_a = false;         // use Aᵀ: a holds the k x m matrix
  bool trans_b = false;         // use Bᵀ: b holds the n x k matrix
};

void gemm(Context& ctx, const GemmArgs& args);

}  // namespace headcount::layers
