#include "layers/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <limits>

#include "headcount/error.h"

namespace headcount::layers {
namespace {

// C[row0 : row0 + rows, col0 : col0 + cols] of the product.
// A band of rows of C is a band of rows of op(A): rows of A, or columns of A when it is read
// transposed; likewise a band of columns of C is columns of B, or rows of B transposed.
void sgemm(const GemmArgs& g, std::int64_t row0, std::int64_t rows, std::int64_t col0,
           std::int64_t cols) {
  const float* a = g.a + (g.trans_a ? row0 : row0 * g.lda);
  const float* b = g.b + (g.trans_b ? col0 * g.ldb : col0);
  cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans,
              g.trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(rows),
              static_cast<blasint>(cols), static_cast<blasint>(g.k), 1.0f, a,
              static_cast<blasint>(g.lda), b, static_cast<blasint>(g.ldb),
              g.accumulate ? 1.0f : 0.0f, g.c + row0 * g.ldc + col0, static_cast<blasint>(g.ldc));
}

}  // namespace

// One threading model: the context's workers each multiply a band of rows with a
// single-threaded OpenBLAS call. Letting OpenBLAS run its own pthread pool next to the
// context's would leave two sets of threads spinning on two cores, each slowing the other
// down right after every hand-over between a GEMM and the attention kernel.
void gemm(Context& ctx, const GemmArgs& g) {
  constexpr std::int64_t kMax = std::numeric_limits<blasint>::max();
  for (std::int64_t extent : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc})
    check(extent <= kMax, "gemm size", "at most the BLAS integer range (2^31 - 1)", extent);
  if (g.m == 0 || g.n == 0) return;
  openblas_set_num_threads(1);
  // Bands of at least 32 rows: below that, repacking B in every band costs more than the
  // second core saves, so few rows (one sentence, one decode step) split the columns
  // instead, and each worker packs only its part of B.
  constexpr std::int64_t kMinBand = 32, kMinColumns = 64;
  const std::int64_t row_bands = std::clamp<std::int64_t>(g.m / kMinBand, 1, ctx.threads());
  if (row_bands > 1) {
    const std::int64_t band = (g.m + row_bands - 1) / row_bands;
    ctx.parallel_for(row_bands, [&](std::int64_t i, int) {
      const std::int64_t row0 = i * band;
      sgemm(g, row0, std::min(band, g.m - row0), 0, g.n);
    });
    return;
  }
  const std::int64_t col_bands = std::clamp<std::int64_t>(g.n / kMinColumns, 1, ctx.threads());
  if (col_bands == 1) return sgemm(g, 0, g.m, 0, g.n);
  const std::int64_t band = (g.n / col_bands + 15) / 16 * 16;  // whole vectors per band
  ctx.parallel_for(col_bands, [&](std::int64_t i, int) {
    const std::int64_t col0 = std::min(i * band, g.n);
    sgemm(g, 0, g.m, col0, std::min(band, g.n - col0));
  });
}

}  // namespace headcount::layers
