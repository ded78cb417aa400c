#include "layers/gemm.h"

#include <cblas.h>

#include <limits>

#include "headcount/error.h"

namespace headcount::layers {

void gemm(Context& ctx, const GemmArgs& g) {
  constexpr std::int64_t kMax = std::numeric_limits<blasint>::max();
  for (std::int64_t extent : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc})
    check(extent <= kMax, "gemm size", "at most the BLAS integer range (2^31 - 1)", extent);
  if (g.m == 0 || g.n == 0) return;
  openblas_set_num_threads(ctx.threads());
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(g.m),
              static_cast<blasint>(g.n), static_cast<blasint>(g.k), 1.0f, g.a,
              static_cast<blasint>(g.lda), g.b, static_cast<blasint>(g.ldb),
              g.accumulate ? 1.0f : 0.0f, g.c, static_cast<blasint>(g.ldc));
}

}  // namespace headcount::layers
