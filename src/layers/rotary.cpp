// Rotary position embedding on projection rows (formula in rotary.h).
#include "layers/rotary.h"

#include <cmath>
#include <vector>

namespace headcount::layers {

void apply_rotary(Context& ctx, float* x, std::int64_t rows, std::int64_t row_stride,
                  std::int64_t heads, std::int64_t head_dim, float base,
                  std::int64_t first_position) {
  const std::int64_t half = head_dim / 2;
  // base^(-2i / head_dim), once per call (head_dim / 2 pow calls).
  std::vector<double> inv_freq(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i)
    inv_freq[static_cast<std::size_t>(i)] =
        std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / head_dim);
  const std::int64_t tasks = std::min<std::int64_t>(rows, ctx.threads());
  ctx.parallel_for_ranges(tasks, [&](std::int64_t task, int worker) {
    float* cs = static_cast<float*>(
        ctx.scratch(worker, static_cast<std::size_t>(2 * half) * sizeof(float)));
    const std::int64_t begin = rows * task / tasks, end = rows * (task + 1) / tasks;
    for (std::int64_t r = begin; r < end; ++r) {
      const double p = static_cast<double>(first_position + r);
      for (std::int64_t i = 0; i < half; ++i) {
        const double theta = p * inv_freq[static_cast<std::size_t>(i)];
        cs[i] = static_cast<float>(std::cos(theta));
        cs[half + i] = static_cast<float>(std::sin(theta));
      }
      float* row = x + r * row_stride;
      for (std::int64_t h = 0; h < heads; ++h) {
        float* a = row + h * head_dim;
        float* b = a + half;
        for (std::int64_t i = 0; i < half; ++i) {
          const float x1 = a[i], x2 = b[i], c = cs[i], s = cs[half + i];
          a[i] = x1 * c - x2 * s;
          b[i] = x2 * c + x1 * s;
        }
      }
    }
  });
}

}  // namespace headcount::layers
