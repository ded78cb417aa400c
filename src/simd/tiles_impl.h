// The tile micro-kernels, written once with GCC/Clang vector extensions and compiled once
// per instruction set (tiles_<isa>.cpp define the macros below and include this file with
// their own -m flags). Nothing here names an instruction, except the bf16 part, which
// only exists where the ISA has a bf16 dot product (vdpbf16ps).
//
//   HC_ISA_NS       namespace of this copy (each copy is a different ISA: no ODR clash)
//   HC_ISA          the Isa enumerator
//   HC_VEC_FLOATS   floats per vector register (W)
//   HC_TILE_ACC     accumulator registers of the register tile
//   HC_TILE_VECS    most vectors per row of the register tile
//   HC_WITH_BF16    defined when AVX512_BF16 is available
//
// Register tiles: R rows x NV vectors of accumulators; per step of the depth each block
// loads NV vectors and broadcasts one value per row, so it issues R·NV FMAs for NV + R
// loads. With AVX-512 (32 registers) the tile holds 24 accumulators: 6 x 4 when the
// output is 64 floats wide, 12 x 2 when it is 32 wide (head_dim 32), so narrow heads keep
// the FMA units as busy as wide ones. The weighted sum has the same shape with P
// broadcast and V loaded.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "simd/tiles.h"
#include "simd/vec_math.h"
#if defined(HC_WITH_BF16) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace headcount::simd::HC_ISA_NS {
namespace {

constexpr int W = HC_VEC_FLOATS;
using vec::exp2_v;
using vec::exp_v;
using vec::load;
using vec::mul_rounded;
using vec::splat;
using vec::store;
using vec::vf;
using vec::vi;
using i64 = std::int64_t;
constexpr int kAcc = HC_TILE_ACC;
constexpr int kVecs = HC_TILE_VECS;
constexpr int kRows = 12;  // the most rows a block takes (when NV is 1 or 2)
// Rows of the register tile for blocks NV vectors wide.
constexpr int rows_for(int nv) { return std::min(kRows, kAcc / nv); }

// ---- scores: s = scale · q · kt -----------------------------------------------------------

// With col_max (not null), also folds the block's column maxima into col_max[0, NV·W): written
// when `first` (the column block's first row block), else max-ed in. A NaN score is never taken
// (x > m is false for it), as in softmax_columns' own pass, so the result is the same value.
template <int R, int NV>
void score_block(const float* q, i64 ldq, const float* kt, i64 ldk, i64 depth, float* s, i64 lds,
                 float scale, float* col_max, bool first) {
  vf acc[R][NV] = {};
  for (i64 d = 0; d < depth; ++d) {
    vf k[NV];
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) k[j] = load(kt + d * ldk + j * W);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const vf qb = splat(q[r * ldq + d]);
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) acc[r][j] += qb * k[j];
    }
  }
  const vf sc = splat(scale);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) {
      acc[r][j] *= sc;
      store(s + r * lds + j * W, acc[r][j]);
    }
  if (col_max == nullptr) return;
#pragma GCC unroll 16
  for (int j = 0; j < NV; ++j) {
    vf m = first ? splat(-std::numeric_limits<float>::infinity()) : load(col_max + j * W);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) m = acc[r][j] > m ? acc[r][j] : m;
    store(col_max + j * W, m);
  }
}

using ScoreBlock = decltype(&score_block<1, 1>);
template <int NV, int... R>
constexpr std::array<ScoreBlock, sizeof...(R)> score_rows(std::integer_sequence<int, R...>) {
  return {&score_block<R + 1, NV>...};
}
template <int... V>
constexpr auto score_table(std::integer_sequence<int, V...>) {
  return std::array<std::array<ScoreBlock, kRows>, sizeof...(V)>{
      score_rows<V + 1>(std::make_integer_sequence<int, kRows>{})...};
}
constexpr auto kScoreBlocks = score_table(std::make_integer_sequence<int, kVecs>{});

