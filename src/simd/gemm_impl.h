// The packed GEMM's micro-kernels (see gemm.h), written once with GCC/Clang vector extensions
// and compiled once per instruction set (gemm_<isa>.cpp define the macros and include this
// file with their own -m flags), like the attention tiles (tiles_impl.h):
//
//   HC_ISA_NS, HC_ISA, HC_VEC_FLOATS (W)   as in tiles_impl.h
//   HC_TILE_ACC    accumulator registers of the register tile
//   HC_TILE_VECS   vectors per row of the register tile (a column block of NV·W floats)
//   HC_WITH_VNNI   1 where the ISA has vpdpbusd (AVX512_VNNI): the int8 tiles use it; else
//                  they widen each byte and use 32-bit multiplies (the same integer sums)
//   HC_WITH_BF16   1 where the ISA has vdpbf16ps (avx512_bf16): the bf16 tiles use it; else
//                  they widen each bf16 to fp32 (a 16-bit shift) and use the fp32 multiply-add
//   HC_WITH_AMX    1 in gemm_amx.cpp only: adds the AMX tile kernels (panel_bf16_amx,
//                  panel_i8_amx) to the table
//
// Register tile: R rows x NV vectors, R = HC_TILE_ACC / NV (AVX-512: 6 x 64 columns, a whole
// panel; AVX2: 6 x 16; generic SSE2: 6 x 8). Per step of d it loads NV vectors of the panel
// (consecutive: the panel's row d is 64 contiguous floats) and broadcasts one x value per row,
// so it issues R·NV multiply-adds for NV + R loads. Fewer rows (the last rows of a call) take
// the same template with a smaller R: the per-element arithmetic is the same line of code, so
// the results are too, bitwise (tests/test_packed_gemm.cpp checks every R).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "simd/gemm.h"
#include "simd/tuning.h"
#include "simd/vec_math.h"
#if HC_WITH_AMX
#include "simd/amx_tiles.h"
#endif

namespace headcount::simd::HC_ISA_NS {
namespace {

constexpr int W = HC_VEC_FLOATS;
using vec::load;
using vec::splat;
using vec::store;
using vec::vf;
using vec::vi;
using i64 = std::int64_t;
constexpr int kPanel = static_cast<int>(tuning::gemm_panel_columns());
constexpr int kVecs = HC_TILE_VECS;
constexpr int kRows = HC_TILE_ACC / kVecs;
constexpr int kBlock = kVecs * W;  // columns of one register tile
static_assert(kPanel % kBlock == 0, "a panel must split into whole register tiles");

// erf(x) as x·P(x²)/Q(x²) on x clamped to [-4, 4] (beyond, erf is ±1 in fp32): the rational
// approximation of Eigen's generic_fast_erf_float (degree 13 over degree 8). Measured against
// std::erf in double on a grid of step 2^-12 over [-6, 6] (test_packed_gemm.cpp): at most
// 3.22e-7 absolute and relative with FMA (AVX2, AVX-512), 3.52e-7 on SSE2 (no FMA); the test
// asserts 4e-7 for both.
inline vf erf_v(vf a) {
  const vf lo = splat(-4.0f), hi = splat(4.0f);
  vf x = a < lo ? lo : a;
  x = x > hi ? hi : x;
  const vf x2 = x * x;
  vf p = x2 * splat(-2.72614225801306e-10f) + splat(2.77068142495902e-08f);
  p = x2 * p + splat(-2.10102402082508e-06f);
  p = x2 * p + splat(-5.69250639462346e-05f);
  p = x2 * p + splat(-7.34990630326855e-04f);
  p = x2 * p + splat(-2.95459980854025e-03f);
  p = x2 * p + splat(-1.60960333262415e-02f);
  p = x * p;
  vf q = x2 * splat(-1.45660718464996e-05f) + splat(-2.13374055278905e-04f);
  q = x2 * q + splat(-1.68282697438203e-03f);
  q = x2 * q + splat(-7.37332916720468e-03f);
  q = x2 * q + splat(-1.42647390514189e-02f);
  return p / q;
}

// GELU, BERT's erf form: 0.5·x·(1 + erf(x/√2)).
inline vf gelu_v(vf x) {
  return splat(0.5f) * x * (splat(1.0f) + erf_v(x * splat(0.70710678118654752f)));
}

inline vf finish(vf acc, vf bias, GemmEpilogue epilogue) {
  const vf v = acc + bias;
  return epilogue == GemmEpilogue::gelu_erf ? gelu_v(v) : v;
}

// Loads `cols` floats of a row into a vector (lanes past cols: 0).
inline vf load_part(const float* p, i64 cols) {
  float tmp[W] = {};
  std::copy_n(p, std::max<i64>(0, std::min<i64>(W, cols)), tmp);
  return load(tmp);
}

// Stores the first `cols` lanes of v (cols < W).
inline void store_part(float* p, vf v, i64 cols) {
  float tmp[W];
  store(tmp, v);
  std::copy_n(tmp, cols, p);
}

// Depths [d0, d1) of y[R rows, cols] of one register tile: panel points at the tile's first
// column (row stride kPanel), bias at its first column's bias (or null), cols <= kBlock valid
// columns. The first depth block starts the accumulators at 0, later ones reload the fp32
// partial sums the previous block stored in y (exact: the accumulator is fp32), so splitting
// the depth changes no rounding; the last block adds the bias and applies the epilogue.
// Writes a register tile to y: bias and epilogue on the last depth block, whole vectors
// straight, a last partial vector through a small buffer (the same vector arithmetic, so a
// column's result does not depend on the matrix's width). Shared by the fp32 and bf16 tiles.
template <int R>
inline void store_tile(const vf (&acc)[R][kVecs], const float* bias, float* y, i64 ldy, i64 cols,
                       GemmEpilogue epilogue, bool last) {
  vf bv[kVecs];
#pragma GCC unroll 16
  for (int j = 0; j < kVecs; ++j)
    bv[j] = bias == nullptr       ? splat(0.0f)
            : (j + 1) * W <= cols ? load(bias + j * W)
                                  : load_part(bias + j * W, cols - j * W);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < kVecs; ++j) {
      const vf v = last ? finish(acc[r][j], bv[j], epilogue) : acc[r][j];
      if ((j + 1) * W <= cols) {
        store(y + r * ldy + j * W, v);
      } else if (j * W < cols) {
        float tmp[W];
        store(tmp, v);
        std::copy_n(tmp, cols - j * W, y + r * ldy + j * W);
      }
    }
}

// The first row tile of each depth block is the one that meets the panel's rows first, from
// memory when the weights are not in cache (batch 1: the 42 MB of MiniLM's fp32 weights do not
// fit a 32 MB L3). It asks for the rows gemm_prefetch_rows() ahead, into L2, so the next rows
// arrive while these are multiplied instead of after (tuning.h has the measurement); the other
// row tiles find the rows in cache and issue no prefetch, and neither do the bf16 and int8
// tasks of more than gemm_prefetch_max_rows() rows, whose many row tiles per block hide the
// wait (the fp32 ones prefetch: tuning.h). `rows_end` is the panel's depth (k, or k/2 pair
// rows): nothing past it is asked for.
template <bool kPrefetch>
inline void prefetch_row(const void* panel_row) {
  if constexpr (kPrefetch) {
    // One prefetch per 64-byte line of the tile's columns (kBlock 4-byte lanes; an SSE2 tile's
    // 32 bytes lie in one line).
    constexpr int kLines = std::max(1, kBlock / 16);
#pragma GCC unroll 16
    for (int j = 0; j < kLines; ++j)
      __builtin_prefetch(static_cast<const char*>(panel_row) + 64 * j, 0, 2);
  }
}

// kStrided: the operands in place (gemm.h's StridedPanel): x's depth d of row r at
// x[r·ldx + d·x_depth], the panel's row d at panel + d·panel_row; otherwise the packed layout's
// constants (depth stride 1, rows of kPanel), so the inference tiles keep their addressing.
template <int R, bool kPrefetch, bool kStrided = false>
void tile(const float* x, i64 ldx, const float* panel, i64 d0, i64 d1, const float* bias, float* y,
          i64 ldy, i64 cols, GemmEpilogue epilogue, bool first, bool last, i64 rows_end,
          i64 x_depth = 1, i64 panel_row = kPanel) {
  if constexpr (!kStrided) {
    x_depth = 1;
    panel_row = kPanel;
  }
  vf acc[R][kVecs] = {};
  if (!first) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int j = 0; j < kVecs; ++j)
        acc[r][j] = (j + 1) * W <= cols ? load(y + r * ldy + j * W)
                                        : load_part(y + r * ldy + j * W, cols - j * W);
  }
  const float* xr[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) xr[r] = x + r * ldx;
  constexpr i64 ahead = tuning::gemm_prefetch_rows();
  for (i64 d = d0; d < d1; ++d) {
    if (kPrefetch && d + ahead < rows_end) prefetch_row<kPrefetch>(panel + (d + ahead) * panel_row);
    vf b[kVecs];
#pragma GCC unroll 16
    for (int j = 0; j < kVecs; ++j) b[j] = load(panel + d * panel_row + j * W);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const vf a = splat(xr[r][d * x_depth]);
#pragma GCC unroll 16
      for (int j = 0; j < kVecs; ++j) acc[r][j] = vec::madd(a, b[j], acc[r][j]);
    }
  }
  store_tile<R>(acc, bias, y, ldy, cols, epilogue, last);
}

