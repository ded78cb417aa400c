// AMX-BF16 tiles (see amx.h). Compiled with -mamx-tile -mamx-bf16 and AVX-512 flags.
//
// Tile registers: the two products use a 2 x 2 block of accumulator tiles (0-3) fed by two
// A tiles (4, 5) and two B tiles (6, 7), so each tile loaded feeds two multiplications;
// edges fall back to 1 x 1 blocks. Every tile is 16 rows x 64 bytes.
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <limits>

#include "simd/amx.h"
#include "simd/amx_tiles.h"

#define HC_ISA_NS amx_bf16
#define HC_VEC_FLOATS 16
#include "simd/vec_math.h"

namespace headcount::simd::amx {
namespace {

using i64 = std::int64_t;

// CPUID leaf 7's EDX: bit 22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8.
unsigned leaf7_edx() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return 0;
  return edx;
}

bool request_permission() {
  const unsigned edx = leaf7_edx();
  const bool amx_bf16 = edx & (1u << 22), amx_tile = edx & (1u << 24);
  if (!amx_bf16 || !amx_tile) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// C[r0.., c0..] (+)= A · B over `steps` steps of 32 along the shared dimension, for a block of
// NR x NC tiles (1 or 2 each). a(r, k) and b(k, c) give the tile addresses; strides in bytes.
template <int NR, int NC, typename AddrA, typename AddrB, typename AddrC>
void block(i64 steps, AddrA a, i64 a_stride, AddrB b, i64 b_stride, AddrC c, i64 c_stride,
           bool accumulate) {
  if (accumulate) {
    _tile_loadd(0, c(0, 0), c_stride);
    if constexpr (NC == 2) _tile_loadd(1, c(0, 1), c_stride);
    if constexpr (NR == 2) _tile_loadd(2, c(1, 0), c_stride);
    if constexpr (NR == 2 && NC == 2) _tile_loadd(3, c(1, 1), c_stride);
  } else {
    _tile_zero(0);
    if constexpr (NC == 2) _tile_zero(1);
    if constexpr (NR == 2) _tile_zero(2);
    if constexpr (NR == 2 && NC == 2) _tile_zero(3);
  }
  for (i64 k = 0; k < steps; ++k) {
    _tile_loadd(4, a(0, k), a_stride);
    _tile_loadd(6, b(k, 0), b_stride);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NC == 2) {
      _tile_loadd(7, b(k, 1), b_stride);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (NR == 2) {
      _tile_loadd(5, a(1, k), a_stride);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (NC == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c(0, 0), c_stride);
  if constexpr (NC == 2) _tile_stored(1, c(0, 1), c_stride);
  if constexpr (NR == 2) _tile_stored(2, c(1, 0), c_stride);
  if constexpr (NR == 2 && NC == 2) _tile_stored(3, c(1, 1), c_stride);
}

// Runs `block` over a rows x cols grid of 16 x 16 output tiles, 2 x 2 where it can.
template <typename AddrA, typename AddrB, typename AddrC>
void grid(i64 row_tiles, i64 col_tiles, i64 steps, AddrA a, i64 a_stride, AddrB b, i64 b_stride,
          AddrC c, i64 c_stride, bool accumulate) {
  for (i64 r = 0; r < row_tiles; r += 2) {
    for (i64 cc = 0; cc < col_tiles; cc += 2) {
      auto ra = [&](int i, i64 k) { return a(r + i, k); };
      auto rb = [&](i64 k, int j) { return b(k, cc + j); };
      auto rc = [&](int i, int j) { return c(r + i, cc + j); };
      const bool two_rows = r + 1 < row_tiles, two_cols = cc + 1 < col_tiles;
      if (two_rows && two_cols)
        block<2, 2>(steps, ra, a_stride, rb, b_stride, rc, c_stride, accumulate);
      else if (two_rows)
        block<2, 1>(steps, ra, a_stride, rb, b_stride, rc, c_stride, accumulate);
      else if (two_cols)
        block<1, 2>(steps, ra, a_stride, rb, b_stride, rc, c_stride, accumulate);
      else
        block<1, 1>(steps, ra, a_stride, rb, b_stride, rc, c_stride, accumulate);
    }
  }
}

}  // namespace

bool available() {
  static const bool ok = request_permission();
  return ok;
}

bool int8_available() {
  static const bool ok = available() && (leaf7_edx() & (1u << 25)) != 0;
  return ok;
}

void scores(const std::uint16_t* q, i64 ldq, const std::uint32_t* kt, i64 ldk, i64 depth, float* s,
            i64 lds, i64 rows, i64 keys) {
  configure_tiles();
  // A tile: 16 query rows x 32 bf16 of depth; B tile: 16 pairs of depth x 16 keys.
  grid(
      rows / 16, keys / 16, depth / 32, [&](i64 r, i64 k) { return q + r * 16 * ldq + k * 32; },
      ldq * 2, [&](i64 k, i64 c) { return kt + k * 16 * ldk + c * 16; }, ldk * 4,
      [&](i64 r, i64 c) { return s + r * 16 * lds + c * 16; }, lds * 4, false);
  _tile_release();
}

void weighted_sum(const std::uint16_t* p, i64 ldp, const std::uint32_t* v, i64 ldv, i64 keys,
                  float* acc, i64 ldacc, i64 rows, i64 width) {
  configure_tiles();
  // A tile: 16 rows x 32 keys of P; B tile: 16 pairs of keys x 16 columns of V.
  grid(
      rows / 16, width / 16, keys / 32, [&](i64 r, i64 k) { return p + r * 16 * ldp + k * 32; },
      ldp * 2, [&](i64 k, i64 c) { return v + k * 16 * ldv + c * 16; }, ldv * 4,
      [&](i64 r, i64 c) { return acc + r * 16 * ldacc + c * 16; }, ldacc * 4, true);
  _tile_release();
}

void softmax_rows(const float* s, i64 lds, i64 rows, i64 cols, float scale, const std::int32_t* lo,
                  const std::int32_t* hi, float* max, float* sum, std::uint16_t* p, i64 ldp,
                  float* acc, i64 ldacc, i64 width) {
  using amx_bf16::vec::exp_v;
  using amx_bf16::vec::vf;
  const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 sc = _mm512_set1_ps(scale);
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  for (i64 r = 0; r < rows; ++r) {
    const float* row = s + r * lds;
    const __m512i row_lo = _mm512_set1_epi32(lo[r]), row_hi = _mm512_set1_epi32(hi[r]);
    auto scaled = [&](i64 c) {  // scale · s, -inf outside [lo, hi)
      const __m512i index = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(c)));
      const __mmask16 in =
          _mm512_cmpge_epi32_mask(index, row_lo) & _mm512_cmplt_epi32_mask(index, row_hi);
      return _mm512_mask_mul_ps(minus_inf, in, _mm512_loadu_ps(row + c), sc);
    };
    __m512 m = minus_inf;
    for (i64 c = 0; c < cols; c += 16) m = _mm512_max_ps(m, scaled(c));
    const float block_max = _mm512_reduce_max_ps(m);
    const float m_new = block_max > max[r] ? block_max : max[r];
    std::uint16_t* p_row = p + r * ldp;
    if (m_new == -std::numeric_limits<float>::infinity()) {  // nothing visible yet
      std::memset(p_row, 0, static_cast<std::size_t>(cols) * 2);
      continue;
    }
    const float alpha = m_new == max[r] ? 1.0f : exp_v((vf)_mm512_set1_ps(max[r] - m_new))[0];
    const __m512 shift = _mm512_set1_ps(m_new);
    __m512 total = _mm512_setzero_ps();
    for (i64 c = 0; c < cols; c += 16) {
      const __m512 e = (__m512)exp_v((vf)_mm512_sub_ps(scaled(c), shift));
      total = _mm512_add_ps(total, e);
      const __m256bh h = _mm512_cvtneps_pbh(e);
      std::memcpy(p_row + c, &h, sizeof h);
    }
    sum[r] = alpha * sum[r] + _mm512_reduce_add_ps(total);
    max[r] = m_new;
    if (alpha != 1.0f) {
      const __m512 a = _mm512_set1_ps(alpha);
      float* acc_row = acc + r * ldacc;
      for (i64 e = 0; e < width; e += 16)
        _mm512_storeu_ps(acc_row + e, _mm512_mul_ps(_mm512_loadu_ps(acc_row + e), a));
    }
  }
}

}  // namespace headcount::simd::amx