void scores_f32(const float* q, i64 ldq, const float* kt, i64 ldk, i64 depth, float* s, i64 lds,
                i64 rows, i64 cols, float scale, float* col_max) {
  // Column blocks outside, rows inside: one block of K^T (depth x kVecs·W) stays in L1
  // while every row block of q passes over it.
  for (i64 c0 = 0; c0 < cols; c0 += kVecs * W) {
    const int nv = static_cast<int>(std::min<i64>(kVecs, (cols - c0) / W));
    for (i64 r0 = 0; r0 < rows; r0 += rows_for(nv)) {
      const int nr = static_cast<int>(std::min<i64>(rows_for(nv), rows - r0));
      kScoreBlocks[nv - 1][nr - 1](q + r0 * ldq, ldq, kt + c0, ldk, depth, s + r0 * lds + c0, lds,
                                   scale, col_max == nullptr ? nullptr : col_max + c0, r0 == 0);
    }
  }
}

// ---- weighted sum: acc = alpha · acc + p · v ----------------------------------------------

template <int R, int NV>
void sum_block(const float* p, i64 p_row, i64 p_key, const float* v, i64 ldv, i64 keys, float* acc,
               i64 ldacc, const float* alpha) {
  vf a[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const vf al = splat(alpha[r]);
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) a[r][j] = load(acc + r * ldacc + j * W) * al;
  }
  for (i64 c = 0; c < keys; ++c) {
    vf vv[NV];
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) vv[j] = load(v + c * ldv + j * W);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const vf pb = splat(p[r * p_row + c * p_key]);
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) a[r][j] += pb * vv[j];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) store(acc + r * ldacc + j * W, a[r][j]);
}

using SumBlock = decltype(&sum_block<1, 1>);
template <int NV, int... R>
constexpr std::array<SumBlock, sizeof...(R)> sum_rows(std::integer_sequence<int, R...>) {
  return {&sum_block<R + 1, NV>...};
}
template <int... V>
constexpr auto sum_table(std::integer_sequence<int, V...>) {
  return std::array<std::array<SumBlock, kRows>, sizeof...(V)>{
      sum_rows<V + 1>(std::make_integer_sequence<int, kRows>{})...};
}
constexpr auto kSumBlocks = sum_table(std::make_integer_sequence<int, kVecs>{});

void weighted_sum_f32(const float* p, i64 p_row, i64 p_key, const float* v, i64 ldv, i64 keys,
                      float* acc, i64 ldacc, i64 rows, i64 width, const float* alpha) {
  // Column blocks of V outside, rows inside: one block of V (keys x kVecs·W floats, 24 KiB for
  // 96 keys) stays in L1 while every row block passes over it, as in scores_f32. (Measured
  // alone, this order changed nothing at head_dim 512; what cured the sum's 72% of the score
  // product's rate there was V's row stride, streaming.cpp's Plan::v_ld. The two together are
  // the L1-friendly layout.)
  const int nv_max = static_cast<int>(std::min<i64>(kVecs, width / W));
  for (i64 e0 = 0; e0 < width; e0 += kVecs * W) {
    const int nv = static_cast<int>(std::min<i64>(kVecs, (width - e0) / W));
    for (i64 r0 = 0; r0 < rows; r0 += rows_for(nv_max)) {
      const int nr = static_cast<int>(std::min<i64>(rows_for(nv_max), rows - r0));
      kSumBlocks[nv - 1][nr - 1](p + r0 * p_row, p_row, p_key, v + e0, ldv, keys,
                                 acc + r0 * ldacc + e0, ldacc, alpha + r0);
    }
  }
}

// ---- the online softmax, down the columns of a transposed score tile -----------------------

