// RMSNorm over the last dimension (the Llama family's norm) with what its backward needs.
//   forward:  rstd = 1 / sqrt(mean(x²) + eps),  x̂ = x · rstd,  y = x̂ · γ
//   backward: g = dy · γ;  dx = rstd · (g - x̂ · mean(g · x̂));  dγ = Σ_rows dy · x̂
// Row sums in double; dx is row-parallel, dγ a column sum in a fixed row order (independent of
// the thread count), as for LayerNorm (layer_norm.h).
#pragma once

#include <cstdint>

#include "headcount/context.h"

namespace headcount::train {

// y may not alias x; rstd receives one float per row.
void rms_norm_forward(Context& ctx, const float* x, std::int64_t rows, std::int64_t width,
                      const float* gamma, float* y, float* rstd, float eps);

struct RmsNormBackward {
  const float* x = nullptr;   // [rows, width], the forward's input
  const float* dy = nullptr;  // [rows, width]
  const float* gamma = nullptr;
  const float* rstd = nullptr;
  std::int64_t rows = 0, width = 0;
  float* dx = nullptr;         // [rows, width], may not alias dy
  float* dgamma = nullptr;     // [width], overwritten
  bool accumulate_dx = false;  // dx += ...
};
void rms_norm_backward(Context& ctx, const RmsNormBackward& args);

}  // namespace headcount::train
