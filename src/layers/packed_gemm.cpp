// Packing and task split of the packed GEMM (see packed_gemm.h), fp32 and bf16; the
// arithmetic is in simd/gemm_impl.h.
#include "layers/packed_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "headcount/error.h"
#include "headcount/work_counters.h"
#include "layers/block_weights.h"
#include "layers/task_grid.h"
#include "simd/tuning.h"

namespace headcount::layers {

using detail::concat;

namespace {

// The Context workspace slot of the bf16 copy of x (above the attention layer's and the
// encoder's slots).
constexpr int kSlotBf16Input = 48;
// ... and of the int8 copy of x and its row scales.
constexpr int kSlotI8Input = 49, kSlotI8Scales = 50;
// ... and of x's bf16 values and the bf16 panels widened to fp32 (bf16 weights on an ISA
// without vdpbf16ps).
constexpr int kSlotBf16Widened = 51, kSlotBf16WidenedPanels = 52;
// The AMX kernels read x in whole tiles of 16 rows: the bf16 and int8 copies of x get this many
// rows more (filled, never read into a kept result).
constexpr std::int64_t kTilePadRows = 16;
// ... and of x quantized by blocks for block weights: bytes, then dx, sx and sums per block.
constexpr int kSlotBlockInput = 54, kSlotBlockScales = 55;

// bf16 values as fp32 bit patterns: the 16 bits on top, zeros below (exact). Written on
// 32-bit integers, in loops of known length, so that they vectorise in this (generic) unit.
void widen_row(const std::uint16_t* x, std::int64_t n, std::uint32_t* out) {
  for (std::int64_t d = 0; d < n; ++d) out[d] = static_cast<std::uint32_t>(x[d]) << 16;
}

// One bf16 panel (gemm.h's pair rows) widened to an fp32 panel [k, 64]: pair row p gives
// rows 2p (the low halves) and 2p + 1 (the high halves).
void widen_panel(const std::uint32_t* pairs, std::int64_t k, std::uint32_t* out) {
  constexpr std::int64_t nr = tuning::gemm_panel_columns();
  for (std::int64_t p = 0; p < k / 2; ++p) {
    const std::uint32_t* in = pairs + p * nr;
    std::uint32_t* even = out + 2 * p * nr;
    std::uint32_t* odd = even + nr;
    for (std::int64_t c = 0; c < nr; ++c) even[c] = in[c] << 16;
    for (std::int64_t c = 0; c < nr; ++c) odd[c] = in[c] & 0xffff0000u;
  }
}

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

// Per column c: s = max_d |W[d, c]| / 127 and q = round(W / s) in [-127, 127] (all-zero
// column: s = 0, q = 0), laid out as gemm.h's int8 panels, each followed by its 64 scales and
// 64 offsets 128·Σ_d q[d, c]; columns past n are zero.
Tensor pack_i8(const float* w, std::int64_t k, std::int64_t n, std::int64_t ldw) {
  HEADCOUNT_CHECK(k % 4 == 0, "weights", "k a multiple of 4 for int8 packing", k);
  // The int32 sums hold k·255·127 (gemm.h): 2^16 depths keep them below 2^31.
  HEADCOUNT_CHECK(k <= 65536, "weights", "k <= 65536 for int8 packing (exact int32 sums)", k);
  const std::int64_t nr = tuning::gemm_panel_columns();
  const std::int64_t panels = (n + nr - 1) / nr;
  Tensor packed(DType::i8,
                {panels, k + 8, nr});  // k rows of 64 bytes, then 512 bytes of scales and offsets
  auto* base = packed.data<std::uint8_t>();
  for (std::int64_t p = 0; p < panels; ++p) {
    std::uint8_t* panel = base + p * (k + 8) * nr;
    float* scales = reinterpret_cast<float*>(panel + k * nr);
    std::int32_t* offsets = reinterpret_cast<std::int32_t*>(panel + k * nr + 4 * nr);
    const std::int64_t c0 = p * nr, cols = std::min(nr, n - c0);
    for (std::int64_t c = 0; c < nr; ++c) {
      scales[c] = 0.0f;
      offsets[c] = 0;
    }
    for (std::int64_t c = 0; c < cols; ++c) {
      float maxabs = 0.0f;
      for (std::int64_t d = 0; d < k; ++d) {
        const float v = w[d * ldw + c0 + c];
        HEADCOUNT_CHECK(std::isfinite(v), "weights", "finite values for int8 packing",
                        concat(v, " at row ", d, ", column ", c0 + c));
        maxabs = std::max(maxabs, std::fabs(v));
      }
      const float inv = maxabs > 0.0f ? 127.0f / maxabs : 0.0f;
      scales[c] = maxabs / 127.0f;
      std::int32_t sum = 0;
      for (std::int64_t d = 0; d < k; ++d) {
        const float t = std::nearbyint(w[d * ldw + c0 + c] * inv);
        const auto q = static_cast<std::int8_t>(std::clamp(t, -127.0f, 127.0f));
        sum += q;
        panel[(d / 4) * 4 * nr + 4 * c + d % 4] = static_cast<std::uint8_t>(q);
      }
      offsets[c] = 128 * sum;
    }
  }
  return packed;
}

}  // namespace

Tensor pack_weights(const float* w, std::int64_t k, std::int64_t n, std::int64_t ldw, DType dtype) {
  HEADCOUNT_CHECK(k >= 1 && n >= 1 && ldw >= n, "weights", "k >= 1, n >= 1, ldw >= n",
                  concat("k ", k, ", n ", n, ", ldw ", ldw));
  HEADCOUNT_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::i8,
                  "weights dtype", "f32, bf16 or i8", dtype_name(dtype));
  if (dtype == DType::bf16) return pack_bf16(w, k, n, ldw);
  if (dtype == DType::i8) return pack_i8(w, k, n, ldw);
  const std::int64_t nr = tuning::gemm_panel_columns();
  const std::int64_t panels = (n + nr - 1) / nr;
  Tensor packed(DType::f32, {panels, k, nr});
  float* dst = packed.data<float>();
  std::fill_n(dst, packed.numel(), 0.0f);
  for (std::int64_t p = 0; p < panels; ++p) {
    const std::int64_t c0 = p * nr, cols = std::min(nr, n - c0);
    for (std::int64_t d = 0; d < k; ++d)
      std::copy_n(w + d * ldw + c0, cols, dst + (p * k + d) * nr);
  }
  return packed;
}

