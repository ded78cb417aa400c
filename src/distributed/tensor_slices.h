// Row and column ranges of a weight matrix, copied: how the heads splits cut a rank's slice of
// a layer (heads.cpp) and of an encoder's FFN (heads_encoder.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "headcount/tensor.h"

namespace headcount::distributed::detail {

// Columns [begin, begin + count) of a [rows, cols] f32 matrix.
inline Tensor column_range(const Tensor& w, std::int64_t begin, std::int64_t count) {
  const std::int64_t rows = w.size(0), cols = w.size(1);
  Tensor out(DType::f32, {rows, count});
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy_n(w.data<const float>() + r * cols + begin, count, out.data<float>() + r * count);
  return out;
}

// Rows [begin, begin + count) of a [rows, cols] f32 matrix (or entries of a vector).
inline Tensor row_range(const Tensor& w, std::int64_t begin, std::int64_t count) {
  const std::int64_t cols = w.rank() == 2 ? w.size(1) : 1;
  Tensor out(DType::f32, w.rank() == 2 ? std::vector<std::int64_t>{count, cols}
                                       : std::vector<std::int64_t>{count});
  std::copy_n(w.data<const float>() + begin * cols, count * cols, out.data<float>());
  return out;
}

}  // namespace headcount::distributed::detail
