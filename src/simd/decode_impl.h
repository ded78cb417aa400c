// The decode micro-kernel (simd/decode.h), written once with GCC/Clang vector extensions and
// compiled once per instruction set: decode_<isa>.cpp define the macros below and include
// this file with their own -m flags. Nothing here names an instruction.
//
//   HC_ISA_NS       namespace of this copy (each copy is a different ISA: no ODR clash)
//   HC_ISA          the Isa enumerator
//   HC_VEC_FLOATS   floats per vector register (W)
//
// Per block of 16 keys of one (sequence, kv head):
//   1. K block: f32 rows are read in place; bf16 rows widen (a shift) and int8 rows convert
//      to fp32 once into an L1 buffer, whatever the number of query rows that use them.
//      int8 scales are not applied to K: s_j = (scale * k_scale[j]) * (q . k_int8_j), one
//      multiply per score instead of one per element (the same value in exact arithmetic).
//   2. V block: likewise; the int8 V scale is folded into the weight: p_j * v_scale[j].
//   3. per query row: 16 scores (dots along head_dim, W keys at a time, reduced by the
//      transposing shuffle tree), masked past the row's last visible key; the online softmax
//      step (m, l, alpha = exp(m_old - m_new)); acc = alpha * acc + P . V, with acc held in
//      registers for up to 8 vectors of width at a time.
// Traffic: each K and V row is read from memory once per call, for all rows of the group.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "simd/decode.h"
#include "simd/vec_math.h"
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace headcount::simd::HC_ISA_NS {
namespace {

constexpr int W = HC_VEC_FLOATS;
constexpr int KB = static_cast<int>(kDecodeKeyBlock);
constexpr int kGroups = KB / W;  // vectors of scores per key block
constexpr int kStripVecs = 8;    // accumulator vectors per strip of the weighted sum
static_assert(KB % W == 0, "the key block must be a whole number of vectors");
using i64 = std::int64_t;
using vec::exp_v;
using vec::load;
using vec::splat;
using vec::store;
using vec::vf;
using vec::vi;
typedef std::uint16_t vh __attribute__((vector_size(W * 2)));
typedef std::uint32_t vu __attribute__((vector_size(W * 4)));
typedef std::int8_t vb __attribute__((vector_size(W)));

template <typename V, typename T>
inline V load_as(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline vi splat_i(std::int32_t x) { return vec::splat_impl<vi>(x, std::make_index_sequence<W>{}); }
template <std::size_t... I>
constexpr vi iota_impl(std::index_sequence<I...>) {
  return vi{static_cast<std::int32_t>(I)...};
}
inline vi iota() { return iota_impl(std::make_index_sequence<W>{}); }

inline float exp_s(float x) { return exp_v(splat(x))[0]; }

// ---- horizontal reductions ------------------------------------------------------------------

// Lane l of a two-input shuffle (indices >= W pick from the second input) for one level of
// the transposing tree with half-block S: within each block of 2S lanes the first half sums
// the first input's lanes o and o+S, the second half the second input's.
constexpr std::int32_t tree_lane(int s, bool hi, int l) {
  const int base = l / (2 * s) * (2 * s), o = l % (2 * s);
  if (o < s) return hi ? base + o + s : base + o;
  return hi ? W + base + o : W + base + o - s;
}
template <int S, bool Hi, std::size_t... L>
constexpr vi tree_mask(std::index_sequence<L...>) {
  return vi{tree_lane(S, Hi, static_cast<int>(L))...};
}
// clang (the fuzz and TSan builds) has no __builtin_shuffle; its __builtin_shufflevector takes
// the same lanes as constant arguments.
template <int S, bool Hi, std::size_t... L>
inline vf tree_shuffle(vf a, vf b, std::index_sequence<L...> lanes) {
#if defined(__clang__)
  (void)lanes;
  return __builtin_shufflevector(a, b, tree_lane(S, Hi, static_cast<int>(L))...);
#else
  constexpr vi mask = tree_mask<S, Hi>(std::index_sequence<L...>{});
  (void)lanes;
  return __builtin_shuffle(a, b, mask);
#endif
}
template <int S>
inline void tree_level(vf* v, int n) {
  constexpr auto lanes = std::make_index_sequence<W>{};
#pragma GCC unroll 16
  for (int i = 0; i < n / 2; ++i)
    v[i] = tree_shuffle<S, false>(v[2 * i], v[2 * i + 1], lanes) +
           tree_shuffle<S, true>(v[2 * i], v[2 * i + 1], lanes);
  if constexpr (S > 1) tree_level<S / 2>(v, n / 2);
}
constexpr int bit_reverse(int x) {
  int r = 0;
  for (int b = 1; b < W; b <<= 1, x >>= 1) r = (r << 1) | (x & 1);
  return r;
}
// Lane j of the result = sum of the lanes of a[j]. The tree leaves input k in lane
// bit_reverse(k), so the inputs go in bit-reversed order.
inline vf transpose_sum(const vf (&a)[W]) {
  vf v[W];
#pragma GCC unroll 16
  for (int k = 0; k < W; ++k) v[k] = a[bit_reverse(k)];
  if constexpr (W > 1) tree_level<W / 2>(v, W);
  return v[0];
}

template <int S, std::size_t... L>
constexpr vi rotate_mask(std::index_sequence<L...>) {
  return vi{static_cast<std::int32_t>((L + S) % W)...};
}
template <int S, std::size_t... L>
inline vf rotate_lanes(vf x, std::index_sequence<L...>) {
#if defined(__clang__)
  return __builtin_shufflevector(x, x, static_cast<int>((L + S) % W)...);
#else
  constexpr vi mask = rotate_mask<S>(std::index_sequence<L...>{});
  return __builtin_shuffle(x, mask);
#endif
}
template <int S>
inline vf rotate(vf x) {
  return rotate_lanes<S>(x, std::make_index_sequence<W>{});
}
template <int S = W / 2>
inline vf all_max(vf x) {
  const vf y = rotate<S>(x);
  x = x > y ? x : y;
  if constexpr (S > 1) return all_max<S / 2>(x);
  return x;
}
template <int S = W / 2>
inline vf all_sum(vf x) {
  x += rotate<S>(x);
  if constexpr (S > 1) return all_sum<S / 2>(x);
  return x;
}

// ---- blocks ---------------------------------------------------------------------------------

// W int8 values to fp32. GCC 12 scalarises __builtin_convertvector from int8 lanes (byte by
// byte through general registers, ~10x slower than the memory it converts), so where the
// target has a sign-extending load (vpmovsxbd) it is named here; elsewhere the portable form.
inline vf widen_int8(const std::int8_t* src) {
#if defined(__AVX512F__) && HC_VEC_FLOATS == 16
  return (vf)_mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
#elif defined(__AVX2__) && HC_VEC_FLOATS == 8
  return (vf)_mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src))));