using Tile = decltype(&tile<1, false>);
template <bool kPrefetch, int... R>
constexpr std::array<Tile, sizeof...(R)> tile_table(std::integer_sequence<int, R...>) {
  return {&tile<R + 1, kPrefetch>...};
}
// [0]: the tiles that prefetch (a depth block's first row tile), [1]: the others.
constexpr std::array<std::array<Tile, kRows>, 2> kTiles = {
    tile_table<true>(std::make_integer_sequence<int, kRows>{}),
    tile_table<false>(std::make_integer_sequence<int, kRows>{})};

void panel_kernel(const float* x, i64 ldx, i64 rows, const float* panel, i64 k, const float* bias,
                  float* y, i64 ldy, i64 cols, GemmEpilogue epilogue) {
  // Depth blocks outside, then column blocks, rows inside: one block of the panel stays in
  // cache while every row tile passes over it (768 x kBlock floats in L2; a small task's
  // 128 x kBlock in L1).
  // The blocks depend on k and on whether the task is small enough to stream its weights
  // (tuning.h: gemm_prefetch_max_rows()),
  // never on threads; any split gives the same bits (exact partial sums). (Measured with
  // `headcount bench --suite encoder`, 2 threads, 448 rows, on a shared host: FFN down,
  // k = 1536, ran at 37 GFLOP/s against 108 for W_qkv before the depth blocks, 72 with them;
  // tuning.h has why the blocks are now 768 deep, and 128 for small tasks.)
  const bool streaming = rows <= tuning::gemm_prefetch_max_rows();
#ifdef HC_GEMM_DEPTH_OVERRIDE  // only bench/gemm_depth_ab.cpp's second copy, to time another depth
  const i64 kc = streaming ? tuning::gemm_streaming_depth_block() : HC_GEMM_DEPTH_OVERRIDE;
#else
  const i64 kc = streaming ? tuning::gemm_streaming_depth_block() : tuning::gemm_depth_block();
#endif
  constexpr int prefetching = 0;  // kTiles' index for r0 == 0: every task's first row tile
  for (i64 d0 = 0; d0 < k; d0 += kc) {
    const i64 d1 = std::min(k, d0 + kc);
    for (i64 c0 = 0; c0 < cols; c0 += kBlock) {
      const i64 block_cols = std::min<i64>(kBlock, cols - c0);
      for (i64 r0 = 0; r0 < rows; r0 += kRows) {
        const int nr = static_cast<int>(std::min<i64>(kRows, rows - r0));
        kTiles[r0 == 0 ? prefetching : 1][nr - 1](
            x + r0 * ldx, ldx, panel + c0, d0, d1, bias == nullptr ? nullptr : bias + c0,
            y + r0 * ldy + c0, ldy, block_cols, epilogue, d0 == 0, d1 == k, k, 1, kPanel);
      }
    }
  }
}

using StridedTile = decltype(&tile<1, false, true>);
template <int... R>
constexpr std::array<StridedTile, sizeof...(R)> strided_tile_table(
    std::integer_sequence<int, R...>) {
  return {&tile<R + 1, false, true>...};
}
constexpr std::array<StridedTile, kRows> kStridedTiles =
    strided_tile_table(std::make_integer_sequence<int, kRows>{});

