// Rotary position embedding on projection rows (formula in rotary.h).
#include "layers/rotary.h"

#include <algorithm>
#include <cmath>

namespace headcount::layers {

void apply_rotary(Context& ctx, float* x, std::int64_t rows, std::int64_t row_stride,
                  std::int64_t heads, std::int64_t head_dim, float base,
                  std::int64_t first_position, bool inverse) {
  const std::int64_t half = head_dim / 2;
  const std::int64_t tasks = std::min<std::int64_t>(rows, ctx.threads());
  ctx.parallel_for_ranges(tasks, [&](std::int64_t task, int worker) {
    // Worker scratch (nothing allocates once warm, as decode_step promises): base^(-2i/d) in
    // double, once per task, then each row's cos and sin.
    void* space =
        ctx.scratch(worker, static_cast<std::size_t>(half) * (sizeof(double) + 2 * sizeof(float)));
    double* inv_freq = static_cast<double*>(space);
    float* cs = reinterpret_cast<float*>(inv_freq + half);
    for (std::int64_t i = 0; i < half; ++i)
      inv_freq[i] = std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / head_dim);
    const std::int64_t begin = rows * task / tasks, end = rows * (task + 1) / tasks;
    for (std::int64_t r = begin; r < end; ++r) {
      const double p = static_cast<double>(first_position + r);
      for (std::int64_t i = 0; i < half; ++i) {
        const double theta = p * inv_freq[i];
        cs[i] = static_cast<float>(std::cos(theta));
        cs[half + i] = static_cast<float>(std::sin(inverse ? -theta : theta));
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
