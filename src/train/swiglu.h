// The SwiGLU gate of the Llama family's FFN, elementwise over n floats:
//   forward:  h = silu(a) · b,  silu(a) = a · σ(a),  σ(a) = 1 / (1 + e^-a)
//   backward: da = dh · b · σ(a) · (1 + a · (1 - σ(a))),  db = dh · silu(a)
// a = x·W_gate and b = x·W_up are the two projections of the FFN's input.
#pragma once

#include <cstdint>

#include "headcount/context.h"

namespace headcount::train {

// h may not alias a or b (the backward needs both).
void swiglu_forward(Context& ctx, const float* a, const float* b, float* h, std::int64_t n);
// da and db may not alias a, b or each other; da may alias dh.
void swiglu_backward(Context& ctx, const float* a, const float* b, const float* dh, float* da,
                     float* db, std::int64_t n);

}  // namespace headcount::train