namespace {

// Which kernel a dtype's call runs (packed_gemm below, and packed_gemm_kernel's words).
bool bf16_on_tiles(const simd::GemmKernels& kernels, std::int64_t k) {
  return kernels.panel_bf16_amx != nullptr && k % 32 == 0;
}
bool bf16_widens_once(const simd::GemmKernels& kernels, std::int64_t m) {
  const bool dot = kernels.isa == Isa::avx512_bf16 || kernels.isa == Isa::amx_bf16;
  return !dot && m >= tuning::gemm_bf16_widen_min_rows();
}
bool i8_on_tiles(const simd::GemmKernels& kernels, std::int64_t k, std::int64_t m) {
  return kernels.panel_i8_amx != nullptr && k % 64 == 0 && m >= tuning::gemm_i8_amx_min_rows();
}

// Panels per task on the AMX kernels, which take consecutive panels in one call (simd/gemm.h) and
// configure the tiles once a call: with few row blocks (a decoded token, batch 1) a task per
// panel paid that configuration (LDTILECFG) once per panel. Groups are sized to leave about four
// tasks a worker for the pool to balance. Which panels a task holds changes no result: each
// output is computed the same way whatever its neighbours.
std::int64_t tile_panel_group(std::int64_t panels, std::int64_t row_blocks, int threads) {
  const std::int64_t want_groups =
      std::max<std::int64_t>(1, (4 * threads + row_blocks - 1) / row_blocks);
  return std::max<std::int64_t>(1, (panels + want_groups - 1) / want_groups);
}

// Runs fn(r0, rows, p, c0, cols) for every task of a TaskGrid over the m rows and the groups of
// `group` consecutive panels (first panel p, first column c0, cols up to group panels' width,
// ragged at n); an empty row block is skipped. The one task loop of every path below.
template <typename Fn>
void for_each_task(Context& ctx, std::int64_t m, std::int64_t n, std::int64_t panels,
                   std::int64_t group, Fn&& fn) {
  constexpr std::int64_t nr = tuning::gemm_panel_columns();
  const TaskGrid grid(m, (panels + group - 1) / group, ctx.threads());
  grid.run(ctx, grid.tasks(), [&](std::int64_t task, int) {
    const std::int64_t p = grid.panel(task) * group, rb = grid.row_block(task);
    const std::int64_t r0 = grid.first_row(rb), rows = grid.rows(rb);
    if (rows <= 0) return;
    const std::int64_t c0 = p * nr;
    fn(r0, rows, p, c0, std::min(group * nr, n - c0));
  });
}

// The row count and strides every path checks the same way; false when there is no row (no
// work, nothing counted), else the multiply-adds are counted.
bool check_rows_and_count(const PackedGemmArgs& g, std::int64_t k) {
  HEADCOUNT_CHECK(g.m >= 0 && g.ldx >= k && g.ldy >= g.n, "packed gemm",
                  concat("m >= 0, ldx >= k = ", k, ", ldy >= n = ", g.n),
                  concat("m ", g.m, ", ldx ", g.ldx, ", ldy ", g.ldy));
  if (g.m == 0) return false;
  work_counters::add_gemm(g.m, g.n, k);
  return true;
}

// The GEMM on a file's quantized blocks: x quantized by blocks of 32 once per call (rows over
// the pool), then the packed GEMM's task split over panels of 64 output rows.
void block_gemm(Context& ctx, const PackedGemmArgs& g) {
  const BlockWeights& w = *g.blocks;
  const std::int64_t k = w.k, blocks = k / simd::kQBlock, nr = simd::kQPanelRows;
  HEADCOUNT_CHECK(g.w == nullptr, "packed gemm", "either packed weights or blocks", "both");
  HEADCOUNT_CHECK(g.n == w.n, "n", concat("the block weights' ", w.n, " rows"), g.n);
  HEADCOUNT_CHECK(g.epilogue == GemmEpilogue::none, "packed gemm epilogue",
                  "none with block weights (a decoder's projections have none)", "gelu_erf");
  if (!check_rows_and_count(g, k)) return;
  const simd::QBlockKernels& kernels = simd::qblock_kernels(ctx.isa());
  auto* q =
      static_cast<std::int8_t*>(ctx.workspace(kSlotBlockInput, static_cast<std::size_t>(g.m * k)));
  auto* scales = static_cast<float*>(
      ctx.workspace(kSlotBlockScales, static_cast<std::size_t>(g.m * blocks) * 3 * sizeof(float)));
  float* dx = scales;
  float* sx = scales + g.m * blocks;
  auto* sums = reinterpret_cast<std::int32_t*>(scales + 2 * g.m * blocks);
  const std::int64_t panels = (g.n + nr - 1) / nr;
  const std::int64_t panel_bytes = nr / simd::kQGroupRows * blocks * simd::qblock_bytes(w.format);
  const TaskGrid grid(g.m, panels, ctx.threads());
  const auto quantize_rows = [&](std::int64_t rb, int) {
    for (std::int64_t r = grid.first_row(rb), r1 = r + grid.rows(rb); r < r1; ++r)
      simd::quantize_blocks(g.x + r * g.ldx, k, q + r * k, dx + r * blocks, sx + r * blocks,
                            sums + r * blocks);
  };
  // A decoded token's row is k values: quantized here rather than handed to the pool, whose
  // round trip costs more than the work (four GEMMs a layer, every token).
  if (grid.row_blocks == 1)
    quantize_rows(0, 0);
  else
    grid.run(ctx, grid.row_blocks, quantize_rows);
  const auto* packed = w.packed.data<const std::uint8_t>();
  static_assert(simd::kQPanelRows == tuning::gemm_panel_columns(), "one panel width");
  for_each_task(
      ctx, g.m, g.n, panels, 1,
      [&](std::int64_t r0, std::int64_t rows, std::int64_t p, std::int64_t c0, std::int64_t cols) {
        const simd::QuantizedRows xr{.q = q + r0 * k,
                                     .dx = dx + r0 * blocks,
                                     .sx = sx + r0 * blocks,
                                     .sum = sums + r0 * blocks,
                                     .k = k};
        kernels.panel(w.format, xr, rows, packed + p * panel_bytes,
                      g.bias == nullptr ? nullptr : g.bias + c0, g.y + r0 * g.ldy + c0, g.ldy,
                      cols);
      });
}

}  // namespace

