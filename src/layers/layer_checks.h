// Checks shared by the layer's forward, prefill and decode paths.
#pragma once

#include <cmath>
#include <cstdint>

#include "headcount/error.h"
#include "headcount/tensor.h"
#include "kernels/view_checks.h"

namespace headcount::layers {

using detail::concat;

// x [batch, len, width], f32, unit stride along width, finite.
inline void check_input(const TensorView& x, const char* name, std::int64_t width,
                        const char* dims) {
  HEADCOUNT_CHECK(!x.empty(), name, concat("a tensor ", dims), "no data");
  HEADCOUNT_CHECK(x.rank == 3, concat(name, " rank"), concat("3 dims ", dims),
                  concat(x.rank, " dims ", x.shape_string()));
  HEADCOUNT_CHECK(x.dtype == DType::f32, concat(name, " dtype"), "f32", dtype_name(x.dtype));
  HEADCOUNT_CHECK(x.shape[0] > 0 && x.shape[1] > 0 && x.shape[2] == width, concat(name, " shape"),
                  concat("[batch >= 1, length >= 1, ", width, "] ", dims), x.shape_string());
  HEADCOUNT_CHECK(x.strides[2] == 1 && x.strides[1] >= width && x.strides[0] >= 0,
                  concat(name, " strides"), "rows with unit stride along the feature dimension",
                  x.strides_string());
  const float* data = x.ptr<const float>();
  // A branch-free scan of each row first (kernels/view_checks.h); the element walk below only
  // runs to name the first bad value. (The walk alone was 0.7% of `embed` at batch 32.)
  bool clean = true;
  for (std::int64_t b = 0; b < x.shape[0] && clean; ++b)
    for (std::int64_t i = 0; i < x.shape[1] && clean; ++i)
      clean = !kernels::any_non_finite(
          reinterpret_cast<const std::uint32_t*>(data + b * x.strides[0] + i * x.strides[1]), width,
          std::uint32_t{0x7f800000});
  if (clean) return;
  for (std::int64_t b = 0; b < x.shape[0]; ++b)
    for (std::int64_t i = 0; i < x.shape[1]; ++i)
      for (std::int64_t c = 0; c < width; ++c)
        if (!std::isfinite(data[b * x.strides[0] + i * x.strides[1] + c]))
          fail(name,
               concat("expected finite values, got ", data[b * x.strides[0] + i * x.strides[1] + c],
                      " at [", b, ", ", i, ", ", c, "]"));
}

}  // namespace headcount::layers
