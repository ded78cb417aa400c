// RMSNorm forward/backward (formulas in rms_norm.h). The forward is the inference layer's row
// (layers::rms_norm_row), so a model normalises identically in both executors.
#include "train/rms_norm.h"

#include <algorithm>
#include <cmath>

#include "layers/rms_norm.h"

namespace headcount::train {
namespace {
constexpr std::int64_t kRowsPerTask = 16;
constexpr std::int64_t kColumnsPerTask = 64;
}  // namespace

void rms_norm_forward(Context& ctx, const float* x, std::int64_t rows, std::int64_t width,
                      const float* gamma, float* y, float* rstd, float eps) {
  ctx.parallel_for((rows + kRowsPerTask - 1) / kRowsPerTask, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(rows, (task + 1) * kRowsPerTask);
    for (std::int64_t r = task * kRowsPerTask; r < end; ++r)
      rstd[r] = layers::rms_norm_row(x + r * width, width, gamma, eps, y + r * width);
  });
}

void rms_norm_backward(Context& ctx, const RmsNormBackward& g) {
  const std::int64_t width = g.width;
  ctx.parallel_for((g.rows + kRowsPerTask - 1) / kRowsPerTask, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(g.rows, (task + 1) * kRowsPerTask);
    for (std::int64_t r = task * kRowsPerTask; r < end; ++r) {
      const float* in = g.x + r * width;
      const float* dy = g.dy + r * width;
      const double s = g.rstd[r];
      double gx = 0;  // Σ_c g_c · x̂_c
      for (std::int64_t c = 0; c < width; ++c)
        gx += static_cast<double>(dy[c]) * g.gamma[c] * (in[c] * s);
      const double mean_gx = gx / width;
      float* dx = g.dx + r * width;
      for (std::int64_t c = 0; c < width; ++c) {
        const double v = s * (static_cast<double>(dy[c]) * g.gamma[c] - in[c] * s * mean_gx);
        dx[c] = g.accumulate_dx ? dx[c] + static_cast<float>(v) : static_cast<float>(v);
      }
    }
  });
  ctx.parallel_for((width + kColumnsPerTask - 1) / kColumnsPerTask, [&](std::int64_t task, int) {
    const std::int64_t c0 = task * kColumnsPerTask, c1 = std::min(width, c0 + kColumnsPerTask);
    double dgamma[kColumnsPerTask] = {};
    for (std::int64_t r = 0; r < g.rows; ++r) {
      const float* in = g.x + r * width;
      const float* dy = g.dy + r * width;
      for (std::int64_t c = c0; c < c1; ++c)
        dgamma[c - c0] += static_cast<double>(dy[c]) * (in[c] * g.rstd[r]);
    }
    for (std::int64_t c = c0; c < c1; ++c) g.dgamma[c] = static_cast<float>(dgamma[c - c0]);
  });
}

}  // namespace headcount::train
