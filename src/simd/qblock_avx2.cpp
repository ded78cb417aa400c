// The block-quantized GEMM's kernel on AVX2 and F16C (compile flags: CMakeLists.txt): qblock.h's
// operations, 8 output rows to a vector (half a group of 16), for H halves and R rows of x at
// once. AVX2 has no vpdpbusd; a block's integer sums are built from vpmaddubsw (u8 × s8, pairs
// added into int16 with signed saturation) and vpmaddwd by ones (int16 pairs into int32). Every
// step below is proved free of saturation and overflow, so each sum is the exact integer the
// scalar kernel forms, and the float steps after it are the scalar kernel's, in its order.
//
// Q4_1: the nibbles q are in [0, 15] and qx in [-127, 127] (quantize_blocks clamps it), so one
//   vpmaddubsw lane is at most 2 · 15 · 127 = 3810 in magnitude; a block is 4 chunks of low and
//   4 of high nibbles, 8 vpmaddubsw results added per int16 lane: at most 8 · 3810 = 30480 <
//   32767, exact in int16 (vpaddw wraps, but never reaches the wrap). One vpmaddwd by ones then
//   gives the row's block sum (two lanes, |sum| <= 60960) in int32.
// Q8_0: the packed bytes are u = q + 128 with q in [-127, 127], u in [1, 255]. vpmaddubsw on u
//   would saturate: 255 · 127 + 255 · 127 = 64770 > 32767 (u = 255, qx = 127 in both of a pair).
//   So the kernel works on the signed q = u XOR 0x80 (= u - 128 as int8, exact since u >= 1):
//   |q| = vpabsb(q) is in [0, 127] (no -128 to overflow), qx' = vpsignb(qx, q) is qx · sign(q)
//   (0 where q = 0; -qx fits int8 because qx >= -127), and |q| · qx' = q · qx. A vpmaddubsw lane
//   is then at most 127 · 127 + 127 · 127 = 32258 <= 32767: never saturated. Two such lanes
//   could overflow int16 when added, so each chunk goes straight to int32 by vpmaddwd, where the
//   block's sum is at most 32 · 127 · 127 = 516128. That sum is Σ q_i · qx_i, and the scalar
//   kernel's Σ u_i · qx_i − 128 · S equals it as an integer (u_i = q_i + 128, S = Σ qx_i; both
//   sides below 2^24 in magnitude, so float() of either is the same float).
#include <immintrin.h>

#include <cstring>

#include "simd/qblock.h"

