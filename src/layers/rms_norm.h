// RMSNorm (Llama's pre-norm) over the last dimension, with the residual add of the sub-layer
// before it in the same pass:
//
//   x[r] += residual[r]                       (residual may be null)
//   y[r]  = x[r] / sqrt(mean(x[r]^2) + eps) * gamma
//
// The mean of squares is accumulated in double (the sum of `width` squares, then one division),
// 1 / sqrt(. + eps) is taken in double and rounded once; y is one fp32 product per factor.
// Hugging Face's LlamaRMSNorm does the same in fp32 (its mean carries a relative error up to
// ~width * 2^-24). Rows are spread over the context's workers.
#pragma once

#include <cstdint>

#include "headcount/context.h"

namespace headcount::layers {

void add_rms_norm(Context& ctx, float* x, const float* residual, std::int64_t rows,
                  std::int64_t width, const float* gamma, float eps, float* y);

// One row of it without the residual: y = x * inv * gamma, returning inv = 1 / rms(x). The
// training executor's RMSNorm calls this too (and keeps inv for its backward), so both
// executors normalise with the same arithmetic, bit for bit.
float rms_norm_row(const float* x, std::int64_t width, const float* gamma, float eps, float* y);

}  // namespace headcount::layers
