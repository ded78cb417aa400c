#include "layers/feed_forward.h"

#include <algorithm>

#include "layers/gemm.h"

namespace headcount::layers {

void gelu_erf_inplace(Context& ctx, float* x, std::int64_t n) {
  constexpr std::int64_t kChunk = 16384;  // 64 KiB of floats per task
  ctx.parallel_for((n + kChunk - 1) / kChunk, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(n, (task + 1) * kChunk);
    for (std::int64_t i = task * kChunk; i < end; ++i) x[i] = gelu_erf(x[i]);
  });
}

void Linear::forward(Context& ctx, const float* x, std::int64_t rows, float* y) const {
  const std::int64_t n = out();
  const float* b = bias.data<const float>();
  for (std::int64_t r = 0; r < rows; ++r) std::copy_n(b, n, y + r * n);
  gemm(ctx, {.m = rows, .n = n, .k = in(), .a = x, .lda = in(), .b = weight.data<const float>(),
             .ldb = n, .c = y, .ldc = n, .accumulate = true});
}

void FeedForward::forward(Context& ctx, const float* x, std::int64_t rows, float* hidden,
                          float* y) const {
  up.forward(ctx, x, rows, hidden);
  gelu_erf_inplace(ctx, hidden, rows * up.out());
  down.forward(ctx, hidden, rows, y);
}

}  // namespace headcount::layers
