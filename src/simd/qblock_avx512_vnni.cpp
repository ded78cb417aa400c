// The block-quantized GEMM's kernel on vpdpbusd (AVX512_VNNI; compile flags: CMakeLists.txt):
// qblock.h's operations, 16 output rows to a vector, for G groups of rows and R rows of x at
// once. Each (group, row) pair sums its block in C independent int32 chains (vpdpbusd has a
// latency of several cycles: at batch 1 one chain per group would leave the unit idle), added
// at the block's end: integer sums, exact in any order, so the bits are the scalar kernel's.
#include <immintrin.h>

#include <cstring>

#include "simd/qblock.h"

namespace headcount::simd::avx512_vnni {

namespace {

using i64 = std::int64_t;

inline __m512i broadcast4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// G groups (of the panel, from `first_group`) times R rows of x (from row r0), C chains.
template <QBlockFormat F, int G, int R, int C>
void tile(const QuantizedRows& x, i64 r0, const std::uint8_t* panel, int first_group,
          const float* bias, float* y, i64 ldy, i64 cols) {
  constexpr i64 block_bytes = qblock_bytes(F);
  const i64 blocks = x.k / kQBlock;
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  __m512 acc[G][R];
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) acc[g][r] = _mm512_setzero_ps();
  const std::uint8_t* stream[G];
  for (int g = 0; g < G; ++g) stream[g] = panel + (first_group + g) * blocks * block_bytes;
  for (i64 b = 0; b < blocks; ++b) {
    __m512i isum[G][R][C];
    for (int g = 0; g < G; ++g)
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) isum[g][r][c] = _mm512_setzero_si512();
    const std::int8_t* xb[R];
    for (int r = 0; r < R; ++r) xb[r] = x.q + (r0 + r) * x.k + b * kQBlock;
    if constexpr (F == QBlockFormat::q4_1) {
      for (int t = 0; t < 4; ++t)
        for (int g = 0; g < G; ++g) {
          const __m512i w = _mm512_loadu_si512(stream[g] + b * block_bytes + t * 64);
          const __m512i lo = _mm512_and_si512(w, low_nibbles);
          const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), low_nibbles);
          for (int r = 0; r < R; ++r) {
            isum[g][r][0] = _mm512_dpbusd_epi32(isum[g][r][0], lo, broadcast4(xb[r] + 4 * t));
            isum[g][r][C - 1] =
                _mm512_dpbusd_epi32(isum[g][r][C - 1], hi, broadcast4(xb[r] + 16 + 4 * t));
          }
        }
    } else {
      for (int t = 0; t < 8; ++t)
        for (int g = 0; g < G; ++g) {
          const __m512i w = _mm512_loadu_si512(stream[g] + b * block_bytes + t * 64);
          for (int r = 0; r < R; ++r)
            isum[g][r][t % C] =
                _mm512_dpbusd_epi32(isum[g][r][t % C], w, broadcast4(xb[r] + 4 * t));
        }
    }
    for (int g = 0; g < G; ++g) {
      const std::uint8_t* block = stream[g] + b * block_bytes;
      const i64 scales = F == QBlockFormat::q4_1 ? 256 : 512;
      const __m512 d =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + scales)));
      for (int r = 0; r < R; ++r) {
        const i64 bx = (r0 + r) * blocks + b;
        __m512i s = isum[g][r][0];
        if constexpr (C == 2) s = _mm512_add_epi32(s, isum[g][r][1]);
        if constexpr (F == QBlockFormat::q8_0)
          s = _mm512_sub_epi32(s, _mm512_set1_epi32(128 * x.sum[bx]));
        acc[g][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
                                    _mm512_mul_ps(d, _mm512_set1_ps(x.dx[bx])), acc[g][r]);
      }
      if constexpr (F == QBlockFormat::q4_1) {
        const __m512 m =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 288)));
        for (int r = 0; r < R; ++r)
          acc[g][r] = _mm512_fmadd_ps(m, _mm512_set1_ps(x.sx[(r0 + r) * blocks + b]), acc[g][r]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    const i64 c0 = (first_group + g) * kQGroupRows;
    if (c0 >= cols) break;
    const i64 lanes = cols - c0 < kQGroupRows ? cols - c0 : kQGroupRows;
    const __mmask16 mask = static_cast<__mmask16>((1u << lanes) - 1);
    const __m512 b = bias == nullptr ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, bias + c0);
    for (int r = 0; r < R; ++r) {
      const __m512 v = bias == nullptr ? acc[g][r] : _mm512_add_ps(acc[g][r], b);
      _mm512_mask_storeu_ps(y + (r0 + r) * ldy + c0, mask, v);
    }
  }
}

template <QBlockFormat F>
void panel_format(const QuantizedRows& x, i64 rows, const std::uint8_t* panel, const float* bias,
                  float* y, i64 ldy, i64 cols) {
  const int groups = static_cast<int>((cols + kQGroupRows - 1) / kQGroupRows);
  if (rows == 1) {
    // Batch 1 (decoding): all the panel's groups at once, two chains each.
    int g = 0;
    for (; g + 4 <= groups; g += 4) tile<F, 4, 1, 2>(x, 0, panel, g, bias, y, ldy, cols);
    for (; g < groups; ++g) tile<F, 1, 1, 2>(x, 0, panel, g, bias, y, ldy, cols);
    return;
  }
  // Several rows: two groups times four rows, the weights expanded once for four rows.
  for (int g = 0; g < groups; g += 2) {
    i64 r = 0;
    if (g + 2 <= groups) {
      for (; r + 4 <= rows; r += 4) tile<F, 2, 4, 1>(x, r, panel, g, bias, y, ldy, cols);
      for (; r < rows; ++r) tile<F, 2, 1, 2>(x, r, panel, g, bias, y, ldy, cols);
    } else {
      for (; r + 4 <= rows; r += 4) tile<F, 1, 4, 1>(x, r, panel, g, bias, y, ldy, cols);
      for (; r < rows; ++r) tile<F, 1, 1, 2>(x, r, panel, g, bias, y, ldy, cols);
    }
  }
}

void panel(QBlockFormat format, const QuantizedRows& x, i64 rows, const std::uint8_t* packed,
           const float* bias, float* y, i64 ldy, i64 cols) {
  if (format == QBlockFormat::q4_1)
    panel_format<QBlockFormat::q4_1>(x, rows, packed, bias, y, ldy, cols);
  else
    panel_format<QBlockFormat::q8_0>(x, rows, packed, bias, y, ldy, cols);
}

}  // namespace

const QBlockKernels& qblock_table() {
  static const QBlockKernels kernels{.isa = Isa::avx512, .panel = &panel};
  return kernels;
}

}  // namespace headcount::simd::avx512_vnni
