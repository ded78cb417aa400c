// Dense layers for the encoder: Linear (y = x·W + b, W stored [in, out]) and BERT's
// feed-forward block, GELU(x·W1 + b1)·W2 + b2, with the exact erf GELU.
#pragma once

#include <cmath>
#include <cstdint>

#include "headcount/context.h"
#include "headcount/tensor.h"

namespace headcount::layers {

// GELU, the erf form BERT was trained with: x · Φ(x) = 0.5 · x · (1 + erf(x / √2)).
inline float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }

// Applies gelu_erf to n floats in place, spread over the context's workers.
void gelu_erf_inplace(Context& ctx, float* x, std::int64_t n);

struct Linear {
  Tensor weight;  // [in, out]
  Tensor bias;    // [out]

  std::int64_t in() const { return weight.size(0); }
  std::int64_t out() const { return weight.size(1); }
  // y[rows, out] = x[rows, in] · weight + bias (rows contiguous).
  void forward(Context& ctx, const float* x, std::int64_t rows, float* y) const;
};

struct FeedForward {
  Linear up;    // [d_model, d_ff]
  Linear down;  // [d_ff, d_model]

  // y[rows, d_model] = GELU(x · up) · down; `hidden` holds rows * d_ff floats.
  void forward(Context& ctx, const float* x, std::int64_t rows, float* hidden, float* y) const;
};

}  // namespace headcount::layers