#else
  return __builtin_convertvector(__builtin_convertvector(load_as<vb>(src), vi), vf);
#endif
}

// Rows [0, n) of a block into fp32 [KB, ld], zero-padded to ld columns and KB rows.
template <CacheDType D>
void widen_block(const void* base, i64 row0, i64 n, i64 dim, i64 ld, float* out) {
  for (i64 c = 0; c < n; ++c) {
    float* dst = out + c * ld;
    i64 d = 0;
    if constexpr (D == CacheDType::f32) {
      const float* src = static_cast<const float*>(base) + (row0 + c) * dim;
      std::memcpy(dst, src, static_cast<std::size_t>(dim) * 4);
      d = dim;
    } else if constexpr (D == CacheDType::bf16) {
      const std::uint16_t* src = static_cast<const std::uint16_t*>(base) + (row0 + c) * dim;
      for (; d + W <= dim; d += W)
        store(dst + d, (vf)(__builtin_convertvector(load_as<vh>(src + d), vu) << 16));
      for (; d < dim; ++d) {
        const std::uint32_t bits = static_cast<std::uint32_t>(src[d]) << 16;
        std::memcpy(dst + d, &bits, 4);
      }
    } else {
      const std::int8_t* src = static_cast<const std::int8_t*>(base) + (row0 + c) * dim;
      for (; d + W <= dim; d += W) store(dst + d, widen_int8(src + d));
      for (; d < dim; ++d) dst[d] = static_cast<float>(src[d]);
    }
    for (d = dim; d < ld; ++d) dst[d] = 0.0f;
  }
  for (i64 c = n; c < KB; ++c) std::memset(out + c * ld, 0, static_cast<std::size_t>(ld) * 4);
}