void packed_gemm(Context& ctx, const PackedGemmArgs& g) {
  if (g.blocks != nullptr) return block_gemm(ctx, g);
  const std::int64_t nr = tuning::gemm_panel_columns();
  HEADCOUNT_CHECK(
      g.w != nullptr &&
          (g.w->dtype() == DType::f32 || g.w->dtype() == DType::bf16 ||
           (g.w->dtype() == DType::i8 && g.w->rank() == 3 && g.w->size(1) > 8 &&
            g.w->size(1) % 4 == 0)) &&
          g.w->rank() == 3 && g.w->size(2) == nr,
      "packed weights",
      concat("an f32, bf16 or i8 [panels, k (+ 8 for i8), ", nr, "] tensor from pack_weights"),
      g.w == nullptr ? std::string("none") : shape_string(g.w->shape()));
  const std::int64_t panels = g.w->size(0), k = g.w->size(1) - (g.w->dtype() == DType::i8 ? 8 : 0);
  HEADCOUNT_CHECK(g.n >= 1 && (g.n + nr - 1) / nr == panels, "n",
                  concat("a width packed into ", panels, " panels"), g.n);
  if (!check_rows_and_count(g, k)) return;
  const simd::GemmKernels& kernels = simd::gemm_kernels(ctx.isa());
  const TaskGrid grid(g.m, panels, ctx.threads());
  const std::int64_t row_blocks = grid.row_blocks;
  // The per-row passes before the GEMM (rounding x to bf16, quantising it) take the same
  // row blocks, and with a grouped grid the same ranges, as the GEMM's tasks (the bf16 path
  // that widens x and the panels shares one dynamic region between the two).
  const auto row_pass = [&](auto&& per_row) {
    grid.run(ctx, row_blocks, [&](std::int64_t rb, int) {
      for (std::int64_t r = grid.first_row(rb), r1 = r + grid.rows(rb); r < r1; ++r) per_row(r);
    });
  };
  if (g.w->dtype() == DType::bf16) {
    // x rounded to bf16 once per call, rows split over the pool like the GEMM's tasks (each
    // row's bits depend on that row only), then the same task split on the bf16 kernel: AMX
    // tiles where the table has them and k fills whole tile steps, decided by k alone (never
    // by m: the tiles' sums are not vdpbf16ps's bits, and a row must get the same bits in any
    // batch).
    const bool tiles = bf16_on_tiles(kernels, k);
    const std::int64_t pad = tiles ? kTilePadRows : 0;
    auto* xb = static_cast<std::uint16_t*>(
        ctx.workspace(kSlotBf16Input, static_cast<std::size_t>((g.m + pad) * k) * 2));
    std::fill_n(xb + g.m * k, pad * k, std::uint16_t{0});
    const auto* packed = g.w->data<const std::uint32_t>();
    const std::int64_t lanes = k / 2 * nr;  // 32-bit lanes of one panel
    if (bf16_widens_once(kernels, g.m)) {
      // No bf16 dot product: the bf16 kernel would widen every value of every pair for every
      // multiply-add (0.65x the fp32 GEMM's rate on an AVX-512 host without AVX512_BF16,
      // tuning.h).
      // Widening x and the panels once per call instead (into workspaces, one pass each)
      // runs the fp32 tiles on the same values. The results are the same bits: bf16 x bf16
      // products are exact in fp32, both kernels add them to one fp32 accumulator per output
      // in increasing depth with the ISA's multiply-add (fused or not alike), and depth blocks
      // pass that accumulator through y exactly (tests/test_packed_gemm_bf16.cpp compares the
      // two). Widening the panel per task instead repeated it for every row block: 0.90x fp32.
      auto* xw = static_cast<std::uint32_t*>(
          ctx.workspace(kSlotBf16Widened, static_cast<std::size_t>(g.m * k) * sizeof(float)));
      auto* wide = static_cast<std::uint32_t*>(ctx.workspace(
          kSlotBf16WidenedPanels, static_cast<std::size_t>(panels * k * nr) * sizeof(float)));
      ctx.parallel_for(row_blocks + panels, [&](std::int64_t t, int) {
        if (t >= row_blocks) {
          widen_panel(packed + (t - row_blocks) * lanes, k, wide + (t - row_blocks) * k * nr);
          return;
        }
        for (std::int64_t r = grid.first_row(t), r1 = r + grid.rows(t); r < r1; ++r) {
          kernels.to_bf16(g.x + r * g.ldx, xb + r * k, k);
          widen_row(xb + r * k, k, xw + r * k);
        }
      });
      const auto* xf = reinterpret_cast<const float*>(xw);
      const auto* panels_f = reinterpret_cast<const float*>(wide);
      for_each_task(ctx, g.m, g.n, panels, 1,
                    [&](std::int64_t r0, std::int64_t rows, std::int64_t p, std::int64_t c0,
                        std::int64_t cols) {
                      kernels.panel(xf + r0 * k, k, rows, panels_f + p * k * nr, k,
                                    g.bias == nullptr ? nullptr : g.bias + c0,
                                    g.y + r0 * g.ldy + c0, g.ldy, cols, g.epilogue);
                    });
      return;
    }
    row_pass([&](std::int64_t r) { kernels.to_bf16(g.x + r * g.ldx, xb + r * k, k); });
    const auto panel_bf16 = tiles ? kernels.panel_bf16_amx : kernels.panel_bf16;
    const std::int64_t group = tiles ? tile_panel_group(panels, row_blocks, ctx.threads()) : 1;
    for_each_task(ctx, g.m, g.n, panels, group,
                  [&](std::int64_t r0, std::int64_t rows, std::int64_t p, std::int64_t c0,
                      std::int64_t cols) {
                    panel_bf16(xb + r0 * k, k, rows, packed + p * lanes, k,
                               g.bias == nullptr ? nullptr : g.bias + c0, g.y + r0 * g.ldy + c0,
                               g.ldy, cols, g.epilogue);
                  });
    return;
  }
  if (g.w->dtype() == DType::i8) {
    // x quantised once per call, a scale per row, rows split over the pool (each row's bytes
    // and scale depend on that row only), then the usual task split on the int8 kernel.
    // AMX-INT8 where the table has it, k fills whole tile steps and the call has rows enough
    // (tuning.h): the int32 sums are exact, so the tiles give the same bits as vpdpbusd and may
    // be chosen by m.
    const bool tiles = i8_on_tiles(kernels, k, g.m);
    const std::int64_t pad = tiles ? kTilePadRows : 0;
    auto* xq = static_cast<std::uint8_t*>(
        ctx.workspace(kSlotI8Input, static_cast<std::size_t>((g.m + pad) * k)));
    std::fill_n(xq + g.m * k, pad * k, std::uint8_t{128});
    auto* scales = static_cast<float*>(
        ctx.workspace(kSlotI8Scales, static_cast<std::size_t>(g.m) * sizeof(float)));
    row_pass(
        [&](std::int64_t r) { kernels.quantize_u8(g.x + r * g.ldx, k, xq + r * k, scales + r); });
    const auto* packed = g.w->data<const std::uint8_t>();
    const std::int64_t panel_bytes = (k + 8) * nr;
    const auto panel_i8 = tiles ? kernels.panel_i8_amx : kernels.panel_i8;
    const std::int64_t group = tiles ? tile_panel_group(panels, row_blocks, ctx.threads()) : 1;
    for_each_task(ctx, g.m, g.n, panels, group,
                  [&](std::int64_t r0, std::int64_t rows, std::int64_t p, std::int64_t c0,
                      std::int64_t cols) {
                    panel_i8(xq + r0 * k, k, scales + r0, rows, packed + p * panel_bytes, k,
                             g.bias == nullptr ? nullptr : g.bias + c0, g.y + r0 * g.ldy + c0,
                             g.ldy, cols, g.epilogue);
                  });
    return;
  }
  const float* packed = g.w->data<const float>();
  for_each_task(
      ctx, g.m, g.n, panels, 1,
      [&](std::int64_t r0, std::int64_t rows, std::int64_t p, std::int64_t c0, std::int64_t cols) {
        kernels.panel(g.x + r0 * g.ldx, g.ldx, rows, packed + p * k * nr, k,
                      g.bias == nullptr ? nullptr : g.bias + c0, g.y + r0 * g.ldy + c0, g.ldy, cols,
                      g.epilogue);
      });
}

std::string packed_gemm_kernel(Isa isa, DType dtype, std::int64_t k, std::int64_t m) {
  if (isa == Isa::best) isa = best_isa();
  const simd::GemmKernels& kernels = simd::gemm_kernels(isa);
  const char* fma = kernels.isa == Isa::generic ? "SSE2 multiply-add"
                    : kernels.isa == Isa::avx2  ? "AVX2 FMA"
                                                : "AVX-512 FMA";
  if (dtype == DType::bf16) {
    if (bf16_on_tiles(kernels, k)) return "bf16 AMX tiles (TDPBF16PS)";
    if (kernels.isa == Isa::avx512_bf16 || kernels.isa == Isa::amx_bf16)
      return "bf16 dot (vdpbf16ps)";
    return concat("bf16 widened to fp32, ", fma,
                  bf16_widens_once(kernels, m) ? " (once per call)" : " (per multiply-add)");
  }
  if (dtype == DType::i8) {
    if (i8_on_tiles(kernels, k, m)) return "int8 AMX tiles (TDPBUSD)";
    return kernels.i8_dot ? "int8 dot (vpdpbusd)" : "int8 widened 32-bit multiplies";
  }
  return concat("fp32 ", fma);
}

}  // namespace headcount::layers
