// Elementwise GELU forward/backward in fixed chunks over the context's workers.
#include "train/gelu.h"

#include <algorithm>
#include <cmath>

#include "layers/feed_forward.h"

namespace headcount::train {
namespace {
constexpr std::int64_t kChunk = 16384;  // 64 KiB of floats per task
}

void gelu_forward(Context& ctx, const float* u, float* y, std::int64_t n) {
  ctx.parallel_for((n + kChunk - 1) / kChunk, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(n, (task + 1) * kChunk);
    for (std::int64_t i = task * kChunk; i < end; ++i) y[i] = layers::gelu_erf(u[i]);
  });
}

void gelu_backward(Context& ctx, const float* u, const float* dy, float* du, std::int64_t n) {
  constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;
  ctx.parallel_for((n + kChunk - 1) / kChunk, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(n, (task + 1) * kChunk);
    for (std::int64_t i = task * kChunk; i < end; ++i) {
      const float x = u[i];
      const float cdf = 0.5f * (1.0f + std::erf(x * kInvSqrt2));
      const float pdf = kInvSqrt2Pi * std::exp(-0.5f * x * x);
      du[i] = dy[i] * (cdf + x * pdf);
    }
  });
}

}  // namespace headcount::train