// max(m_old, s[k, c0 .. c0 + W) for every k): the softmax's maximum when the score kernel did
// not fold it in. Four running maxima over interleaved keys: one made every compare wait for
// the one before (4 cycles each), and that pass was a fifth of softmax_columns at n 1024,
// 8 x 64. The maximum does not depend on the order (a NaN score is never taken: x > m is false).
inline vf column_max(const float* s, i64 lds, i64 keys, i64 c0, vf m_old) {
  vf m4[4] = {m_old, m_old, m_old, m_old};
  i64 k = 0;
  for (; k + 4 <= keys; k += 4)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const vf x = load(s + (k + j) * lds + c0);
      m4[j] = x > m4[j] ? x : m4[j];
    }
  for (; k < keys; ++k) {
    const vf x = load(s + k * lds + c0);
    m4[0] = x > m4[0] ? x : m4[0];
  }
  const vf m01 = m4[1] > m4[0] ? m4[1] : m4[0], m23 = m4[3] > m4[2] ? m4[3] : m4[2];
  return m23 > m01 ? m23 : m01;
}

void softmax_columns(float* s, i64 lds, i64 keys, i64 cols, float* max, float* sum, float* alpha,
                     const float* tile_max) {
  const vf minus_inf = splat(-std::numeric_limits<float>::infinity());
  for (i64 c0 = 0; c0 < cols; c0 += W) {
    const vf m_old = load(max + c0);
    vf m_new;
    if (tile_max != nullptr) {
      const vf t = load(tile_max + c0);
      m_new = t > m_old ? t : m_old;
    } else {
      m_new = column_max(s, lds, keys, c0, m_old);
    }
    // A column that has seen no finite score yet: shift by 0 (its scores are all -inf,
    // so they still give 0) and leave its sum alone.
    // e^(s - m) as 2^(fl(s·log2e) - fl(m·log2e)): both products rounded on their own (not
    // fused into the subtraction), so the key that holds the maximum gets exactly 1, as with
    // e^(s - m); then a row with one visible key has l = 1 and lse = m bitwise, the same
    // lse the backward's own scores reproduce. 2^x costs 10 instructions on AVX-512 where
    // e^x cost 15 (plus this multiply): a call 2.7% faster at head_dim 64, 9.9% at head_dim 8
    // on AMD Zen 4, one thread (bench/results/2026-12-04d-amd-softmax-exp2.txt).
    const vi none = m_new == minus_inf;
    const vf log2e = splat(1.44269504088896341f);
    const vf shift = none ? splat(0.0f) : mul_rounded(m_new, log2e);
    const vf a = none ? splat(1.0f) : exp2_v(mul_rounded(m_old, log2e) - shift);
    vf total = load(sum + c0) * a;
    for (i64 k = 0; k < keys; ++k) {
      const vf e = exp2_v(mul_rounded(load(s + k * lds + c0), log2e) - shift);
      store(s + k * lds + c0, e);
      total += e;
    }
    store(max + c0, m_new);
    store(sum + c0, total);
    store(alpha + c0, a);
  }
}

// ---- masks: each column (query) sees the keys [lo, hi) of the tile ------------------------

void mask_columns(float* s, i64 lds, i64 keys, i64 cols, const std::int32_t* lo,
                  const std::int32_t* hi) {
  const vf minus_inf = splat(-std::numeric_limits<float>::infinity());
  for (i64 k = 0; k < keys; ++k) {
    const vi key = static_cast<std::int32_t>(k) + vi{};
    float* row = s + k * lds;
    for (i64 c0 = 0; c0 < cols; c0 += W) {
      vi l, h;
      std::memcpy(&l, lo + c0, sizeof l);
      std::memcpy(&h, hi + c0, sizeof h);
      const vi hidden = (key < l) | (key >= h);
      store(row + c0, hidden ? minus_inf : load(row + c0));
    }
  }
}

// ---- the inputs' inf/NaN scan ---------------------------------------------------------------

// An fp32 value is inf or NaN iff its exponent bits are all ones. Four vectors a step, OR-ed
// into one mask: no branch, so the scan runs at the speed of the cache it reads from (every
// attention call scans q, k and v; the SSE2 loop of the generic build was 2% of `embed`).
bool any_non_finite_f32(const float* x, i64 n) {
  const vi exponent = 0x7f800000 + vi{};
  vi seen = {};
  i64 i = 0;
  for (; i + 4 * W <= n; i += 4 * W)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      vi bits;
      std::memcpy(&bits, x + i + j * W, sizeof bits);
      seen |= (bits & exponent) == exponent;
    }
  for (; i + W <= n; i += W) {
    vi bits;
    std::memcpy(&bits, x + i, sizeof bits);
    seen |= (bits & exponent) == exponent;
  }
  bool any = false;
  for (int l = 0; l < W; ++l) any = any || seen[l] != 0;
  for (; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    any = any || (bits & 0x7f800000u) == 0x7f800000u;
  }
  return any;
}

