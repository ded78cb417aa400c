// The dense pieces of the trainable model, forward and backward, on contiguous row-major
// matrices of `rows` rows (rows = batch * seq_len tokens). Weights are [in, out] (x · W).
//   forward:  y = x · W + b
//   backward: dW = xᵀ · dy,  db = Σ_rows dy,  dx = dy · Wᵀ
// Every product goes through layers::gemm (headcount's own micro-kernels on the context's pool);
// the bias gradient is a column sum in a fixed row order, so it does not depend on threads.
#pragma once

#include <cstdint>

#include "headcount/context.h"

namespace headcount::train {

void linear_forward(Context& ctx, const float* x, std::int64_t rows, std::int64_t in,
                    std::int64_t out, const float* w, const float* b, float* y);

struct LinearBackward {
  const float* x = nullptr;   // [rows, in], the forward's input
  const float* dy = nullptr;  // [rows, out]
  const float* w = nullptr;   // [in, out]
  std::int64_t rows = 0, in = 0, out = 0;
  float* dw = nullptr;         // [in, out], overwritten
  float* db = nullptr;         // [out], overwritten; null: no bias
  float* dx = nullptr;         // [rows, in]; null: not needed (the first layer's input)
  bool accumulate_dx = false;  // dx += dy · Wᵀ instead of dx = dy · Wᵀ
};
void linear_backward(Context& ctx, const LinearBackward& args);

// out[c] = Σ_r m[r, c] (double accumulation, rows in order), overwritten.
void column_sums(Context& ctx, const float* m, std::int64_t rows, std::int64_t cols, float* out);

}  // namespace headcount::train
