#include "layers/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <limits>

#include "headcount/error.h"

namespace headcount::layers {
namespace {

void sgemm(const GemmArgs& g, std::int64_t row0, std::int64_t rows) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(rows),
              static_cast<blasint>(g.n), static_cast<blasint>(g.k), 1.0f, g.a + row0 * g.lda,
              static_cast<blasint>(g.lda), g.b, static_cast<blasint>(g.ldb),
              g.accumulate ? 1.0f : 0.0f, g.c + row0 * g.ldc, static_cast<blasint>(g.ldc));
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
  // second core saves.
  constexpr std::int64_t kMinBand = 32;
  const std::int64_t bands = std::clamp<std::int64_t>(g.m / kMinBand, 1, ctx.threads());
  if (bands == 1) return sgemm(g, 0, g.m);
  const std::int64_t band = (g.m + bands - 1) / bands;
  ctx.parallel_for(bands, [&](std::int64_t i, int) {
    const std::int64_t row0 = i * band;
    sgemm(g, row0, std::min(band, g.m - row0));
  });
}

}  // namespace headcount::layers