// gemm.h's StridedPanel: the same blocking and per-element arithmetic as panel_kernel (one fp32
// accumulator per output, depths in increasing order, bias then nothing else), so the packed
// and in-place operands give the same bits. The training GEMM's operands are small and
// already in cache (a step's activations), so no prefetch; with `accumulate` the first depth
// block starts from y as later blocks do.
void panel_kernel_strided(const StridedPanel& s) {
  const i64 kc = tuning::gemm_depth_block();
  for (i64 d0 = 0; d0 < s.k; d0 += kc) {
    const i64 d1 = std::min(s.k, d0 + kc);
    for (i64 c0 = 0; c0 < s.cols; c0 += kBlock) {
      const i64 block_cols = std::min<i64>(kBlock, s.cols - c0);
      for (i64 r0 = 0; r0 < s.rows; r0 += kRows) {
        const int nr = static_cast<int>(std::min<i64>(kRows, s.rows - r0));
        kStridedTiles[nr - 1](s.x + r0 * s.x_row_stride, s.x_row_stride, s.panel + c0, d0, d1,
                              s.bias == nullptr ? nullptr : s.bias + c0, s.y + r0 * s.ldy + c0,
                              s.ldy, block_cols, GemmEpilogue::none, d0 == 0 && !s.accumulate,
                              d1 == s.k, s.k, s.x_depth_stride, s.panel_row_stride);
      }
    }
  }
}

// ---- bf16 x and panels (layout in gemm.h) --------------------------------------------------

typedef std::uint32_t vu __attribute__((vector_size(W * 4)));
typedef std::uint16_t vh __attribute__((vector_size(W * 2)));

inline vu load_u(const std::uint32_t* p) {
  vu v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The x pair (2p, 2p+1) of a bf16 row as one 32-bit word.
inline std::uint32_t pair_word(const std::uint16_t* x, i64 p) {
  std::uint32_t w;
  std::memcpy(&w, x + 2 * p, sizeof w);
  return w;
}

inline float bf16_float(std::uint32_t bits16) {
  const std::uint32_t w = bits16 << 16;
  float f;
  std::memcpy(&f, &w, sizeof f);
  return f;
}

// As tile() on bf16 inputs, pairs [p0, p1) of the depth.
template <int R, bool kPrefetch>
void tile_bf16(const std::uint16_t* x, i64 ldx, const std::uint32_t* panel, i64 p0, i64 p1,
               const float* bias, float* y, i64 ldy, i64 cols, GemmEpilogue epilogue, bool first,
               bool last, i64 rows_end) {
  vf acc[R][kVecs] = {};
  if (!first) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int j = 0; j < kVecs; ++j)
        acc[r][j] = (j + 1) * W <= cols ? load(y + r * ldy + j * W)
                                        : load_part(y + r * ldy + j * W, cols - j * W);
  }
  const std::uint16_t* xr[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) xr[r] = x + r * ldx;
  constexpr i64 ahead = tuning::gemm_prefetch_rows();
  for (i64 p = p0; p < p1; ++p) {
    if (kPrefetch && p + ahead < rows_end) prefetch_row<kPrefetch>(panel + (p + ahead) * kPanel);
#if HC_WITH_BF16
    // acc += W[2p]·x[2p] + W[2p+1]·x[2p+1], both products exact, in vdpbf16ps's order.
    __m512bh b[kVecs];
#pragma GCC unroll 16
    for (int j = 0; j < kVecs; ++j) b[j] = (__m512bh)_mm512_loadu_si512(panel + p * kPanel + j * W);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair_word(xr[r], p)));
#pragma GCC unroll 16
      for (int j = 0; j < kVecs; ++j) acc[r][j] = (vf)_mm512_dpbf16_ps((__m512)acc[r][j], b[j], a);
    }
#else
    // Widened: the even depth is the lane's low half moved up, the odd one its high half with
    // the low bits cleared; one fp32 multiply-add each (exact products, one rounding per add).
    // Two passes over the rows keep kVecs panel vectors live, not 2·kVecs.
    vf b[kVecs];
#pragma GCC unroll 16
    for (int j = 0; j < kVecs; ++j) b[j] = (vf)(load_u(panel + p * kPanel + j * W) << 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const vf a = splat(bf16_float(xr[r][2 * p]));
#pragma GCC unroll 16
      for (int j = 0; j < kVecs; ++j) acc[r][j] = vec::madd(a, b[j], acc[r][j]);
    }
#pragma GCC unroll 16
    for (int j = 0; j < kVecs; ++j) b[j] = (vf)(load_u(panel + p * kPanel + j * W) & 0xffff0000u);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const vf a = splat(bf16_float(xr[r][2 * p + 1]));
#pragma GCC unroll 16
      for (int j = 0; j < kVecs; ++j) acc[r][j] = vec::madd(a, b[j], acc[r][j]);
    }
#endif
  }
  store_tile<R>(acc, bias, y, ldy, cols, epilogue, last);
}

using TileBf16 = decltype(&tile_bf16<1, false>);
template <bool kPrefetch, int... R>
constexpr std::array<TileBf16, sizeof...(R)> tile_table_bf16(std::integer_sequence<int, R...>) {
  return {&tile_bf16<R + 1, kPrefetch>...};
}
constexpr std::array<std::array<TileBf16, kRows>, 2> kTilesBf16 = {
    tile_table_bf16<true>(std::make_integer_sequence<int, kRows>{}),
    tile_table_bf16<false>(std::make_integer_sequence<int, kRows>{})};

void panel_kernel_bf16(const std::uint16_t* x, i64 ldx, i64 rows, const std::uint32_t* panel, i64 k,
                       const float* bias, float* y, i64 ldy, i64 cols, GemmEpilogue epilogue) {
  // As panel_kernel, in pairs: a depth block of gemm_bf16_depth_block() depths is as many
  // bytes of the panel as fp32's block (2 bytes a weight instead of 4).
  const i64 pairs = k / 2, kc = tuning::gemm_bf16_depth_block() / 2;
  const int prefetching = rows <= tuning::gemm_prefetch_max_rows() ? 0 : 1;
  for (i64 p0 = 0; p0 < pairs; p0 += kc) {
    const i64 p1 = std::min(pairs, p0 + kc);
    for (i64 c0 = 0; c0 < cols; c0 += kBlock) {
      const i64 block_cols = std::min<i64>(kBlock, cols - c0);
      for (i64 r0 = 0; r0 < rows; r0 += kRows) {
        const int nr = static_cast<int>(std::min<i64>(kRows, rows - r0));
        kTilesBf16[r0 == 0 ? prefetching : 1][nr - 1](
            x + r0 * ldx, ldx, panel + c0, p0, p1, bias == nullptr ? nullptr : bias + c0,
            y + r0 * ldy + c0, ldy, block_cols, epilogue, p0 == 0, p1 == pairs, pairs);
      }
    }
  }
}

