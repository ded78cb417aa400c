// LayerNorm over the last dimension, with an optional residual added first (BERT's post-LN
// "x = LayerNorm(x + sublayer(x))" in one pass over memory).
#pragma once

#include <cstdint>

#include "headcount/context.h"

namespace headcount::layers {

// For each of `rows` rows of `width` floats (row stride = width):
//   x[r] = (x[r] + residual[r] - mean) / sqrt(var + eps) * gamma + beta
// residual may be nullptr. Mean and variance are accumulated in double (two passes, 32 lanes
// summed in a fixed order: simd/gemm.h), so the
// result is as exact as fp32 storage allows. Rows are spread over the context's workers.
void add_layer_norm(Context& ctx, float* x, const float* residual, std::int64_t rows,
                    std::int64_t width, const float* gamma, const float* beta, float eps);

// Pre-norm with LayerNorm: x[r] += residual[r] (residual may be nullptr), then y[r] = the same
// LayerNorm of the new x[r], into y (x keeps the residual stream).
void add_layer_norm_into(Context& ctx, float* x, const float* residual, std::int64_t rows,
                         std::int64_t width, const float* gamma, const float* beta, float eps,
                         float* y);

}  // namespace headcount::layers