namespace headcount::simd::avx2 {

namespace {

using i64 = std::int64_t;

inline __m256i broadcast4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Eight fp16 scales widened exactly (vcvtph2ps, F16C: every AVX2 CPU has it, and the dispatch
// checks it; the VNNI kernel and the scalar half_to_float give the same values).
inline __m256 halves_to_floats(const std::uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// H halves of 8 output rows (from half `first_half` of the panel, a group being two halves)
// times R rows of x (from row r0).
template <QBlockFormat F, int H, int R>
void tile(const QuantizedRows& x, i64 r0, const std::uint8_t* panel, int first_half,
          const float* bias, float* y, i64 ldy, i64 cols) {
  constexpr i64 block_bytes = qblock_bytes(F);
  constexpr i64 scales = F == QBlockFormat::q4_1 ? 256 : 512;
  const i64 blocks = x.k / kQBlock;
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[H][R];
  for (int h = 0; h < H; ++h)
    for (int r = 0; r < R; ++r) acc[h][r] = _mm256_setzero_ps();
  // Half h: its group's byte stream, and the offset of its 8 rows inside each 64-byte chunk
  // (and of its 8 scales inside the group's 16).
  const std::uint8_t* stream[H];
  i64 lane_offset[H];
  for (int h = 0; h < H; ++h) {
    const int half = first_half + h;
    stream[h] = panel + (half / 2) * blocks * block_bytes;
    lane_offset[h] = (half % 2) * 32;
  }
  for (i64 b = 0; b < blocks; ++b) {
    const std::int8_t* xb[R];
    for (int r = 0; r < R; ++r) xb[r] = x.q + (r0 + r) * x.k + b * kQBlock;
    __m256i isum[H][R];
    if constexpr (F == QBlockFormat::q4_1) {
      // int16 lanes, 8 products of pairs each (bound above), widened once at the block's end.
      __m256i sum16[H][R];
      for (int h = 0; h < H; ++h)
        for (int r = 0; r < R; ++r) sum16[h][r] = _mm256_setzero_si256();
      for (int t = 0; t < 4; ++t) {
        __m256i xlo[R], xhi[R];
        for (int r = 0; r < R; ++r) {
          xlo[r] = broadcast4(xb[r] + 4 * t);
          xhi[r] = broadcast4(xb[r] + 16 + 4 * t);
        }
        for (int h = 0; h < H; ++h) {
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
              stream[h] + b * block_bytes + t * 64 + lane_offset[h]));
          const __m256i lo = _mm256_and_si256(w, low_nibbles);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low_nibbles);
          for (int r = 0; r < R; ++r) {
            sum16[h][r] = _mm256_add_epi16(sum16[h][r], _mm256_maddubs_epi16(lo, xlo[r]));
            sum16[h][r] = _mm256_add_epi16(sum16[h][r], _mm256_maddubs_epi16(hi, xhi[r]));
          }
        }
      }
      for (int h = 0; h < H; ++h)
        for (int r = 0; r < R; ++r) isum[h][r] = _mm256_madd_epi16(sum16[h][r], ones);
    } else {
      for (int h = 0; h < H; ++h)
        for (int r = 0; r < R; ++r) isum[h][r] = _mm256_setzero_si256();
      for (int t = 0; t < 8; ++t) {
        __m256i xt[R];
        for (int r = 0; r < R; ++r) xt[r] = broadcast4(xb[r] + 4 * t);
        for (int h = 0; h < H; ++h) {
          const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
              stream[h] + b * block_bytes + t * 64 + lane_offset[h]));
          const __m256i q = _mm256_xor_si256(u, offset);
          const __m256i magnitude = _mm256_abs_epi8(q);
          for (int r = 0; r < R; ++r) {
            const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(xt[r], q));
            isum[h][r] = _mm256_add_epi32(isum[h][r], _mm256_madd_epi16(pairs, ones));
          }
        }
      }
    }
    for (int h = 0; h < H; ++h) {
      const std::uint8_t* block = stream[h] + b * block_bytes;
      const __m256 d = halves_to_floats(block + scales + lane_offset[h] / 2);
      for (int r = 0; r < R; ++r) {
        const i64 bx = (r0 + r) * blocks + b;
        acc[h][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h][r]),
                                    _mm256_mul_ps(d, _mm256_set1_ps(x.dx[bx])), acc[h][r]);
      }
      if constexpr (F == QBlockFormat::q4_1) {
        const __m256 m = halves_to_floats(block + 288 + lane_offset[h] / 2);
        for (int r = 0; r < R; ++r)
          acc[h][r] = _mm256_fmadd_ps(m, _mm256_set1_ps(x.sx[(r0 + r) * blocks + b]), acc[h][r]);
      }
    }
  }
  for (int h = 0; h < H; ++h) {
    const i64 c0 = (first_half + h) * 8;
    if (c0 >= cols) break;
    const i64 lanes = cols - c0 < 8 ? cols - c0 : 8;
    // Lane i is stored when i < lanes (maskstore reads each lane's top bit).
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 b = bias == nullptr ? _mm256_setzero_ps() : _mm256_maskload_ps(bias + c0, mask);
    for (int r = 0; r < R; ++r) {
      const __m256 v = bias == nullptr ? acc[h][r] : _mm256_add_ps(acc[h][r], b);
      _mm256_maskstore_ps(y + (r0 + r) * ldy + c0, mask, v);
    }
  }
}

template <QBlockFormat F>
void panel_format(const QuantizedRows& x, i64 rows, const std::uint8_t* panel, const float* bias,
                  float* y, i64 ldy, i64 cols) {
  const int halves = static_cast<int>((cols + 7) / 8);
  if (rows == 1) {
    // Batch 1 (decoding): four halves (two groups) at once, independent chains for the
    // integer units.
    int h = 0;
    for (; h + 4 <= halves; h += 4) tile<F, 4, 1>(x, 0, panel, h, bias, y, ldy, cols);
    for (; h < halves; ++h) tile<F, 1, 1>(x, 0, panel, h, bias, y, ldy, cols);
    return;
  }
  // Several rows: two halves (one group) times two rows, each weight chunk expanded once for
  // both rows; 16 ymm registers hold the accumulators, sums and operands without spilling.
  for (int h = 0; h < halves; h += 2) {
    i64 r = 0;
    if (h + 2 <= halves) {
      for (; r + 2 <= rows; r += 2) tile<F, 2, 2>(x, r, panel, h, bias, y, ldy, cols);
      for (; r < rows; ++r) tile<F, 2, 1>(x, r, panel, h, bias, y, ldy, cols);
    } else {
      for (; r + 2 <= rows; r += 2) tile<F, 1, 2>(x, r, panel, h, bias, y, ldy, cols);
      for (; r < rows; ++r) tile<F, 1, 1>(x, r, panel, h, bias, y, ldy, cols);
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
  static const QBlockKernels kernels{.isa = Isa::avx2, .panel = &panel};
  return kernels;
}

}  // namespace headcount::simd::avx2