// ---- Q^T packing and the write-out ------------------------------------------------------------

#ifdef __AVX512F__
// 16 rows of 16 floats (a[j] = row j) transposed in registers: out[c * ld + j] = a[j][c].
inline void transpose16(const __m512 (&a)[16], float* out, i64 ld) {
  __m512 t[16], u[16];
  // Pairs of rows interleaved: per 128-bit lane, unpacklo = r0 r1 of columns 0, 1; unpackhi of
  // 2, 3.
  for (int j = 0; j < 16; j += 2) {
    t[j] = _mm512_unpacklo_ps(a[j], a[j + 1]);
    t[j + 1] = _mm512_unpackhi_ps(a[j], a[j + 1]);
  }
  // u[4i + c], lane L: rows 4i..4i+3 of column 4L + c.
  for (int i = 0; i < 16; i += 4) {
    u[i + 0] = _mm512_shuffle_ps(t[i + 0], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm512_shuffle_ps(t[i + 0], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // Column 4L + c gathers lane L of u[c], u[4 + c], u[8 + c], u[12 + c].
  for (int c = 0; c < 4; ++c) {
    const __m512 s1 = _mm512_shuffle_f32x4(u[c], u[4 + c], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 s2 = _mm512_shuffle_f32x4(u[c], u[4 + c], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512 s3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 s4 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(3, 2, 3, 2));
    _mm512_storeu_ps(out + (0 + c) * ld, _mm512_shuffle_f32x4(s1, s3, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm512_storeu_ps(out + (4 + c) * ld, _mm512_shuffle_f32x4(s1, s3, _MM_SHUFFLE(3, 1, 3, 1)));
    _mm512_storeu_ps(out + (8 + c) * ld, _mm512_shuffle_f32x4(s2, s4, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm512_storeu_ps(out + (12 + c) * ld, _mm512_shuffle_f32x4(s2, s4, _MM_SHUFFLE(3, 1, 3, 1)));
  }
}
#endif

void transpose_rows_f32(const float* const* rows, i64 m, i64 depth, float* out, i64 ldout) {
  i64 d0 = 0;
#ifdef __AVX512F__
  if (m == 16)
    for (; d0 + 16 <= depth; d0 += 16) {
      __m512 a[16];
      for (int j = 0; j < 16; ++j) a[j] = _mm512_loadu_ps(rows[j] + d0);
      transpose16(a, out + d0 * ldout, ldout);
    }
#endif
  for (i64 d = d0; d < depth; ++d)
    for (i64 j = 0; j < m; ++j) out[d * ldout + j] = rows[j][d];
}

void scale_f32(const float* x, float s, float* y, i64 n) {
  const vf sv = splat(s);
  i64 i = 0;
  for (; i + W <= n; i += W) store(y + i, load(x + i) * sv);
  for (; i < n; ++i) y[i] = x[i] * s;
}

// ---- the backward: P recomputed from the lse, and dS = P (dP - D) -------------------------

void backward_probs(float* s, float* dp, i64 ld, i64 keys, i64 cols, const float* lse,
                    const float* delta) {
  for (i64 k = 0; k < keys; ++k) {
    float* s_row = s + k * ld;
    float* dp_row = dp + k * ld;
    for (i64 c0 = 0; c0 < cols; c0 += W) {
      const vf p = exp_v(load(s_row + c0) - load(lse + c0));
      store(s_row + c0, p);
      store(dp_row + c0, p * (load(dp_row + c0) - load(delta + c0)));
    }
  }
}

#ifdef HC_WITH_BF16
// ---- bf16 inputs: vdpbf16ps, 2 products per fp32 lane per instruction ---------------------

inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }

template <int R, int NV>
void score_block_bf16(const std::uint32_t* q, i64 ldq, const std::uint32_t* kt, i64 ldk, i64 pairs,
                      float* s, i64 lds, float scale) {
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_setzero_ps();
  for (i64 p = 0; p < pairs; ++p) {
    __m512bh k[NV];
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) k[j] = as_bh(_mm512_loadu_si512(kt + p * ldk + j * 16));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512bh qb = as_bh(_mm512_set1_epi32(static_cast<int>(q[r * ldq + p])));
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], k[j], qb);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j)
      _mm512_storeu_ps(s + r * lds + j * 16, _mm512_mul_ps(acc[r][j], sc));
}

using ScoreBlockBf16 = decltype(&score_block_bf16<1, 1>);
template <int NV, int... R>
constexpr std::array<ScoreBlockBf16, sizeof...(R)> score_rows_bf16(
    std::integer_sequence<int, R...>) {
  return {&score_block_bf16<R + 1, NV>...};
}
template <int... V>
constexpr auto score_table_bf16(std::integer_sequence<int, V...>) {
  return std::array<std::array<ScoreBlockBf16, kRows>, sizeof...(V)>{
      score_rows_bf16<V + 1>(std::make_integer_sequence<int, kRows>{})...};
}
constexpr auto kScoreBlocksBf16 = score_table_bf16(std::make_integer_sequence<int, kVecs>{});

void scores_bf16(const std::uint32_t* q, i64 ldq, const std::uint32_t* kt, i64 ldk, i64 pairs,
                 float* s, i64 lds, i64 rows, i64 cols, float scale) {
  for (i64 c0 = 0; c0 < cols; c0 += kVecs * W) {
    const int nv = static_cast<int>(std::min<i64>(kVecs, (cols - c0) / W));
    for (i64 r0 = 0; r0 < rows; r0 += rows_for(nv)) {
      const int nr = static_cast<int>(std::min<i64>(rows_for(nv), rows - r0));
      kScoreBlocksBf16[nv - 1][nr - 1](q + r0 * ldq, ldq, kt + c0, ldk, pairs, s + r0 * lds + c0,
                                       lds, scale);
    }
  }
}

template <int R, int NV>
void sum_block_bf16(const std::uint32_t* p, i64 p_row, i64 p_key, const std::uint32_t* v, i64 ldv,
                    i64 pairs, float* acc, i64 ldacc, const float* alpha) {
  __m512 a[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const __m512 al = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j)
      a[r][j] = _mm512_mul_ps(_mm512_loadu_ps(acc + r * ldacc + j * 16), al);
  }
  for (i64 c = 0; c < pairs; ++c) {
    __m512bh vv[NV];
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) vv[j] = as_bh(_mm512_loadu_si512(v + c * ldv + j * 16));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512bh pb = as_bh(_mm512_set1_epi32(static_cast<int>(p[r * p_row + c * p_key])));
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) a[r][j] = _mm512_dpbf16_ps(a[r][j], vv[j], pb);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) _mm512_storeu_ps(acc + r * ldacc + j * 16, a[r][j]);
}

using SumBlockBf16 = decltype(&sum_block_bf16<1, 1>);
template <int NV, int... R>
constexpr std::array<SumBlockBf16, sizeof...(R)> sum_rows_bf16(std::integer_sequence<int, R...>) {
  return {&sum_block_bf16<R + 1, NV>...};
}
template <int... V>
constexpr auto sum_table_bf16(std::integer_sequence<int, V...>) {
  return std::array<std::array<SumBlockBf16, kRows>, sizeof...(V)>{
      sum_rows_bf16<V + 1>(std::make_integer_sequence<int, kRows>{})...};
}
constexpr auto kSumBlocksBf16 = sum_table_bf16(std::make_integer_sequence<int, kVecs>{});

void weighted_sum_bf16(const std::uint32_t* p, i64 p_row, i64 p_key, const std::uint32_t* v,
                       i64 ldv, i64 pairs, float* acc, i64 ldacc, i64 rows, i64 width,
                       const float* alpha) {
  const int nv_max = static_cast<int>(std::min<i64>(kVecs, width / W));
  for (i64 r0 = 0; r0 < rows; r0 += rows_for(nv_max)) {
    const int nr = static_cast<int>(std::min<i64>(rows_for(nv_max), rows - r0));
    for (i64 e0 = 0; e0 < width; e0 += kVecs * W) {
      const int nv = static_cast<int>(std::min<i64>(kVecs, (width - e0) / W));
      kSumBlocksBf16[nv - 1][nr - 1](p + r0 * p_row, p_row, p_key, v + e0, ldv, pairs,
                                     acc + r0 * ldacc + e0, ldacc, alpha + r0);
    }
  }
}

// Lane order [a0 b0 a1 b1 ... a15 b15] from [a0 .. a15 b0 .. b15] (16-bit elements).
inline __m512i interleave_halves(__m512i ab) {
  const __m512i index = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(index, ab);
}

void pair_rows_f32(const float* x, i64 ldx, i64 keys, i64 cols, std::uint32_t* out, i64 ldout) {
  for (i64 k = 0; k < keys; k += 2) {
    const float* a = x + k * ldx;
    const float* b = k + 1 < keys ? x + (k + 1) * ldx : nullptr;
    std::uint32_t* dst = out + (k / 2) * ldout;
    for (i64 c = 0; c < cols; c += 16) {
      const __m512 va = _mm512_loadu_ps(a + c);
      const __m512 vb = b ? _mm512_loadu_ps(b + c) : _mm512_setzero_ps();
      const __m512bh ab = _mm512_cvtne2ps_pbh(vb, va);  // low half from va, high from vb
      _mm512_storeu_si512(dst + c, interleave_halves((__m512i)ab));
    }
  }
}

void pair_rows_bf16(const std::uint16_t* x, i64 ldx, i64 keys, i64 cols, std::uint32_t* out,
                    i64 ldout) {
  for (i64 k = 0; k < keys; k += 2) {
    const std::uint16_t* a = x + k * ldx;
    const std::uint16_t* b = k + 1 < keys ? x + (k + 1) * ldx : nullptr;
    std::uint32_t* dst = out + (k / 2) * ldout;
    for (i64 c = 0; c < cols; c += 16) {
      const __m256i va = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + c));
      const __m256i vb =
          b ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + c)) : _mm256_setzero_si256();
      const __m512i ab = _mm512_inserti64x4(_mm512_zextsi256_si512(va), vb, 1);
      _mm512_storeu_si512(dst + c, interleave_halves(ab));
    }
  }
}
#endif  // HC_WITH_BF16

}  // namespace