// The W scores q . k_c for keys c = 0..W-1 at k (row stride ldk); depth a multiple of W.
[[gnu::always_inline]] inline vf dot_w(const float* q, const float* k, i64 ldk, i64 depth) {
  vf a[W] = {};
  for (i64 d = 0; d < depth; d += W) {
    const vf qv = load(q + d);
#pragma GCC unroll 16
    for (int c = 0; c < W; ++c) a[c] += qv * load(k + c * ldk + d);
  }
  return transpose_sum(a);
}

// acc[0, NV*W) = alpha * acc + sum_{c < keys} p[c] * v[c, 0, NV*W)
template <int NV>
inline void sum_strip(float* acc, float alpha, const float* p, const float* v, i64 ldv, i64 keys) {
  vf a[NV];
  const vf al = splat(alpha);
#pragma GCC unroll 8
  for (int j = 0; j < NV; ++j) a[j] = load(acc + j * W) * al;
  for (i64 c = 0; c < keys; ++c) {
    const vf pc = splat(p[c]);
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) a[j] += pc * load(v + c * ldv + j * W);
  }
#pragma GCC unroll 8
  for (int j = 0; j < NV; ++j) store(acc + j * W, a[j]);
}

void weighted_sum(float* acc, i64 width, float alpha, const float* p, const float* v, i64 ldv,
                  i64 keys) {
  for (i64 e0 = 0; e0 < width; e0 += kStripVecs * W) {
    const int nv = static_cast<int>(std::min<i64>(kStripVecs, (width - e0) / W));
    switch (nv) {
      case 8:
        sum_strip<8>(acc + e0, alpha, p, v + e0, ldv, keys);
        break;
      case 7:
        sum_strip<7>(acc + e0, alpha, p, v + e0, ldv, keys);
        break;
      case 6:
        sum_strip<6>(acc + e0, alpha, p, v + e0, ldv, keys);
        break;
      case 5:
        sum_strip<5>(acc + e0, alpha, p, v + e0, ldv, keys);
        break;
      case 4:
        sum_strip<4>(acc + e0, alpha, p, v + e0, ldv, keys);
        break;
      case 3:
        sum_strip<3>(acc + e0, alpha, p, v + e0, ldv, keys);
        break;
      case 2:
        sum_strip<2>(acc + e0, alpha, p, v + e0, ldv, keys);
        break;
      default:
        sum_strip<1>(acc + e0, alpha, p, v + e0, ldv, keys);
        break;
    }
  }
}

