// The erf GELU and its derivative, elementwise over n floats:
//   gelu(u)  = u · Φ(u) = 0.5 · u · (1 + erf(u / √2))
//   gelu'(u) = Φ(u) + u · φ(u),  φ(u) = exp(-u² / 2) / √(2π)
#pragma once

#include <cstdint>

#include "headcount/context.h"

namespace headcount::train {

// y = gelu(u); y may not alias u (the backward needs u).
void gelu_forward(Context& ctx, const float* u, float* y, std::int64_t n);
// du = dy · gelu'(u); du may alias dy.
void gelu_backward(Context& ctx, const float* u, const float* dy, float* du, std::int64_t n);

}  // namespace headcount::train
