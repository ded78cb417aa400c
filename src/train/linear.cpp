// Linear forward/backward: three GEMMs and a column sum (see linear.h).
#include "train/linear.h"

#include <algorithm>

#include "layers/gemm.h"

namespace headcount::train {

void linear_forward(Context& ctx, const float* x, std::int64_t rows, std::int64_t in,
                    std::int64_t out, const float* w, const float* b, float* y) {
  layers::gemm(ctx, {.m = rows,
                     .n = out,
                     .k = in,
                     .a = x,
                     .lda = in,
                     .b = w,
                     .ldb = out,
                     .c = y,
                     .ldc = out,
                     .bias = b});
}

void linear_backward(Context& ctx, const LinearBackward& g) {
  // dW[in, out] = xᵀ[in, rows] · dy[rows, out]: x is read transposed in place.
  layers::gemm(ctx, {.m = g.in,
                     .n = g.out,
                     .k = g.rows,
                     .a = g.x,
                     .lda = g.in,
                     .b = g.dy,
                     .ldb = g.out,
                     .c = g.dw,
                     .ldc = g.out,
                     .trans_a = true});
  if (g.db != nullptr) column_sums(ctx, g.dy, g.rows, g.out, g.db);
  // dx[rows, in] = dy[rows, out] · Wᵀ[out, in]: W [in, out] is read transposed in place.
  if (g.dx != nullptr)
    layers::gemm(ctx, {.m = g.rows,
                       .n = g.in,
                       .k = g.out,
                       .a = g.dy,
                       .lda = g.out,
                       .b = g.w,
                       .ldb = g.out,
                       .c = g.dx,
                       .ldc = g.in,
                       .accumulate = g.accumulate_dx,
                       .trans_b = true});
}

void column_sums(Context& ctx, const float* m, std::int64_t rows, std::int64_t cols, float* out) {
  // Column chunks: each task owns its columns and walks all rows in order, so the sums are
  // the same whichever worker runs them.
  constexpr std::int64_t kColumns = 64;
  ctx.parallel_for((cols + kColumns - 1) / kColumns, [&](std::int64_t task, int) {
    const std::int64_t c0 = task * kColumns, c1 = std::min(cols, c0 + kColumns);
    double sum[kColumns] = {};
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* row = m + r * cols;
      for (std::int64_t c = c0; c < c1; ++c) sum[c - c0] += row[c];
    }
    for (std::int64_t c = c0; c < c1; ++c) out[c] = static_cast<float>(sum[c - c0]);
  });
}

}  // namespace headcount::train
