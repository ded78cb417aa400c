// Checks on tensor views shared by the forward's and the backward's validation: rank,
// dtype, sizes and strides, outputs that cannot write two elements to one address, and
// finite values. Each throws Error naming the field ("<name> shape: expected X, got Y").
#pragma once

#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "headcount/error.h"
#include "headcount/tensor.h"

namespace headcount::kernels {

inline void check_rank(const TensorView& view, const char* name, int rank, const char* dims,
                       bool bf16_ok = false) {
  using detail::concat;
  HEADCOUNT_CHECK(!view.empty(), name, concat("a tensor ", dims), "no data");
  HEADCOUNT_CHECK(view.rank == rank, concat(name, " rank"), concat(rank, " dims ", dims),
                  concat(view.rank, " dims ", view.shape_string()));
  if (bf16_ok) {
    HEADCOUNT_CHECK(view.dtype == DType::f32 || view.dtype == DType::bf16, concat(name, " dtype"),
                    "f32 or bf16", dtype_name(view.dtype));
  } else {
    HEADCOUNT_CHECK(view.dtype == DType::f32, concat(name, " dtype"), "f32",
                    dtype_name(view.dtype));
  }
  for (int d = 0; d < rank; ++d) {
    HEADCOUNT_CHECK(view.shape[d] > 0, concat(name, " shape"), concat("every size >= 1 ", dims),
                    view.shape_string());
    HEADCOUNT_CHECK(view.strides[d] >= 0, concat(name, " strides"), "non-negative strides",
                    view.strides_string());
  }
}

// An output must not write two elements to one address.
inline void check_writable(const TensorView& view, const char* name) {
  for (int d = 0; d < view.rank; ++d) {
    HEADCOUNT_CHECK(view.shape[d] == 1 || view.strides[d] > 0, detail::concat(name, " strides"),
                    "non-zero strides on every dimension of size > 1 (an output)",
                    view.strides_string());
  }
}

inline void check_shape(const TensorView& view, const char* name,
                        std::initializer_list<std::int64_t> want, const char* dims) {
  bool same = view.rank == static_cast<int>(want.size());
  for (int d = 0; same && d < view.rank; ++d) same = view.shape[d] == want.begin()[d];
  HEADCOUNT_CHECK(same, detail::concat(name, " shape"),
                  detail::concat(shape_string(std::vector<std::int64_t>(want)), ' ', dims),
                  view.shape_string());
}

// Calls f(element offset, a, b, c, d) for every element of a rank-4 view.
template <typename F>
void for_each_offset(const TensorView& v, F&& f) {
  for (std::int64_t a = 0; a < v.shape[0]; ++a)
    for (std::int64_t b = 0; b < v.shape[1]; ++b)
      for (std::int64_t c = 0; c < v.shape[2]; ++c)
        for (std::int64_t d = 0; d < v.shape[3]; ++d)
          f(a * v.strides[0] + b * v.strides[1] + c * v.strides[2] + d * v.strides[3], a, b, c, d);
}

// True if any of the n values at x (unit stride) is an inf or a NaN: all exponent bits set.
// Reads the bits rather than calling isfinite so the loop has no branch and vectorises; it
// is a pass over every input of every attention call, so it runs at memory speed.
template <typename Bits>
inline bool any_non_finite(const Bits* x, std::int64_t n, Bits exponent) {
  Bits seen = 0;
  for (std::int64_t i = 0; i < n; ++i)
    seen |= static_cast<Bits>(((x[i] & exponent) == exponent) ? 1 : 0);
  return seen != 0;
}

// True if rows [r0, r1) of a rank-4 view with unit-stride rows (strides[3] == 1; row r is
// (a, b, c) with r = (a·shape[1] + b)·shape[2] + c) hold an inf or a NaN. A contiguous view is
// scanned as one flat range; otherwise row r0's indices are divided out once and counted up
// (a division per row cost 2x the scan itself on short rows). fp32 rows are scanned by
// `f32_scan` when given (a per-ISA kernel, simd::TileKernels::any_non_finite_f32).
inline bool rows_non_finite(const TensorView& v, std::int64_t r0, std::int64_t r1,
                            bool (*f32_scan)(const float*, std::int64_t) = nullptr) {
  auto scan = [&](std::int64_t off, std::int64_t n) {
    if (v.dtype == DType::bf16)
      return any_non_finite(v.ptr<const std::uint16_t>() + off, n, std::uint16_t{0x7f80});
    if (f32_scan != nullptr) return f32_scan(v.ptr<const float>() + off, n);
    return any_non_finite(v.ptr<const std::uint32_t>() + off, n, std::uint32_t{0x7f800000});
  };
  if (v.strides[2] == v.shape[3] && v.strides[1] == v.shape[2] * v.shape[3] &&
      v.strides[0] == v.shape[1] * v.strides[1])
    return scan(r0 * v.shape[3], (r1 - r0) * v.shape[3]);
  std::int64_t c = r0 % v.shape[2], b = (r0 / v.shape[2]) % v.shape[1],
               a = r0 / (v.shape[2] * v.shape[1]);
  // Rows (a, b, 0..shape[2]) that follow each other in memory (heads of one position in a
  // [batch, seq, heads, dim] view of a wider projection) are scanned as one run: one call per
  // position instead of per head (the calls' overhead was most of the scan in `embed`).
  const bool runs = v.strides[2] == v.shape[3];
  for (std::int64_t r = r0; r < r1;) {
    const std::int64_t n = runs ? std::min(v.shape[2] - c, r1 - r) : 1;
    if (scan(a * v.strides[0] + b * v.strides[1] + c * v.strides[2], n * v.shape[3])) return true;
    r += n;
    if ((c += n) == v.shape[2]) {
      c = 0;
      if (++b == v.shape[1]) b = 0, ++a;
    }
  }
  return false;
}

inline void check_finite(const TensorView& view, const char* name) {
  auto value = [&](std::int64_t off) {
    return view.dtype == DType::bf16 ? to_float(view.ptr<const bf16>()[off])
                                     : view.ptr<const float>()[off];
  };
  // Fast scan of unit-stride rows; the element-wise walk below only runs to name the first bad one.
  if (view.strides[3] == 1 &&
      !rows_non_finite(view, 0, view.shape[0] * view.shape[1] * view.shape[2]))
    return;
  for_each_offset(view, [&](std::int64_t off, auto a, auto b, auto c, auto d) {
    if (!std::isfinite(value(off)))
      fail(name, detail::concat("expected finite values, got ", value(off), " at [", a, ", ", b,
                                ", ", c, ", ", d, "]"));
  });
}

}  // namespace headcount::kernels
