// Rotary position embedding (RoPE) on the rows of a projection, in Hugging Face's layout (the
// "rotate_half" form LlamaForCausalLM uses): for a head of head_dim = 2h values at position p,
// each pair (x[i], x[i + h]), i < h, turns by the angle p * base^(-2i / head_dim):
//
//   x'[i]     = x[i] cos(θ_i) - x[i + h] sin(θ_i)
//   x'[i + h] = x[i + h] cos(θ_i) + x[i] sin(θ_i),      θ_i = p * base^(-2i / head_dim)
//
// θ, cos and sin are computed in double and rounded once to float (Hugging Face computes them
// in fp32: its θ carries a relative error of about 2^-23, i.e. ~1e-5 rad at p = 100; the
// rotation itself is the same two products and one sum per output in fp32). llama.cpp's GGUF
// files store Q and K with the rows of each head permuted so that the pairs are adjacent
// (docs/gguf.md); the decoder un-permutes them at load, so one rotation serves both.
#pragma once

#include <cstdint>

#include "headcount/context.h"

namespace headcount::layers {

// Rotates `heads` consecutive heads of head_dim floats at the start of each of `rows` rows
// (row r at x + r * row_stride) for position first_position + r. head_dim even, base > 1.
// inverse: by -θ (the transpose: what the training backward applies to dq and dk).
void apply_rotary(Context& ctx, float* x, std::int64_t rows, std::int64_t row_stride,
                  std::int64_t heads, std::int64_t head_dim, float base,
                  std::int64_t first_position, bool inverse = false);

}  // namespace headcount::layers