// Round to nearest even on the bits, as headcount::to_bf16: w + 0x7fff + (bit 16 of w), then
// the top half; a NaN keeps its top half with the quiet bit set.
inline vh round_bf16(vf v) {
  const vu w = (vu)v;
  const vu rounded = (w + 0x7fffu + ((w >> 16) & 1u)) >> 16;
  const vu nan = (w >> 16) | 0x40u;
  const vu out = (w & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
  return __builtin_convertvector(out, vh);
}

void to_bf16_array(const float* x, std::uint16_t* y, i64 n) {
  i64 i = 0;
  for (; i + W <= n; i += W) {
    const vh h = round_bf16(load(x + i));
    std::memcpy(y + i, &h, sizeof h);
  }
  if (i < n) {
    float tmp[W] = {};
    std::copy_n(x + i, n - i, tmp);
    std::uint16_t out[W];
    const vh h = round_bf16(load(tmp));
    std::memcpy(out, &h, sizeof h);
    std::copy_n(out, n - i, y + i);
  }
}

// ---- int8 x and panels (layout in gemm.h) --------------------------------------------------

typedef std::int32_t vs __attribute__((vector_size(W * 4)));

inline vs load_s(const void* p) {
  vs v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The int32 partial sums of a depth block pass through y's floats as raw bits (exact); whole
// vectors straight, a last partial one through a small buffer.
inline vs load_bits_part(const float* p, i64 cols) {
  if (cols >= W) return load_s(p);
  std::int32_t tmp[W] = {};
  std::memcpy(tmp, p, static_cast<std::size_t>(std::max<i64>(0, cols)) * 4);
  return load_s(tmp);
}

inline void store_bits_part(float* p, vs v, i64 cols) {
  if (cols >= W) {
    std::memcpy(p, &v, sizeof v);
    return;
  }
  std::int32_t tmp[W];
  std::memcpy(tmp, &v, sizeof v);
  std::memcpy(p, tmp, static_cast<std::size_t>(cols) * 4);
}

// An int8 output from its exact int32 sum: the x offset taken out, then the column's and the
// row's scales, the bias and the epilogue, in fp32. Shared by the register tiles and the AMX
// kernel, so both give the same bits from the same sums.
inline vf finish_i8(vs sum, vs offset, vf col_scale, float row_scale, vf bias,
                    GemmEpilogue epilogue) {
  const vf s = __builtin_convertvector(sum - offset, vf);
  return finish(s * (col_scale * splat(row_scale)), bias, epilogue);
}

template <int R, bool kPrefetch>
void tile_i8(const std::uint8_t* x, i64 ldx, const float* row_scale, const std::uint32_t* panel,
             i64 q0, i64 q1, const float* col_scale, const std::int32_t* col_offset,
             const float* bias, float* y, i64 ldy, i64 cols, GemmEpilogue epilogue, bool first,
             bool last, i64 rows_end) {
  vs acc[R][kVecs] = {};
  if (!first) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int j = 0; j < kVecs; ++j) acc[r][j] = load_bits_part(y + r * ldy + j * W, cols - j * W);
  }
  const std::uint8_t* xr[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) xr[r] = x + r * ldx;
  constexpr i64 ahead = tuning::gemm_prefetch_rows();
  for (i64 q = q0; q < q1; ++q) {
    if (kPrefetch && q + ahead < rows_end) prefetch_row<kPrefetch>(panel + (q + ahead) * kPanel);
    vs b[kVecs];
#pragma GCC unroll 16
    for (int j = 0; j < kVecs; ++j) b[j] = load_s(panel + q * kPanel + j * W);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      std::uint32_t word;
      std::memcpy(&word, xr[r] + 4 * q, 4);
#if HC_WITH_VNNI
      // acc += Σ_j x_j·w_j over the quad, u8 times s8, in 32 bits: vpdpbusd (AVX512_VNNI).
      const __m512i a = _mm512_set1_epi32(static_cast<int>(word));
#pragma GCC unroll 16
      for (int j = 0; j < kVecs; ++j)
        acc[r][j] = (vs)_mm512_dpbusd_epi32((__m512i)acc[r][j], a, (__m512i)b[j]);
#else
      // Widened: each byte of the lane sign-extended by two shifts, times the x byte, added.
#pragma GCC unroll 4
      for (int byte = 0; byte < 4; ++byte) {
        const std::int32_t xb = static_cast<std::int32_t>((word >> (8 * byte)) & 0xffu);
#pragma GCC unroll 16
        for (int j = 0; j < kVecs; ++j) acc[r][j] += xb * ((b[j] << (24 - 8 * byte)) >> 24);
      }
#endif
    }
  }
  // The panel holds all 64 scales and offsets (zero past n); the bias only n.
  vf cs[kVecs] = {}, bv[kVecs] = {};
  vs off[kVecs] = {};
  if (last) {
#pragma GCC unroll 16
    for (int j = 0; j < kVecs; ++j) {
      cs[j] = load(col_scale + j * W);
      off[j] = load_s(col_offset + j * W);
      bv[j] = bias == nullptr       ? splat(0.0f)
              : (j + 1) * W <= cols ? load(bias + j * W)
                                    : load_part(bias + j * W, cols - j * W);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < kVecs; ++j) {
      if (j * W >= cols) continue;
      if (!last) {
        store_bits_part(y + r * ldy + j * W, acc[r][j], cols - j * W);
        continue;
      }
      const vf v = finish_i8(acc[r][j], off[j], cs[j], row_scale[r], bv[j], epilogue);
      if ((j + 1) * W <= cols) {
        store(y + r * ldy + j * W, v);
      } else {
        float tmp[W];
        store(tmp, v);
        std::copy_n(tmp, cols - j * W, y + r * ldy + j * W);
      }
    }
}

