// The trainable attention sub-block, forward with saved activations and backward.
//
//   1. qkv[N, W] = x[N, d_model] · W_qkv + b_qkv, W = (heads + 2 kv_heads) · head_dim
//      (one fused GEMM; Q columns, then K, then V; head h owns columns h·head_dim of its part);
//      with rotary positions Q and K are then turned in place (qkv keeps the turned values)
//   2. concat[N, heads·head_dim] = attention(q, k, v) with q, k, v strided views of qkv (no
//      copies), the kernel writing each head into its columns of concat and its lse [B, heads, T]
//   3. gated = concat with head h's columns times gate[h] (Michel et al. 2019's head gate)
//   4. y[N, d_model] = gated · W_o + b_o
// Backward, in reverse:
//   dW_o = gatedᵀ·dy, db_o = Σ dy, d_gated = dy·W_oᵀ
//   dL/dgate[h] = Σ_{rows, columns of h} d_gated · concat;  d_concat = gate[h] · d_gated
//   dq, dk, dv = attention_backward(q, k, v, concat, lse, d_concat), each into its own
//      contiguous block of d_split, then interleaved into d_qkv's column ranges (the backward
//      refuses gradient views whose byte spans overlap, which column ranges of one matrix do)
//   rotary: dq, dk turned back by -θ in d_qkv (the rotation's transpose)
//   dW_qkv = xᵀ·d_qkv, db_qkv = Σ d_qkv, dx (+)= d_qkv·W_qkvᵀ
#pragma once

#include <cstdint>
#include <span>

#include "headcount/attention.h"
#include "headcount/context.h"
#include "headcount/tensor.h"

namespace headcount::train {

struct AttentionBlockShape {
  std::int64_t batch = 0, seq_len = 0, d_model = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 0;
  bool causal = true;
  // > 0: rotary positions (layers/rotary.h) turn Q and K after the projection, each sequence
  // from position 0; the backward turns dQ and dK back by the transpose. 0: none.
  float rope_base = 0;
  Kernel kernel = Kernel::streaming;
  // Empty, or one entry per batch element: keys at positions >= key_lengths[b] are padding
  // (the kernels' key mask). Padded query rows still get outputs; the caller ignores them.
  std::span<const std::int64_t> key_lengths;

  std::int64_t rows() const { return batch * seq_len; }
  std::int64_t qkv_width() const { return (heads + 2 * kv_heads) * head_dim; }
  std::int64_t concat_width() const { return heads * head_dim; }
};

struct AttentionBlockWeights {
  const float* w_qkv = nullptr;  // [d_model, qkv_width]
  const float* b_qkv = nullptr;  // [qkv_width]
  const float* w_o = nullptr;    // [concat_width, d_model]
  const float* b_o = nullptr;    // [d_model]
};

// What the forward keeps for the backward (all owned by the caller).
struct AttentionBlockSaved {
  float* qkv = nullptr;     // [rows, qkv_width]
  float* concat = nullptr;  // [rows, concat_width], before the gates
  float* gated = nullptr;   // [rows, concat_width], after them (may equal concat: no gates)
  float* lse = nullptr;     // [batch, heads, seq_len]
};

// gates: [heads] or null (all ones: then saved.gated must equal saved.concat). probs: empty,
// or [batch, heads, T, T] f32 to receive the probabilities (runs the reference kernel).
void attention_block_forward(Context& ctx, const AttentionBlockShape& shape,
                             const AttentionBlockWeights& w, const float* x, const float* gates,
                             const AttentionBlockSaved& saved, float* y,
                             const TensorView& probs = {});

struct AttentionBlockGrads {
  float* w_qkv = nullptr;
  float* b_qkv = nullptr;
  float* w_o = nullptr;
  float* b_o = nullptr;
  double* gates = nullptr;  // [heads], dL/dgate, overwritten
  // [batch, heads] or null: dL/dgate of each sequence's rows alone (the per-example gradients
  // Michel et al. take |.| of), overwritten; each is summed in the order `gates` sums them.
  double* sequence_gates = nullptr;
};

struct AttentionBlockBackward {
  const float* x = nullptr;  // the forward's input [rows, d_model]
  const float* gates = nullptr;
  AttentionBlockSaved saved;
  const float* dy = nullptr;  // [rows, d_model]
  float* dx = nullptr;  // [rows, d_model]; may alias dy (dy is fully read before dx is written)
  bool accumulate_dx = false;
  float* d_qkv = nullptr;     // scratch [rows, qkv_width]
  float* d_concat = nullptr;  // scratch [rows, concat_width]
  float* d_split = nullptr;   // scratch [rows · qkv_width]: dq, dk, dv as three blocks
};
void attention_block_backward(Context& ctx, const AttentionBlockShape& shape,
                              const AttentionBlockWeights& w, const AttentionBlockBackward& args,
                              const AttentionBlockGrads& grads);

}  // namespace headcount::train
