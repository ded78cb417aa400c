#include "layers/layer_norm.h"

#include <algorithm>
#include <cmath>

namespace headcount::layers {

void add_layer_norm(Context& ctx, float* x, const float* residual, std::int64_t rows,
                    std::int64_t width, const float* gamma, const float* beta, float eps) {
  // A few rows per task: enough work to amortise the hand-off, enough tasks to balance.
  constexpr std::int64_t kRowsPerTask = 16;
  const std::int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  ctx.parallel_for(tasks, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(rows, (task + 1) * kRowsPerTask);
    for (std::int64_t r = task * kRowsPerTask; r < end; ++r) {
      float* row = x + r * width;
      if (residual != nullptr) {
        const float* add = residual + r * width;
        for (std::int64_t c = 0; c < width; ++c) row[c] += add[c];
      }
      double sum = 0.0;
      for (std::int64_t c = 0; c < width; ++c) sum += row[c];
      const double mean = sum / static_cast<double>(width);
      double squares = 0.0;
      for (std::int64_t c = 0; c < width; ++c) {
        const double d = row[c] - mean;
        squares += d * d;
      }
      const double inv_std = 1.0 / std::sqrt(squares / static_cast<double>(width) + eps);
      for (std::int64_t c = 0; c < width; ++c)
        row[c] = static_cast<float>((row[c] - mean) * inv_std) * gamma[c] + beta[c];
    }
  });
}

}  // namespace headcount::layers