template <CacheDType D>
void chunk_impl(const DecodeChunk& ch) {
  const float minus_inf = -std::numeric_limits<float>::infinity();
  const i64 dp = ch.head_dim_pad, vp = ch.v_head_dim_pad;
  for (i64 r = 0; r < ch.rows; ++r) {
    ch.m[r] = minus_inf;
    ch.l[r] = 0.0f;
    std::memset(ch.acc + r * vp, 0, static_cast<std::size_t>(vp) * 4);
  }
  i64 last_end = 0;  // the furthest any row sees
  for (i64 r = 0; r < ch.rows; ++r) last_end = std::max(last_end, ch.row_end[r]);
  const i64 key_end = std::min(ch.key_end, last_end);
  const bool direct_k = D == CacheDType::f32 && ch.head_dim == dp;
  const bool direct_v = D == CacheDType::f32 && ch.v_head_dim == vp;
  const vi lanes = iota();

  for (i64 j0 = ch.key_begin; j0 < key_end; j0 += KB) {
    const i64 nk = std::min<i64>(KB, key_end - j0);
    const float* kb = ch.k_block;
    i64 ldk = dp;
    if (direct_k && nk == KB) {
      kb = static_cast<const float*>(ch.k) + j0 * ch.head_dim;
      ldk = ch.head_dim;
    } else {
      widen_block<D>(ch.k, j0, nk, ch.head_dim, dp, ch.k_block);
    }
    const float* vblk = ch.v_block;
    i64 ldv = vp;
    if (direct_v) {
      vblk = static_cast<const float*>(ch.v) + j0 * ch.v_head_dim;
      ldv = ch.v_head_dim;
    } else {
      widen_block<D>(ch.v, j0, nk, ch.v_head_dim, vp, ch.v_block);
    }
    // Per-key factors: the score scale (times the int8 K scale), and the int8 V scale.
    vf k_factor[kGroups] = {}, v_factor[kGroups] = {};
    for (int g = 0; g < kGroups; ++g) {
      k_factor[g] = splat(ch.scale);
      v_factor[g] = splat(1.0f);
      if constexpr (D == CacheDType::int8) {
        if (nk == KB) {
          k_factor[g] = splat(ch.scale) * load(ch.k_scale + j0 + g * W);
          v_factor[g] = load(ch.v_scale + j0 + g * W);
          continue;
        }
        for (int c = 0; c < W; ++c) {
          const i64 j = j0 + g * W + c;
          k_factor[g][c] = j < j0 + nk ? ch.scale * ch.k_scale[j] : 0.0f;
          v_factor[g][c] = j < j0 + nk ? ch.v_scale[j] : 0.0f;
        }
      }
    }

    for (i64 r = 0; r < ch.rows; ++r) {
      const i64 visible = std::min(ch.row_end[r] - j0, nk);  // keys [0, visible) of the block
      if (visible <= 0) continue;
      float* p = ch.p;
      // Scores, masked past the last visible key.
      vf s[kGroups];
      vf block_max = splat(minus_inf);
      for (int g = 0; g < kGroups; ++g) {
        if (g * W >= visible) {
          s[g] = splat(minus_inf);
          continue;
        }
        const vf dots = dot_w(ch.q + r * dp, kb + g * W * ldk, ldk, dp) * k_factor[g];
        s[g] =
            (lanes + g * W) < splat_i(static_cast<std::int32_t>(visible)) ? dots : splat(minus_inf);
        block_max = s[g] > block_max ? s[g] : block_max;
      }
      // The online softmax step. m_new is finite: the row sees at least one key here.
      const float m_old = ch.m[r];
      const float m_new = std::max(m_old, all_max(block_max)[0]);
      const float alpha = exp_s(m_old - m_new);  // 0 while m_old is -inf
      const vf shift = splat(m_new);
      vf total = splat(0.0f);
      for (int g = 0; g < kGroups; ++g) {
        const vf e = exp_v(s[g] - shift);
        total += e;
        store(p + g * W, D == CacheDType::int8 ? e * v_factor[g] : e);
      }
      ch.m[r] = m_new;
      ch.l[r] = ch.l[r] * alpha + all_sum(total)[0];
      weighted_sum(ch.acc + r * vp, vp, alpha, p, vblk, ldv, visible);
    }
  }
}

void chunk(const DecodeChunk& ch) {
  switch (ch.dtype) {
    case CacheDType::f32:
      return chunk_impl<CacheDType::f32>(ch);
    case CacheDType::bf16:
      return chunk_impl<CacheDType::bf16>(ch);
    case CacheDType::int8:
      return chunk_impl<CacheDType::int8>(ch);
  }
}

}  // namespace

const DecodeKernels& decode_table() {
  static const DecodeKernels kernels{.isa = HC_ISA, .vector_floats = W, .chunk = &chunk};
  return kernels;
}

}  // namespace headcount::simd::HC_ISA_NS
