// Dense layers for the encoder: Linear (y = x·W + b, W stored [in, out]) and BERT's
// feed-forward block, GELU(x·W1 + b1)·W2 + b2, with the exact erf GELU. Both multiply through
// the packed GEMM (packed_gemm.h): W is packed once by Linear::make, the bias and the GELU run
// in the GEMM's epilogue, and every row's result is independent of the others.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>

#include "headcount/context.h"
#include "headcount/tensor.h"
#include "layers/block_weights.h"
#include "layers/packed_gemm.h"

namespace headcount::layers {

// GELU, the erf form BERT was trained with: x · Φ(x) = 0.5 · x · (1 + erf(x / √2)).
inline float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }

struct Linear {
  Tensor weight;  // [in, out]
  Tensor bias;    // [out], or empty: no bias
  Tensor packed;  // pack_weights(weight, dtype)
  // Or (from_blocks) a GGUF file's quantized blocks, with no fp32 weight, packed or not.
  std::shared_ptr<const BlockWeights> blocks;

  // Checks the shapes and packs the weight, in f32 or bf16 (packed_gemm.h); an empty bias is
  // none.
  static Linear make(Tensor weight, Tensor bias, DType dtype = DType::f32);
  // y = x · Wᵀ with W the blocks' n rows of k (block_weights.h); no bias.
  static Linear from_blocks(std::shared_ptr<const BlockWeights> blocks);

  std::int64_t in() const { return blocks ? blocks->k : weight.size(0); }
  std::int64_t out() const { return blocks ? blocks->n : weight.size(1); }
  // y[rows, out] = epilogue(x[rows, in] · weight + bias) (rows contiguous).
  void forward(Context& ctx, const float* x, std::int64_t rows, float* y,
               GemmEpilogue epilogue = GemmEpilogue::none) const;
};

struct FeedForward {
  Linear up;    // [d_model, d_ff]
  Linear down;  // [d_ff, d_model]

  // y[rows, d_model] = GELU(x · up) · down; `hidden` holds rows * d_ff floats.
  void forward(Context& ctx, const float* x, std::int64_t rows, float* hidden, float* y) const;
};

// silu(x) = x * sigmoid(x) = x / (1 + e^-x): the gate of SwiGLU.
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

// The SwiGLU gate over n elements: out = silu(gate) * up. Both executors call it (the
// training executor's forward too), so the gate is computed one way in the project.
inline void swiglu_gate(const float* gate, const float* up, float* out, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) out[j] = silu(gate[j]) * up[j];
}

// Llama's gated feed-forward (SwiGLU): y = (silu(x · W_gate) * (x · W_up)) · W_down, no biases.
// W_gate and W_up are packed side by side in one Linear ([d_model, 2 * d_ff]: gate columns
// first), so x is read once; the product of the halves runs over rows on the pool.
struct GatedFeedForward {
  Linear gate_up;  // [d_model, 2 * d_ff]
  Linear down;     // [d_ff, d_model]

  // gate [d_model, d_ff] and up [d_model, d_ff] in [in, out] layout.
  static GatedFeedForward make(const Tensor& gate, const Tensor& up, Tensor down,
                               DType dtype = DType::f32);
  // From a GGUF file's blocks: gate_up's rows the gate's d_ff then the up's d_ff outputs.
  static GatedFeedForward from_blocks(std::shared_ptr<const BlockWeights> gate_up,
                                      std::shared_ptr<const BlockWeights> down);
  std::int64_t d_ff() const { return down.in(); }
  // y[rows, d_model]; `hidden` holds rows * 3 * d_ff floats.
  void forward(Context& ctx, const float* x, std::int64_t rows, float* hidden, float* y) const;
};

}  // namespace headcount::layers
