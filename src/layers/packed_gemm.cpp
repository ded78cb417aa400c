// Packing and task split of the packed GEMM (see packed_gemm.h), fp32 and bf16; the
// arithmetic is in simd/gemm_impl.h.
#include "layers/packed_gemm.h"

#include <algorithm>

#include "headcount/error.h"
#include "kernels/tuning.h"

namespace headcount::layers {

using detail::concat;

namespace {

// The Context workspace slot of the bf16 copy of x (above the attention layer's and the
// encoder's slots).
constexpr int kSlotBf16Input = 48;

Tensor pack_bf16(const float* w, std::int64_t k, std::int64_t n, std::int64_t ldw) {
  HEADCOUNT_CHECK(k % 2 == 0, "weights", "an even k for bf16 packing", k);
  const std::int64_t nr = tuning::gemm_panel_columns();
  const std::int64_t panels = (n + nr - 1) / nr;
  Tensor packed(DType::bf16, {panels, k, nr});
  std::uint16_t* dst = packed.data<std::uint16_t>();
  std::fill_n(dst, packed.numel(), std::uint16_t{0});
  for (std::int64_t p = 0; p < panels; ++p) {
    const std::int64_t c0 = p * nr, cols = std::min(nr, n - c0);
    for (std::int64_t d = 0; d < k; ++d)
      for (std::int64_t c = 0; c < cols; ++c)
        dst[p * k * nr + (d / 2) * 2 * nr + 2 * c + d % 2] = to_bf16(w[d * ldw + c0 + c]).bits;
  }
  return packed;
}

}  // namespace

Tensor pack_weights(const float* w, std::int64_t k, std::int64_t n, std::int64_t ldw, DType dtype) {
  HEADCOUNT_CHECK(k >= 1 && n >= 1 && ldw >= n, "weights", "k >= 1, n >= 1, ldw >= n",
                  concat("k ", k, ", n ", n, ", ldw ", ldw));
  HEADCOUNT_CHECK(dtype == DType::f32 || dtype == DType::bf16, "weights dtype", "f32 or bf16", dtype_name(dtype));
  if (dtype == DType::bf16) return pack_bf16(w, k, n, ldw);
  const std::int64_t nr = tuning::gemm_panel_columns();
  const std::int64_t panels = (n + nr - 1) / nr;
  Tensor packed(DType::f32, {panels, k, nr});
  float* dst = packed.data<float>();
  std::fill_n(dst, packed.numel(), 0.0f);
  for (std::int64_t p = 0; p < panels; ++p) {
    const std::int64_t c0 = p * nr, cols = std::min(nr, n - c0);
    for (std::int64_t d = 0; d < k; ++d) std::copy_n(w + d * ldw + c0, cols, dst + (p * k + d) * nr);
  }
  return packed;
}

void packed_gemm(Context& ctx, const PackedGemmArgs& g) {
  const std::int64_t nr = tuning::gemm_panel_columns();
  HEADCOUNT_CHECK(g.w != nullptr && (g.w->dtype() == DType::f32 || g.w->dtype() == DType::bf16) &&
                      g.w->rank() == 3 && g.w->size(2) == nr,
                  "packed weights", concat("an f32 or bf16 [panels, k, ", nr, "] tensor from pack_weights"),
                  g.w == nullptr ? std::string("none") : shape_string(g.w->shape()));
  const std::int64_t panels = g.w->size(0), k = g.w->size(1);
  HEADCOUNT_CHECK(g.n >= 1 && (g.n + nr - 1) / nr == panels, "n", concat("a width packed into ", panels, " panels"), g.n);
  HEADCOUNT_CHECK(g.m >= 0 && g.ldx >= k && g.ldy >= g.n, "packed gemm", concat("m >= 0, ldx >= k = ", k, ", ldy >= n = ", g.n),
                  concat("m ", g.m, ", ldx ", g.ldx, ", ldy ", g.ldy));
  if (g.m == 0) return;
  const simd::GemmKernels& kernels = simd::gemm_kernels(ctx.isa());
  const std::int64_t block = tuning::gemm_task_rows();
  const std::int64_t row_blocks = (g.m + block - 1) / block;
  if (g.w->dtype() == DType::bf16) {
    // x rounded to bf16 once per call, rows split over the pool like the GEMM's tasks (each
    // row's bits depend on that row only), then the same task split on the bf16 kernel.
    auto* xb = static_cast<std::uint16_t*>(ctx.workspace(kSlotBf16Input, static_cast<std::size_t>(g.m * k) * 2));
    ctx.parallel_for(row_blocks, [&](std::int64_t rb, int) {
      const std::int64_t r1 = std::min(g.m, (rb + 1) * block);
      for (std::int64_t r = rb * block; r < r1; ++r) kernels.to_bf16(g.x + r * g.ldx, xb + r * k, k);
    });
    const auto* packed = g.w->data<const std::uint32_t>();
    const std::int64_t lanes = k / 2 * nr;  // 32-bit lanes of one panel
    ctx.parallel_for(row_blocks * panels, [&](std::int64_t task, int) {
      const std::int64_t p = task / row_blocks, rb = task % row_blocks;
      const std::int64_t r0 = rb * block, rows = std::min(block, g.m - r0);
      const std::int64_t c0 = p * nr, cols = std::min(nr, g.n - c0);
      kernels.panel_bf16(xb + r0 * k, k, rows, packed + p * lanes, k, g.bias == nullptr ? nullptr : g.bias + c0,
                         g.y + r0 * g.ldy + c0, g.ldy, cols, g.epilogue);
    });
    return;
  }
  const float* packed = g.w->data<const float>();
  // Panel-major task order: consecutive tasks share a panel, so on few workers a panel read
  // from memory serves several row blocks while it is still in cache.
  ctx.parallel_for(row_blocks * panels, [&](std::int64_t task, int) {
    const std::int64_t p = task / row_blocks, rb = task % row_blocks;
    const std::int64_t r0 = rb * block, rows = std::min(block, g.m - r0);
    const std::int64_t c0 = p * nr, cols = std::min(nr, g.n - c0);
    kernels.panel(g.x + r0 * g.ldx, g.ldx, rows, packed + p * k * nr, k, g.bias == nullptr ? nullptr : g.bias + c0,
                  g.y + r0 * g.ldy + c0, g.ldy, cols, g.epilogue);
  });
}

}  // namespace headcount::layers