using TileI8 = decltype(&tile_i8<1, false>);
template <bool kPrefetch, int... R>
constexpr std::array<TileI8, sizeof...(R)> tile_table_i8(std::integer_sequence<int, R...>) {
  return {&tile_i8<R + 1, kPrefetch>...};
}
constexpr std::array<std::array<TileI8, kRows>, 2> kTilesI8 = {
    tile_table_i8<true>(std::make_integer_sequence<int, kRows>{}),
    tile_table_i8<false>(std::make_integer_sequence<int, kRows>{})};

void panel_kernel_i8(const std::uint8_t* x, i64 ldx, const float* row_scale, i64 rows,
                     const std::uint8_t* panel, i64 k, const float* bias, float* y, i64 ldy,
                     i64 cols, GemmEpilogue epilogue) {
  // As panel_kernel, in quads: a depth block of gemm_i8_depth_block() depths is as many bytes
  // of the panel as fp32's block (one byte a weight, four to a lane).
  const bool streaming = rows <= tuning::gemm_prefetch_max_rows();  // as panel_kernel
  const i64 quads = k / 4, kc = (streaming ? tuning::gemm_i8_streaming_depth_block()
                                           : tuning::gemm_i8_depth_block()) /
                                4;
  const auto* lanes = reinterpret_cast<const std::uint32_t*>(panel);
  const auto* col_scale = reinterpret_cast<const float*>(panel + k * kPanel);
  const auto* col_offset = reinterpret_cast<const std::int32_t*>(panel + k * kPanel + 4 * kPanel);
  const int prefetching = streaming ? 0 : 1;
  for (i64 q0 = 0; q0 < quads; q0 += kc) {
    const i64 q1 = std::min(quads, q0 + kc);
    for (i64 c0 = 0; c0 < cols; c0 += kBlock) {
      const i64 block_cols = std::min<i64>(kBlock, cols - c0);
      for (i64 r0 = 0; r0 < rows; r0 += kRows) {
        const int nr = static_cast<int>(std::min<i64>(kRows, rows - r0));
        kTilesI8[r0 == 0 ? prefetching : 1][nr - 1](
            x + r0 * ldx, ldx, row_scale + r0, lanes + c0, q0, q1, col_scale + c0, col_offset + c0,
            bias == nullptr ? nullptr : bias + c0, y + r0 * ldy + c0, ldy, block_cols, epilogue,
            q0 == 0, q1 == quads, quads);
      }
    }
  }
}

// q = round(x·(127 / max|x|)) by adding and subtracting 1.5·2^23 (|x·127/max| <= 127, so the
// sum's unit is 1: it rounds to nearest even), clamped to ±127, plus 128.
void quantize_u8_row(const float* x, i64 n, std::uint8_t* q, float* scale) {
  vf m = splat(0.0f);
  vi bad = vi{} == 1;  // all false
  const vf big = splat(3.40282347e38f);
  i64 i = 0;
  for (; i + W <= n; i += W) {
    const vf v = load(x + i);
    const vf a = v < 0 ? -v : v;
    bad |= !(a <= big);  // NaN and ±inf
    m = a > m ? a : m;
  }
  float maxabs = 0.0f;
  bool non_finite = false;
  for (int l = 0; l < W; ++l) {
    maxabs = std::max(maxabs, m[l]);
    non_finite = non_finite || bad[l] != 0;
  }
  for (; i < n; ++i) {
    const float a = std::fabs(x[i]);
    non_finite = non_finite || !(a <= 3.40282347e38f);
    maxabs = std::max(maxabs, a);
  }
  // 127 / max overflows for max below ~3.7e-37: such a row is flushed to zero like an all-zero
  // one (its products are below fp32's resolution of any output but an exact zero).
  const float inv = 127.0f / maxabs;
  if (non_finite || maxabs == 0.0f || !(inv <= 3.40282347e38f)) {
    std::fill_n(q, n, std::uint8_t{128});
    *scale = non_finite ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
    return;
  }
  *scale = maxabs / 127.0f;
  typedef std::uint8_t vb __attribute__((vector_size(W)));
  const vf round = splat(12582912.0f), lo = splat(-127.0f), hi = splat(127.0f),
           scale_by = splat(inv);
  auto bytes = [&](vf v) {
    vf t = (v * scale_by + round) - round;
    t = t < lo ? lo : t;
    t = t > hi ? hi : t;
    return __builtin_convertvector(__builtin_convertvector(t, vi) + 128, vb);
  };
  for (i = 0; i + W <= n; i += W) {
    const vb b = bytes(load(x + i));
    std::memcpy(q + i, &b, W);
  }
  if (i < n) {
    float tmp[W] = {};
    std::copy_n(x + i, n - i, tmp);
    const vb b = bytes(load(tmp));
    std::memcpy(q + i, &b, static_cast<std::size_t>(n - i));
  }
}

void gelu_array(float* x, i64 n) {
  i64 i = 0;
  for (; i + W <= n; i += W) store(x + i, gelu_v(load(x + i)));
  if (i < n) {
    float tmp[W] = {};
    std::copy_n(x + i, n - i, tmp);
    store(tmp, gelu_v(load(tmp)));
    std::copy_n(tmp, n - i, x + i);
  }
}

// y = gelu(u) over n floats (y may be u): the training forward keeps u for its backward.
void gelu_from_array(const float* u, float* y, i64 n) {
  i64 i = 0;
  for (; i + W <= n; i += W) store(y + i, gelu_v(load(u + i)));
  if (i < n) store_part(y + i, gelu_v(load_part(u + i, n - i)), n - i);
}

// du = dy · gelu'(u), gelu'(u) = Φ(u) + u·φ(u) with Φ = (1 + erf(u/√2))/2 (erf_v) and
// φ = exp(-u²/2)/√(2π) (exp_v, 0 below its underflow, where u·φ is below fp32's range anyway).
inline vf gelu_grad_v(vf u) {
  const vf cdf = splat(0.5f) * (splat(1.0f) + erf_v(u * splat(0.70710678118654752f)));
  const vf pdf = splat(0.39894228040143268f) * vec::exp_v(splat(-0.5f) * u * u);
  return cdf + u * pdf;
}

void gelu_grad_array(const float* u, const float* dy, float* du, i64 n) {
  i64 i = 0;
  for (; i + W <= n; i += W) store(du + i, load(dy + i) * gelu_grad_v(load(u + i)));
  if (i < n)
    store_part(du + i, load_part(dy + i, n - i) * gelu_grad_v(load_part(u + i, n - i)), n - i);
}

void erf_array(const float* x, float* y, i64 n) {
  for (i64 i = 0; i < n; i += W) store(y + i, erf_v(load(x + i)));
}

