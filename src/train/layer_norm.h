// LayerNorm over the last dimension with the statistics its backward needs.
//   forward:  x̂ = (x - mean) · rstd,  rstd = 1 / sqrt(var + eps),  y = x̂ · γ + β
//   backward: g = dy · γ;  dx = rstd · (g - mean(g) - x̂ · mean(g · x̂))
//             dγ = Σ_rows dy · x̂,  dβ = Σ_rows dy
// Row statistics and the per-row means of the backward are accumulated in double. dx is
// row-parallel; dγ, dβ are column sums in a fixed row order (independent of the thread count).
#pragma once

#include <cstdint>

#include "headcount/context.h"

namespace headcount::train {

inline constexpr float kLayerNormEps = 1e-5f;  // PyTorch's nn.LayerNorm default

// y may not alias x; mean and rstd receive one float per row.
void layer_norm_forward(Context& ctx, const float* x, std::int64_t rows, std::int64_t width,
                        const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        float eps = kLayerNormEps);

struct LayerNormBackward {
  const float* x = nullptr;   // [rows, width], the forward's input
  const float* dy = nullptr;  // [rows, width]
  const float* gamma = nullptr;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  std::int64_t rows = 0, width = 0;
  float* dx = nullptr;         // [rows, width], may not alias dy
  float* dgamma = nullptr;     // [width], overwritten
  float* dbeta = nullptr;      // [width], overwritten
  bool accumulate_dx = false;  // dx += ... (a residual branch's gradient already there)
};
void layer_norm_backward(Context& ctx, const LayerNormBackward& args);

}  // namespace headcount::train
