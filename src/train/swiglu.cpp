// SwiGLU forward/backward (formulas in swiglu.h), in fixed chunks: each element's arithmetic
// depends on that element only, so the results do not depend on the thread count. The forward
// is the inference FFN's gate (layers::swiglu_gate), one formula for both executors.
#include "train/swiglu.h"

#include <algorithm>
#include <cmath>

#include "layers/feed_forward.h"

namespace headcount::train {
namespace {
constexpr std::int64_t kChunk = 16384;

float sigmoid(float a) { return 1.0f / (1.0f + std::exp(-a)); }
}  // namespace

void swiglu_forward(Context& ctx, const float* a, const float* b, float* h, std::int64_t n) {
  ctx.parallel_for((n + kChunk - 1) / kChunk, [&](std::int64_t task, int) {
    const std::int64_t i = task * kChunk;
    layers::swiglu_gate(a + i, b + i, h + i, std::min(kChunk, n - i));
  });
}

void swiglu_backward(Context& ctx, const float* a, const float* b, const float* dh, float* da,
                     float* db, std::int64_t n) {
  ctx.parallel_for((n + kChunk - 1) / kChunk, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(n, (task + 1) * kChunk);
    for (std::int64_t i = task * kChunk; i < end; ++i) {
      const float s = sigmoid(a[i]), d = dh[i];
      db[i] = d * a[i] * s;
      da[i] = d * b[i] * s * (1.0f + a[i] * (1.0f - s));
    }
  });
}

}  // namespace headcount::train
