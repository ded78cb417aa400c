// The training and cross-attention GEMM (see gemm.h): op(A) and op(B) read in place by the
// strided micro-kernel, only transposed or ragged panels of op(B) packed, packed_gemm's task grid.
#include "layers/gemm.h"

#include <algorithm>
#include <cstring>

#include "headcount/error.h"
#include "headcount/work_counters.h"
#include "layers/task_grid.h"
#include "simd/gemm.h"
#include "simd/tuning.h"

namespace headcount::layers {
namespace {

using detail::concat;

// The Context workspace slot of the packed panels of op(B) (above packed_gemm's).
constexpr int kSlotPackedB = 53;
constexpr std::int64_t kPanel = tuning::gemm_panel_columns();

// Whether panel p of op(B) must be packed: always when B is read transposed (its columns are
// the stored rows), else only a ragged last panel (the micro-kernel loads whole 64-column rows).
bool needs_packing(const GemmArgs& g, std::int64_t p) {
  return g.trans_b || (p + 1) * kPanel > g.n;
}

// Panel p of op(B) [k, n] into `panel`: [k, 64] floats, columns past n zero.
void pack_panel(const GemmArgs& g, std::int64_t p, float* panel) {
  const std::int64_t c0 = p * kPanel, cols = std::min(kPanel, g.n - c0);
  if (!g.trans_b) {
    for (std::int64_t d = 0; d < g.k; ++d) {
      float* row = panel + d * kPanel;
      std::copy_n(g.b + d * g.ldb + c0, cols, row);
      std::fill(row + cols, row + kPanel, 0.0f);
    }
    return;
  }
  // op(B)[d, c] = b[c, d]: column c of the panel is row c0 + c of the stored matrix, read
  // along d; 16 depths at a time so the 16 panel rows being written stay in L1.
  if (cols < kPanel)
    for (std::int64_t d = 0; d < g.k; ++d)
      std::fill(panel + d * kPanel + cols, panel + (d + 1) * kPanel, 0.0f);
  constexpr std::int64_t kDepths = 16;
  for (std::int64_t d0 = 0; d0 < g.k; d0 += kDepths) {
    const std::int64_t d1 = std::min(g.k, d0 + kDepths);
    for (std::int64_t c = 0; c < cols; ++c) {
      const float* src = g.b + (c0 + c) * g.ldb;
      for (std::int64_t d = d0; d < d1; ++d) panel[d * kPanel + c] = src[d];
    }
  }
}

}  // namespace

void gemm(Context& ctx, const GemmArgs& g) {
  work_counters::add_gemm(g.m, g.n, g.k);
  HEADCOUNT_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0, "gemm sizes", "m, n, k >= 0",
                  concat("m ", g.m, ", n ", g.n, ", k ", g.k));
  HEADCOUNT_CHECK(g.lda >= std::max<std::int64_t>(1, g.trans_a ? g.m : g.k) &&
                      g.ldb >= std::max<std::int64_t>(1, g.trans_b ? g.k : g.n) &&
                      g.ldc >= std::max<std::int64_t>(1, g.n),
                  "gemm leading dimensions", "lda >= op(A)'s stored row, ldb >= op(B)'s, ldc >= n",
                  concat("lda ", g.lda, ", ldb ", g.ldb, ", ldc ", g.ldc, " for m ", g.m, ", n ",
                         g.n, ", k ", g.k));
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {
    for (std::int64_t r = 0; r < g.m; ++r)
      for (std::int64_t c = 0; c < g.n; ++c)
        g.c[r * g.ldc + c] =
            (g.accumulate ? g.c[r * g.ldc + c] : 0.0f) + (g.bias != nullptr ? g.bias[c] : 0.0f);
    return;
  }
  const std::int64_t panels = (g.n + kPanel - 1) / kPanel;
  // Only transposed or ragged panels are copied (one region, before the products: each
  // product task reads what it wrote, so no order of workers changes a bit).
  const std::int64_t first_packed = g.trans_b ? 0 : panels - (needs_packing(g, panels - 1) ? 1 : 0);
  const std::int64_t packed_count = panels - first_packed;
  float* packed = nullptr;
  if (packed_count > 0) {
    packed = static_cast<float*>(ctx.workspace(
        kSlotPackedB, static_cast<std::size_t>(packed_count * g.k * kPanel) * sizeof(float)));
    ctx.parallel_for(packed_count, [&](std::int64_t t, int) {
      pack_panel(g, first_packed + t, packed + t * g.k * kPanel);
    });
  }
  const simd::GemmKernels& kernels = simd::gemm_kernels(ctx.isa());
  const TaskGrid grid(g.m, panels, ctx.threads());
  grid.run(ctx, grid.tasks(), [&](std::int64_t task, int) {
    const std::int64_t p = grid.panel(task), rb = grid.row_block(task);
    const std::int64_t r0 = grid.first_row(rb), rows = grid.rows(rb);
    if (rows <= 0) return;
    const std::int64_t c0 = p * kPanel;
    const bool is_packed = p >= first_packed;
    kernels.panel_strided(
        {.x = g.a + (g.trans_a ? r0 : r0 * g.lda),
         .x_row_stride = g.trans_a ? 1 : g.lda,
         .x_depth_stride = g.trans_a ? g.lda : 1,
         .rows = rows,
         .panel = is_packed ? packed + (p - first_packed) * g.k * kPanel : g.b + c0,
         .panel_row_stride = is_packed ? kPanel : g.ldb,
         .k = g.k,
         .bias = g.bias == nullptr ? nullptr : g.bias + c0,
         .y = g.c + r0 * g.ldc + c0,
         .ldy = g.ldc,
         .cols = std::min(kPanel, g.n - c0),
         .accumulate = g.accumulate});
  });
}

}  // namespace headcount::layers
