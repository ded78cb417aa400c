// RMSNorm with the residual add fused (formula in rms_norm.h).
#include "layers/rms_norm.h"

#include <algorithm>
#include <cmath>

namespace headcount::layers {

float rms_norm_row(const float* x, std::int64_t width, const float* gamma, float eps, float* y) {
  double sum = 0;
  for (std::int64_t i = 0; i < width; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(width) + eps));
  for (std::int64_t i = 0; i < width; ++i) y[i] = x[i] * inv * gamma[i];
  return inv;
}

void add_rms_norm(Context& ctx, float* x, const float* residual, std::int64_t rows,
                  std::int64_t width, const float* gamma, float eps, float* y) {
  constexpr std::int64_t kRowsPerTask = 16;
  const std::int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  ctx.parallel_for_ranges(tasks, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(rows, (task + 1) * kRowsPerTask);
    for (std::int64_t r = task * kRowsPerTask; r < end; ++r) {
      float* row = x + r * width;
      if (residual != nullptr) {
        const float* add = residual + r * width;
        for (std::int64_t i = 0; i < width; ++i) row[i] += add[i];
      }
      rms_norm_row(row, width, gamma, eps, y + r * width);
    }
  });
}

}  // namespace headcount::layers