// ---- residual + LayerNorm of one row ------------------------------------------------------

// 32 double lanes: lane j sums the elements c with c mod 32 == j, in increasing c, then the
// lanes are added in a fixed tree. Four vectors of 8 doubles are four independent chains of
// adds on AVX-512 (8 on AVX2, 16 on SSE2), where 8 lanes were one AVX-512 chain, 4 cycles an
// add (LayerNorm was 3.5% of `embed` at batch 32 in a perf profile on the SSE2 build). The
// order depends only on the width, so a row's result depends on nothing but the row (and the
// ISA: AVX2 and AVX-512 fuse d·d + lane, SSE2 rounds the product first).
typedef double vd __attribute__((vector_size(64)));
typedef float vf8 __attribute__((vector_size(32)));
constexpr int kNormLanes = 32;

// Eight floats widened to doubles (an out parameter: returning a 64-byte vector by value
// draws GCC's ABI warning on the ISAs without 512-bit registers).
inline void widen8(const float* p, vd& out) {
  vf8 f;
  std::memcpy(&f, p, sizeof f);
  out = __builtin_convertvector(f, vd);
}

double lane_sum(const float* row, i64 width, double shift, bool squared) {
  vd lanes[kNormLanes / 8] = {};
  const vd sh = vd{} + shift;
  i64 c = 0;
  for (; c + kNormLanes <= width; c += kNormLanes)
#pragma GCC unroll 4
    for (int j = 0; j < kNormLanes / 8; ++j) {
      vd d;
      widen8(row + c + 8 * j, d);
      d -= sh;
      lanes[j] += squared ? d * d : d;
    }
  double l[kNormLanes];
  std::memcpy(l, lanes, sizeof l);
  for (int j = 0; c + j < width; ++j) {
    const double d = row[c + j] - shift;
    l[j] += squared ? d * d : d;
  }
  for (int half = kNormLanes / 2; half >= 1; half /= 2)
    for (int j = 0; j < half; ++j) l[j] = l[j] + l[j + half];
  return l[0];
}

void layer_norm_row(float* row, const float* residual, i64 width, const float* gamma,
                    const float* beta, float eps) {
  if (residual != nullptr) {
    i64 c = 0;
    for (; c + W <= width; c += W) store(row + c, load(row + c) + load(residual + c));
    for (; c < width; ++c) row[c] += residual[c];
  }
  const double mean = lane_sum(row, width, 0.0, false) / static_cast<double>(width);
  const double squares = lane_sum(row, width, mean, true);
  const double inv_std = 1.0 / std::sqrt(squares / static_cast<double>(width) + eps);
  const vd m = vd{} + mean, s = vd{} + inv_std;
  i64 c = 0;
  for (; c + 8 <= width; c += 8) {
    vd v;
    widen8(row + c, v);
    const vf8 z = __builtin_convertvector((v - m) * s, vf8);
    vf8 g, b;
    std::memcpy(&g, gamma + c, sizeof g);
    std::memcpy(&b, beta + c, sizeof b);
    const vf8 y = z * g + b;
    std::memcpy(row + c, &y, sizeof y);
  }
  for (; c < width; ++c)
    row[c] = static_cast<float>((row[c] - mean) * inv_std) * gamma[c] + beta[c];
}

// The training executor's LayerNorm rows (train/layer_norm.h): the statistics by lane_sum
// above (32 double lanes, an order fixed by the width), saved as floats; x̂ = (x - mean)·rstd
// from those floats, exactly as the backward recomputes it.
void layer_norm_train_row(const float* x, i64 width, const float* gamma, const float* beta,
                          float eps, float* y, float* mean_out, float* rstd_out) {
  const double mean = lane_sum(x, width, 0.0, false) / static_cast<double>(width);
  const double squares = lane_sum(x, width, mean, true);
  const float mu = static_cast<float>(mean);
  const float inv = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(width) + eps));
  *mean_out = mu;
  *rstd_out = inv;
  const vf m = splat(mu), s = splat(inv);
  i64 c = 0;
  for (; c + W <= width; c += W)
    store(y + c, (load(x + c) - m) * s * load(gamma + c) + load(beta + c));
  for (; c < width; ++c) y[c] = (x[c] - mu) * inv * gamma[c] + beta[c];
}

// One row of LayerNorm's dx: g = dy·γ, dx = rstd·(g - mean(g) - x̂·mean(g·x̂)), the two means
// summed in double over 8 lanes (c mod 8, increasing c, then a fixed tree): an order that
// depends on the width only. With `accumulate`, dx += that.
void layer_norm_grad_row(const float* x, const float* dy, const float* gamma, float mu, float inv,
                         i64 width, float* dx, bool accumulate) {
  constexpr int kLanes = 8;
  double sum_g[kLanes] = {}, sum_gx[kLanes] = {};
  i64 c = 0;
  for (; c + kLanes <= width; c += kLanes)
#pragma GCC unroll 8
    for (int j = 0; j < kLanes; ++j) {
      const double gc = static_cast<double>(dy[c + j]) * gamma[c + j];
      sum_g[j] += gc;
      sum_gx[j] += gc * ((x[c + j] - mu) * inv);
    }
  for (int j = 0; c + j < width; ++j) {
    const double gc = static_cast<double>(dy[c + j]) * gamma[c + j];
    sum_g[j] += gc;
    sum_gx[j] += gc * ((x[c + j] - mu) * inv);
  }
  for (int half = kLanes / 2; half >= 1; half /= 2)
    for (int j = 0; j < half; ++j) {
      sum_g[j] += sum_g[j + half];
      sum_gx[j] += sum_gx[j + half];
    }
  const float mean_g = static_cast<float>(sum_g[0] / static_cast<double>(width));
  const float mean_gx = static_cast<float>(sum_gx[0] / static_cast<double>(width));
  const vf m = splat(mu), s = splat(inv), mg = splat(mean_g), mgx = splat(mean_gx);
  c = 0;
  for (; c + W <= width; c += W) {
    const vf xhat = (load(x + c) - m) * s;
    const vf v = s * (load(dy + c) * load(gamma + c) - mg - xhat * mgx);
    store(dx + c, accumulate ? load(dx + c) + v : v);
  }
  for (; c < width; ++c) {
    const float xhat = (x[c] - mu) * inv;
    const float v = inv * (dy[c] * gamma[c] - mean_g - xhat * mean_gx);
    dx[c] = accumulate ? dx[c] + v : v;
  }
}

