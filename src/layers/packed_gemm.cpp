// Packing and task split of the packed GEMM (see packed_gemm.h); the arithmetic is in
// simd/gemm_impl.h.
#include "layers/packed_gemm.h"

#include <algorithm>

#include "headcount/error.h"
#include "kernels/tuning.h"

namespace headcount::layers {

using detail::concat;

Tensor pack_weights(const float* w, std::int64_t k, std::int64_t n, std::int64_t ldw) {
  HEADCOUNT_CHECK(k >= 1 && n >= 1 && ldw >= n, "weights", "k >= 1, n >= 1, ldw >= n",
                  concat("k ", k, ", n ", n, ", ldw ", ldw));
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
  HEADCOUNT_CHECK(g.w != nullptr && g.w->dtype() == DType::f32 && g.w->rank() == 3 && g.w->size(2) == nr,
                  "packed weights", concat("an f32 [panels, k, ", nr, "] tensor from pack_weights"),
                  g.w == nullptr ? std::string("none") : shape_string(g.w->shape()));
  const std::int64_t panels = g.w->size(0), k = g.w->size(1);
  HEADCOUNT_CHECK(g.n >= 1 && (g.n + nr - 1) / nr == panels, "n", concat("a width packed into ", panels, " panels"), g.n);
  HEADCOUNT_CHECK(g.m >= 0 && g.ldx >= k && g.ldy >= g.n, "packed gemm", concat("m >= 0, ldx >= k = ", k, ", ldy >= n = ", g.n),
                  concat("m ", g.m, ", ldx ", g.ldx, ", ldy ", g.ldy));
  if (g.m == 0) return;
  const simd::GemmKernels& kernels = simd::gemm_kernels(ctx.isa());
  const std::int64_t block = tuning::gemm_task_rows();
  const std::int64_t row_blocks = (g.m + block - 1) / block;
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
