// Vector math shared by the per-ISA micro-kernels (tiles_impl.h, decode_impl.h): the
// vector types, loads and stores, broadcast, the vectorised exp (decode, the backward, the AMX
// softmax) and the streaming softmax's 2^x, each written once so that every ISA and kernel
// using it gets the same bits. Included once per instruction-set
// translation unit, inside that unit's namespace (HC_ISA_NS), with HC_VEC_FLOATS set.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>
#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

namespace headcount::simd::HC_ISA_NS::vec {

constexpr int W = HC_VEC_FLOATS;
typedef float vf __attribute__((vector_size(W * 4)));
typedef std::int32_t vi __attribute__((vector_size(W * 4)));

inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }

// A braced list of W copies compiles to one broadcast. (Not `vf{} + x`: adding +0 is not
// an identity for -0, so the compiler must keep a scalar add before broadcasting.)
template <typename V, typename T, std::size_t... I>
inline V splat_impl(T x, std::index_sequence<I...>) {
  return V{((void)I, x)...};
}
inline vf splat(float x) { return splat_impl<vf>(x, std::make_index_sequence<W>{}); }

// a·b + c, fused where the instruction set has FMA. Kernels that promise bitwise equal results
// across code paths (the packed GEMM's tile heights) call this instead of writing a * b + c:
// -ffp-contract=fast only *permits* the fusion, and clang under ASan left some of those products
// unfused (its checks split the basic blocks the contraction works in), so one row's sums
// rounded differently as the 6-row tile or a shorter one.
inline vf madd(vf a, vf b, vf c) {
#if defined(__AVX512F__) && HC_VEC_FLOATS == 16
  return _mm512_fmadd_ps(a, b, c);
#elif defined(__FMA__) && HC_VEC_FLOATS == 8
  return _mm256_fmadd_ps(a, b, c);
#else
  return a * b + c;  // the generic (SSE2) build has no FMA to fuse into
#endif
}

// a·b rounded to fp32 on its own: the empty asm hides the product from -ffp-contract=fast,
// which would otherwise fuse it into a following add (one rounding instead of two) where the
// caller needs the rounded product (softmax_columns: fl(s·log2e) - fl(m·log2e) is exactly 0
// for s = m only if both are rounded the same way).
inline vf mul_rounded(vf a, vf b) {
  vf p = a * b;
  __asm__("" : "+v"(p));
  return p;
}

// exp(x), Cephes' expf: x = n·ln2 + r with |r| <= ln2/2 (ln2 split in two so n·ln2 is
// exact), exp(r) by a degree-7 polynomial, times 2^n. Relative error <= 2 ulp over
// [-87, 88] (checked by test_simd against std::exp in double). Below ln(FLT_MIN) = -87.34
// it returns exactly 0, -inf included, so a masked key contributes nothing, on every ISA.
#if defined(__AVX512F__) && HC_VEC_FLOATS == 16
// AVX-512: round with vrndscaleps and apply 2^n with vscalefps, which handles the
// exponent range itself: 15 instructions instead of 21. Lanes below ln(FLT_MIN) (and NaN) are
// zeroed by the mask of the final vscalefps instead of computed: on Intel cores a vscalefps
// whose result underflows takes a microcode assist, and with -inf masked keys computed through
// it the online softmax of a causal call was 40% of the call (against 15% unmasked) at n 1024.
// Since the mask discards those lanes, x needs no clamp below: what they compute, NaN included,
// is never used (the clamp this had was a 16th instruction; every result is the same bits).
// The clamp above stays: past it the reduction loses r and the polynomial could give -inf.
inline vf exp_v(vf x) {
  const __mmask16 normal =
      _mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(-87.3365447504019f), _CMP_GE_OQ);
  const __m512 v = _mm512_min_ps((__m512)x, _mm512_set1_ps(88.3762626647949f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), v);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r);
  y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
  return (vf)_mm512_maskz_scalef_ps(normal, y, n);
}
#else
inline vf exp_v(vf x) {
  const vf max_x = splat(88.3762626647949f);
  const vf min_x = splat(-87.3365447504019f);
  const vi underflow = x < min_x;
  x = x > max_x ? max_x : x;
  x = x < min_x ? min_x : x;
  const vf round = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const vf n = (x * splat(1.44269504088896341f) + round) - round;
  vf r = x - n * splat(0.693359375f);
  r = r - n * splat(-2.12194440e-4f);
  vf y = splat(1.9875691500e-4f);
  y = y * r + splat(1.3981999507e-3f);
  y = y * r + splat(8.3334519073e-3f);
  y = y * r + splat(4.1665795894e-2f);
  y = y * r + splat(1.6666665459e-1f);
  y = y * r + splat(5.0000001201e-1f);
  y = y * (r * r) + r + splat(1.0f);
  const vi two_n = (__builtin_convertvector(n, vi) + 127) << 23;
  y = y * (vf)two_n;  // a vector cast reinterprets the bits
  return (vf)((vi)y & ~underflow);
}
#endif

// 2^f for |f| <= 1/2 (exp2_v below): a degree-6 polynomial, a relative-error minimax fit
// (2e-9 on [-1/2, 1/2], so the fp32 Horner steps dominate), with madd (fused wherever the ISA
// has FMA).
inline vf exp2_fraction(vf f) {
  vf y = splat(1.5345792e-4f);
  y = madd(y, f, splat(1.3399925e-3f));
  y = madd(y, f, splat(9.618489e-3f));
  y = madd(y, f, splat(5.5503286e-2f));
  y = madd(y, f, splat(0.24022646f));
  y = madd(y, f, splat(0.6931472f));
  return madd(y, f, splat(1.0f));
}

// 2^x for the online softmax (softmax_columns takes e^(s - m) as 2^(fl(s·log2e) -
// fl(m·log2e)), so x <= 0): x = n + f with n the nearest integer (exact) and |f| <= 1/2,
// 2^f by exp2_fraction, times 2^n. Against exp_v it drops the two-step reduction by ln 2 and
// the upper clamp: 10 instructions instead of 15 on AVX-512. Relative error <= 2 ulp for x in
// [-126, 127] (test_simd); below -126 exactly 0 (no subnormal results, -inf included), the
// same rule as exp_v's. Not for x > 127 (no clamp above: the softmax never asks).
#if defined(__AVX512F__) && HC_VEC_FLOATS == 16
// AVX-512: vrndscaleps for n, vscalefps for 2^n, its mask zeroing the lanes below -126 (and NaN).
inline vf exp2_v(vf x) {
  const __mmask16 normal = _mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);
  const __m512 n = _mm512_roundscale_ps((__m512)x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const vf y = exp2_fraction(x - (vf)n);
  return (vf)_mm512_maskz_scalef_ps(normal, (__m512)y, n);
}
#else
// Elsewhere: n by the 1.5·2^23 rounding trick and 2^n built in the exponent bits, so the lanes
// below -126 are clamped first (n + 127 must stay a normal exponent) and zeroed at the end.
inline vf exp2_v(vf x) {
  const vi underflow = x < splat(-126.0f);  // -inf too; NaN compares false and stays NaN
  const vf round = splat(12582912.0f);      // 1.5 * 2^23: adding it rounds to an integer
  const vf clamped = underflow ? splat(-126.0f) : x;
  const vf n = (clamped + round) - round;
  vf y = exp2_fraction(clamped - n);
  const vi two_n = (__builtin_convertvector(n, vi) + 127) << 23;
  y = y * (vf)two_n;  // a vector cast reinterprets the bits
  return (vf)((vi)y & ~underflow);
}
#endif

}  // namespace headcount::simd::HC_ISA_NS::vec
