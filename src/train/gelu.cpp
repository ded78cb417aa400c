// Elementwise GELU forward/backward in fixed chunks over the context's workers, on the per-ISA
// kernels of simd/gemm.h: the same erf (Eigen's rational approximation, <= 3.22e-7 absolute
// with FMA, 3.52e-7 on SSE2; test_packed_gemm.cpp) as the inference FFN's fused epilogue, and
// vec_math.h's exp (<= 2 ulp; test_simd.cpp) for the density in the backward. One copy of each
// polynomial in the project; the chunks are fixed, and each element's arithmetic depends on
// that element only, so the results do not depend on the thread count.
#include "train/gelu.h"

#include <algorithm>

#include "simd/gemm.h"

namespace headcount::train {
namespace {

constexpr std::int64_t kChunk = 16384;  // 64 KiB of floats per task

}  // namespace

void gelu_forward(Context& ctx, const float* u, float* y, std::int64_t n) {
  const auto& kernels = simd::gemm_kernels(ctx.isa());
  ctx.parallel_for((n + kChunk - 1) / kChunk, [&](std::int64_t task, int) {
    const std::int64_t i = task * kChunk;
    kernels.gelu_erf_from(u + i, y + i, std::min(kChunk, n - i));
  });
}

void gelu_backward(Context& ctx, const float* u, const float* dy, float* du, std::int64_t n) {
  const auto& kernels = simd::gemm_kernels(ctx.isa());
  ctx.parallel_for((n + kChunk - 1) / kChunk, [&](std::int64_t task, int) {
    const std::int64_t i = task * kChunk;
    kernels.gelu_erf_grad(u + i, dy + i, du + i, std::min(kChunk, n - i));
  });
}

}  // namespace headcount::train
