// LayerNorm forward/backward (formulas in layer_norm.h).
#include "train/layer_norm.h"

#include <algorithm>
#include <cmath>

namespace headcount::train {
namespace {
constexpr std::int64_t kRowsPerTask = 16;
constexpr std::int64_t kColumnsPerTask = 64;
}  // namespace

void layer_norm_forward(Context& ctx, const float* x, std::int64_t rows, std::int64_t width,
                        const float* gamma, const float* beta, float* y, float* mean, float* rstd, float eps) {
  ctx.parallel_for((rows + kRowsPerTask - 1) / kRowsPerTask, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(rows, (task + 1) * kRowsPerTask);
    for (std::int64_t r = task * kRowsPerTask; r < end; ++r) {
      const float* in = x + r * width;
      double sum = 0;
      for (std::int64_t c = 0; c < width; ++c) sum += in[c];
      const double mu = sum / static_cast<double>(width);
      double squares = 0;
      for (std::int64_t c = 0; c < width; ++c) squares += (in[c] - mu) * (in[c] - mu);
      const double inv = 1.0 / std::sqrt(squares / static_cast<double>(width) + eps);
      mean[r] = static_cast<float>(mu);
      rstd[r] = static_cast<float>(inv);
      // x̂ from the saved float statistics, exactly as the backward recomputes it.
      float* out = y + r * width;
      for (std::int64_t c = 0; c < width; ++c)
        out[c] = (in[c] - mean[r]) * rstd[r] * gamma[c] + beta[c];
    }
  });
}

void layer_norm_backward(Context& ctx, const LayerNormBackward& g) {
  const std::int64_t width = g.width;
  ctx.parallel_for((g.rows + kRowsPerTask - 1) / kRowsPerTask, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(g.rows, (task + 1) * kRowsPerTask);
    for (std::int64_t r = task * kRowsPerTask; r < end; ++r) {
      const float* in = g.x + r * width;
      const float* dy = g.dy + r * width;
      const float mu = g.mean[r], inv = g.rstd[r];
      double sum_g = 0, sum_gx = 0;
      for (std::int64_t c = 0; c < width; ++c) {
        const double gc = static_cast<double>(dy[c]) * g.gamma[c];
        sum_g += gc;
        sum_gx += gc * ((in[c] - mu) * inv);
      }
      const float mean_g = static_cast<float>(sum_g / static_cast<double>(width));
      const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(width));
      float* dx = g.dx + r * width;
      for (std::int64_t c = 0; c < width; ++c) {
        const float xhat = (in[c] - mu) * inv;
        const float value = inv * (dy[c] * g.gamma[c] - mean_g - xhat * mean_gx);
        dx[c] = g.accumulate_dx ? dx[c] + value : value;
      }
    }
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
