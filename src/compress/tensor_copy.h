// A deep copy of an owning tensor (Tensor is move-only), for the compression passes that
// derive new weights from old ones.
#pragma once

#include <cstring>

#include "headcount/tensor.h"

namespace headcount::compress {

inline Tensor clone(const Tensor& t) {
  Tensor out(t.dtype(), t.shape());
  if (t.bytes() > 0) std::memcpy(out.data<void>(), t.data<const void>(), t.bytes());
  return out;
}

}  // namespace headcount::compress