const TileKernels& table() {
  static const TileKernels kernels = [] {
    TileKernels k;
    k.isa = HC_ISA;
    k.vector_floats = W;
    k.scores_f32 = &scores_f32;
    k.weighted_sum_f32 = &weighted_sum_f32;
    k.softmax_columns = &softmax_columns;
    k.mask_columns = &mask_columns;
    k.any_non_finite_f32 = &any_non_finite_f32;
    k.transpose_rows_f32 = &transpose_rows_f32;
    k.scale_f32 = &scale_f32;
    k.backward_probs = &backward_probs;
#ifdef HC_WITH_BF16
    k.scores_bf16 = &scores_bf16;
    k.weighted_sum_bf16 = &weighted_sum_bf16;
    k.pair_rows_f32 = &pair_rows_f32;
    k.pair_rows_bf16 = &pair_rows_bf16;
#endif
    return k;
  }();
  return kernels;
}

void exp_array(const float* x, float* y, std::int64_t n) {
  for (i64 i = 0; i < n; i += W) store(y + i, exp_v(load(x + i)));
}

void exp2_array(const float* x, float* y, std::int64_t n) {
  for (i64 i = 0; i < n; i += W) store(y + i, exp2_v(load(x + i)));
}

}  // namespace headcount::simd::HC_ISA_NS