#if HC_WITH_AMX
// ---- AMX tiles (panel_bf16_amx, panel_i8_amx: gemm.h) -------------------------------------
//
// A task's rows go in chunks of 32 (two row tiles); each chunk's 64 columns in two passes of 32
// (two column tiles), so four accumulator tiles (0-3) are fed by two A tiles (4, 5: x, 16 rows
// x 64 bytes each) and two B tiles (6, 7: the panel's 16 pair or quad rows x 16 lanes, read in
// place at the panel's row stride of 256 bytes), each tile loaded feeding two products. The
// whole depth runs through the accumulators in one pass (no depth blocks: the fp32 or int32
// tile holds the partial sums), then they go to a small buffer, from which the last step
// (bias and epilogue; int8: finish_i8) writes the chunk's valid rows and columns of y.

constexpr i64 kTileRows = 16, kChunkRows = 32;
constexpr i64 kPanelRowBytes = kPanel * 4;  // one pair (bf16) or quad (int8) row of the panel

// Accumulators (NR x NC tiles, 1 or 2 each) over `steps` steps: A tile i of step s at
// a + i·16·lda + s·a_step (row stride lda bytes), B tile j at b + s·16·256 + j·64 (row stride
// 256), then stored to out + i·16·256 + j·64 (a [32][64] buffer of 4-byte values).
template <int NR, int NC, bool kInt8>
void amx_block(i64 steps, const char* a, i64 lda, i64 a_step, const char* b, char* out) {
  constexpr i64 b_step = kTileRows * kPanelRowBytes;
  _tile_zero(0);
  if constexpr (NC == 2) _tile_zero(1);
  if constexpr (NR == 2) _tile_zero(2);
  if constexpr (NR == 2 && NC == 2) _tile_zero(3);
  for (i64 s = 0; s < steps; ++s) {
    _tile_loadd(4, a + s * a_step, lda);
    _tile_loadd(6, b + s * b_step, kPanelRowBytes);
    if constexpr (kInt8)
      _tile_dpbusd(0, 4, 6);
    else
      _tile_dpbf16ps(0, 4, 6);
    if constexpr (NC == 2) {
      _tile_loadd(7, b + s * b_step + 64, kPanelRowBytes);
      if constexpr (kInt8)
        _tile_dpbusd(1, 4, 7);
      else
        _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (NR == 2) {
      _tile_loadd(5, a + kTileRows * lda + s * a_step, lda);
      if constexpr (kInt8)
        _tile_dpbusd(2, 5, 6);
      else
        _tile_dpbf16ps(2, 5, 6);
      if constexpr (NC == 2) {
        if constexpr (kInt8)
          _tile_dpbusd(3, 5, 7);
        else
          _tile_dpbf16ps(3, 5, 7);
      }
    }
  }
  constexpr i64 ldo = kPanel * 4;
  _tile_stored(0, out, ldo);
  if constexpr (NC == 2) _tile_stored(1, out + 64, ldo);
  if constexpr (NR == 2) _tile_stored(2, out + kTileRows * ldo, ldo);
  if constexpr (NR == 2 && NC == 2) _tile_stored(3, out + kTileRows * ldo + 64, ldo);
}

// One row tile (rows <= 16: batch 1, a decoded token) against all four column tiles of the panel
// in one pass over the depth: tiles 0-3 accumulate, 4 holds x, 5-7 the panel (5 twice a step),
// so each step reads the panel's 16 rows of 256 bytes whole and in order, as the vector kernels
// stream them, instead of two passes over alternate halves of every line. Each accumulator still
// takes the same steps in the same order as in amx_block, so a row's bits do not change.
template <bool kInt8>
void amx_row_tile(i64 steps, const char* a, i64 lda, i64 a_step, const char* b, char* out) {
  constexpr i64 b_step = kTileRows * kPanelRowBytes;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  // The panel streams from memory or L3 here (batch 1: a few rows, every weight used once), and
  // tile loads do not start the hardware prefetcher as the vector kernels' loads do: the rows
  // gemm_prefetch_rows() ahead are asked for, one prefetch per 64-byte line, as prefetch_row.
  constexpr i64 ahead = tuning::gemm_prefetch_rows() / kTileRows;  // steps
  for (i64 s = 0; s < steps; ++s) {
    const char* bs = b + s * b_step;
    if (s + ahead < steps)
#pragma GCC unroll 64
      for (i64 line = 0; line < b_step / 64; ++line)
        __builtin_prefetch(bs + ahead * b_step + 64 * line, 0, 3);
    _tile_loadd(4, a + s * a_step, lda);
    _tile_loadd(5, bs, kPanelRowBytes);
    _tile_loadd(6, bs + 64, kPanelRowBytes);
    _tile_loadd(7, bs + 128, kPanelRowBytes);
    if constexpr (kInt8) {
      _tile_dpbusd(0, 4, 5);
      _tile_dpbusd(1, 4, 6);
      _tile_dpbusd(2, 4, 7);
    } else {
      _tile_dpbf16ps(0, 4, 5);
      _tile_dpbf16ps(1, 4, 6);
      _tile_dpbf16ps(2, 4, 7);
    }
    _tile_loadd(5, bs + 192, kPanelRowBytes);
    if constexpr (kInt8)
      _tile_dpbusd(3, 4, 5);
    else
      _tile_dpbf16ps(3, 4, 5);
  }
  constexpr i64 ldo = kPanel * 4;
  _tile_stored(0, out, ldo);
  _tile_stored(1, out + 64, ldo);
  _tile_stored(2, out + 128, ldo);
  _tile_stored(3, out + 192, ldo);
}

// The products of one chunk of `rows` <= 32 rows of x (a, row stride lda bytes, a_step bytes of
// A per step) with the panel's first `cols` columns, into out [32][64].
template <bool kInt8>
void amx_chunk(i64 rows, i64 cols, i64 steps, const char* a, i64 lda, i64 a_step, const char* panel,
               char* out) {
  const bool two_rows = rows > kTileRows;
  if (!two_rows && cols > 3 * kTileRows)
    return amx_row_tile<kInt8>(steps, a, lda, a_step, panel, out);
  for (i64 c0 = 0; c0 < cols; c0 += 2 * kTileRows) {
    const bool two_cols = cols - c0 > kTileRows;
    const char* b = panel + c0 * 4;
    char* o = out + c0 * 4;
    if (two_rows && two_cols)
      amx_block<2, 2, kInt8>(steps, a, lda, a_step, b, o);
    else if (two_rows)
      amx_block<2, 1, kInt8>(steps, a, lda, a_step, b, o);
    else if (two_cols)
      amx_block<1, 2, kInt8>(steps, a, lda, a_step, b, o);
    else
      amx_block<1, 1, kInt8>(steps, a, lda, a_step, b, o);
  }
}

// Both kernels take `cols` columns of ceil(cols / 64) consecutive panels (gemm.h), so that a
// task of a few rows (a decoded token) can cover several panels for one LDTILECFG: the
// configuration zeroes all eight tiles and costs about what one panel's products cost at k 384
// (`build/gemm_stream 1 1 1 7 bf16`, one thread: 44 GFLOP/s for W_qkv with a configuration per
// panel, 66 in a one-off variant that configured once per thread, not kept: another AMX user
// on the same thread could release the tiles under it).
void panel_kernel_bf16_amx(const std::uint16_t* x, i64 ldx, i64 rows, const std::uint32_t* panel,
                           i64 k, const float* bias, float* y, i64 ldy, i64 cols,
                           GemmEpilogue epilogue) {
  alignas(64) float acc[kChunkRows][kPanel];
  // One row tile for the whole call (a few rows): tiles shaped to them; else 16-row tiles.
  if (rows < kTileRows)
    amx::configure_tiles_for_rows(static_cast<int>(rows));
  else
    amx::configure_tiles();
  for (i64 c0 = 0; c0 < cols; c0 += kPanel, panel += k / 2 * kPanel) {
    const i64 panel_cols = std::min<i64>(kPanel, cols - c0);
    const float* panel_bias = bias == nullptr ? nullptr : bias + c0;
    for (i64 r0 = 0; r0 < rows; r0 += kChunkRows) {
      const i64 chunk = std::min(kChunkRows, rows - r0);
      // A step: 32 depths, 64 bytes of each x row; 16 pair rows of the panel.
      amx_chunk<false>(chunk, panel_cols, k / 32, reinterpret_cast<const char*>(x + r0 * ldx),
                       ldx * 2, 64, reinterpret_cast<const char*>(panel),
                       reinterpret_cast<char*>(acc));
      for (i64 r = 0; r < chunk; ++r) {
        vf row[1][kVecs];
#pragma GCC unroll 16
        for (int j = 0; j < kVecs; ++j) row[0][j] = load(acc[r] + j * W);
        store_tile<1>(row, panel_bias, y + (r0 + r) * ldy + c0, ldy, panel_cols, epilogue, true);
      }
    }
  }
  _tile_release();
}

void panel_kernel_i8_amx(const std::uint8_t* x, i64 ldx, const float* row_scale, i64 rows,
                         const std::uint8_t* panel, i64 k, const float* bias, float* y, i64 ldy,
                         i64 cols, GemmEpilogue epilogue) {
  alignas(64) std::int32_t acc[kChunkRows][kPanel];
  // One row tile for the whole call (a few rows): tiles shaped to them; else 16-row tiles.
  if (rows < kTileRows)
    amx::configure_tiles_for_rows(static_cast<int>(rows));
  else
    amx::configure_tiles();
  for (i64 c0 = 0; c0 < cols; c0 += kPanel, panel += (k + 8) * kPanel) {
    const i64 panel_cols = std::min<i64>(kPanel, cols - c0);
    const auto* col_scale = reinterpret_cast<const float*>(panel + k * kPanel);
    const auto* col_offset = reinterpret_cast<const std::int32_t*>(panel + k * kPanel + 4 * kPanel);
    vf cs[kVecs], bv[kVecs];
    vs off[kVecs];
#pragma GCC unroll 16
    for (int j = 0; j < kVecs; ++j) {  // as tile_i8's last depth block
      cs[j] = load(col_scale + j * W);
      off[j] = load_s(col_offset + j * W);
      bv[j] = bias == nullptr             ? splat(0.0f)
              : (j + 1) * W <= panel_cols ? load(bias + c0 + j * W)
                                          : load_part(bias + c0 + j * W, panel_cols - j * W);
    }
    for (i64 r0 = 0; r0 < rows; r0 += kChunkRows) {
      const i64 chunk = std::min(kChunkRows, rows - r0);
      // A step: 64 depths, 64 bytes of each x row; 16 quad rows of the panel.
      amx_chunk<true>(chunk, panel_cols, k / 64, reinterpret_cast<const char*>(x + r0 * ldx), ldx,
                      64, reinterpret_cast<const char*>(panel), reinterpret_cast<char*>(acc));
      for (i64 r = 0; r < chunk; ++r) {
        float* yr = y + (r0 + r) * ldy + c0;
#pragma GCC unroll 16
        for (int j = 0; j < kVecs; ++j) {
          if (j * W >= panel_cols) continue;
          const vf v =
              finish_i8(load_s(acc[r] + j * W), off[j], cs[j], row_scale[r0 + r], bv[j], epilogue);
          if ((j + 1) * W <= panel_cols)
            store(yr + j * W, v);
          else
            store_part(yr + j * W, v, panel_cols - j * W);
        }
      }
    }
  }
  _tile_release();
}
#endif  // HC_WITH_AMX
}  // namespace

const GemmKernels& gemm_table() {
  static const GemmKernels kernels {
    .isa = HC_ISA, .vector_floats = W, .panel = &panel_kernel,
    .panel_strided = &panel_kernel_strided, .gelu_erf = &gelu_array, .erf = &erf_array,
    .gelu_erf_from = &gelu_from_array, .gelu_erf_grad = &gelu_grad_array,
    .panel_bf16 = &panel_kernel_bf16, .to_bf16 = &to_bf16_array, .panel_i8 = &panel_kernel_i8,
#if HC_WITH_AMX
    .panel_bf16_amx = &panel_kernel_bf16_amx, .panel_i8_amx = &panel_kernel_i8_amx,
#endif
    .quantize_u8 = &quantize_u8_row, .layer_norm_row = &layer_norm_row,
    .layer_norm_train_row = &layer_norm_train_row, .layer_norm_grad_row = &layer_norm_grad_row,
#if HC_WITH_VNNI
    .i8_dot = true
#endif
  };
  return kernels;
}

}  // namespace headcount::simd::HC_ISA_NS
