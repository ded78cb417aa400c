// LayerNorm forward/backward (formulas in layer_norm.h): the rows on the per-ISA kernels of
// simd/gemm.h (the statistics summed as the inference LayerNorm sums them), the column sums
// of dγ and dβ here, each column's rows in order.
#include "train/layer_norm.h"

#include <algorithm>
#include <cmath>

#include "simd/gemm.h"

namespace headcount::train {
namespace {
constexpr std::int64_t kRowsPerTask = 16;
constexpr std::int64_t kColumnsPerTask = 64;
}  // namespace

void layer_norm_forward(Context& ctx, const float* x, std::int64_t rows, std::int64_t width,
                        const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        float eps) {
  const auto& kernels = simd::gemm_kernels(ctx.isa());
  ctx.parallel_for((rows + kRowsPerTask - 1) / kRowsPerTask, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(rows, (task + 1) * kRowsPerTask);
    for (std::int64_t r = task * kRowsPerTask; r < end; ++r)
      kernels.layer_norm_train_row(x + r * width, width, gamma, beta, eps, y + r * width, mean + r,
                                   rstd + r);
  });
}

void layer_norm_backward(Context& ctx, const LayerNormBackward& g) {
  const std::int64_t width = g.width;
  const auto& kernels = simd::gemm_kernels(ctx.isa());
  ctx.parallel_for((g.rows + kRowsPerTask - 1) / kRowsPerTask, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(g.rows, (task + 1) * kRowsPerTask);
    for (std::int64_t r = task * kRowsPerTask; r < end; ++r)
      kernels.layer_norm_grad_row(g.x + r * width, g.dy + r * width, g.gamma, g.mean[r], g.rstd[r],
                                  width, g.dx + r * width, g.accumulate_dx);
  });
  ctx.parallel_for((width + kColumnsPerTask - 1) / kColumnsPerTask, [&](std::int64_t task, int) {
    const std::int64_t c0 = task * kColumnsPerTask, c1 = std::min(width, c0 + kColumnsPerTask);
    double dgamma[kColumnsPerTask] = {}, dbeta[kColumnsPerTask] = {};
    for (std::int64_t r = 0; r < g.rows; ++r) {
      const float* in = g.x + r * width;
      const float* dy = g.dy + r * width;
      for (std::int64_t c = c0; c < c1; ++c) {
        dgamma[c - c0] += static_cast<double>(dy[c]) * ((in[c] - g.mean[r]) * g.rstd[r]);
        dbeta[c - c0] += dy[c];
      }
    }
    for (std::int64_t c = c0; c < c1; ++c) {
      g.dgamma[c] = static_cast<float>(dgamma[c - c0]);
      g.dbeta[c] = static_cast<float>(dbeta[c - c0]);
    }
  });
}

}  // namespace headcount::train
