// The packed-weight GEMM's micro-kernels, one table per instruction set (gemm_<isa>.cpp), the
// only code of layers/packed_gemm.cpp that is compiled per ISA.
//
//   y[r, c] = epilogue(sum_d x[r, d] * panel[d, c] + bias[c])   for r < rows, c < cols <= 64
//
// `panel` is one packed panel of the weight matrix: k rows of gemm_panel_columns() = 64
// floats (columns past the matrix's width are zero), contiguous, so a step along d reads 256
// consecutive bytes. Every output element is one accumulator, started at 0 and updated by one
// multiply-add per d in increasing d (a fused FMA where the ISA has one; depth blocks pass the
// fp32 accumulator on through y, exactly), whatever `rows`, the
// row's position in its register tile and the tile's shape; then the bias is added (one
// rounding) and the epilogue applied. So a row's result depends only on that row of x, the
// weights and the ISA: not on how many rows are multiplied with it, nor on the thread that
// runs it. (The register tiles differ only in how many independent accumulators they hold.)
#pragma once

#include <cstdint>

#include "headcount/isa.h"

namespace headcount::simd {

enum class GemmEpilogue { none, gelu_erf };

struct GemmKernels {
  Isa isa = Isa::generic;
  int vector_floats = 4;
  // One panel times `rows` rows of x (row r at x + r*ldx, k floats), bias [cols] (may be
  // null: 0), into y (row r at y + r*ldy, cols floats written; the rest untouched).
  void (*panel)(const float* x, std::int64_t ldx, std::int64_t rows, const float* panel,
                std::int64_t k, const float* bias, float* y, std::int64_t ldy, std::int64_t cols,
                GemmEpilogue epilogue) = nullptr;
  // The vectorised GELU of the epilogue on n floats in place (n any), and the erf it is built
  // from (y = erf(x), n a multiple of vector_floats): exposed for their accuracy tests.
  void (*gelu_erf)(float* x, std::int64_t n) = nullptr;
  void (*erf)(const float* x, float* y, std::int64_t n) = nullptr;
};

const GemmKernels& gemm_kernels(Isa isa);

}  // namespace headcount::simd
