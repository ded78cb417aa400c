#include "layers/layer_norm.h"

#include <algorithm>

#include "simd/gemm.h"

namespace headcount::layers {

void add_layer_norm(Context& ctx, float* x, const float* residual, std::int64_t rows,
                    std::int64_t width, const float* gamma, const float* beta, float eps) {
  // A few rows per task: enough work to amortise the hand-off, enough tasks to balance.
  constexpr std::int64_t kRowsPerTask = 16;
  // The row arithmetic is compiled per instruction set (simd/gemm_impl.h), like the GEMM.
  const auto norm_row = simd::gemm_kernels(ctx.isa()).layer_norm_row;
  const std::int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  // By ranges: worker w normalises the rows whose GEMM output it wrote (packed_gemm.cpp's
  // row groups), and keeps them in its cache for the next projection.
  ctx.parallel_for_ranges(tasks, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(rows, (task + 1) * kRowsPerTask);
    for (std::int64_t r = task * kRowsPerTask; r < end; ++r)
      norm_row(x + r * width, residual == nullptr ? nullptr : residual + r * width, width, gamma,
               beta, eps);
  });
}

void add_layer_norm_into(Context& ctx, float* x, const float* residual, std::int64_t rows,
                         std::int64_t width, const float* gamma, const float* beta, float eps,
                         float* y) {
  constexpr std::int64_t kRowsPerTask = 16;
  const auto norm_row = simd::gemm_kernels(ctx.isa()).layer_norm_row;
  const std::int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  ctx.parallel_for_ranges(tasks, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(rows, (task + 1) * kRowsPerTask);
    for (std::int64_t r = task * kRowsPerTask; r < end; ++r) {
      float* row = x + r * width;
      if (residual != nullptr)
        for (std::int64_t i = 0; i < width; ++i) row[i] += residual[r * width + i];
      std::copy_n(row, width, y + r * width);
      norm_row(y + r * width, nullptr, width, gamma, beta, eps);
    }
  });
}

}  // namespace headcount::layers
