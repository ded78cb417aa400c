// The attention backward: gradients of a scalar loss L with respect to q, k, v (and the
// additive bias) given dO = dL/d(out), for the same params the forward took.
//
// FlashAttention-2's algorithm (Dao 2023, Algorithm 2), exact, no n^2 storage on the
// streaming path:
//   D_i  = sum_c dO_ic * O_ic                      (one number per query row)
//   P_ij = exp(scale * q_i.k_j + bias_ij - lse_i)  (recomputed tile by tile from the lse)
//   dV_j += sum_i P_ij dO_i
//   dP_ij = dO_i . v_j
//   dS_ij = P_ij (dP_ij - D_i)
//   dQ_i += scale * sum_j dS_ij k_j
//   dK_j += scale * sum_i dS_ij q_i
//   dbias_ij = dS_ij (summed over broadcast dimensions of the bias)
// Grouped- and multi-query attention: dK/dV of a kv head are the sums over every query head
// of its group. Masked keys get P = 0, so a fully masked row gives zero gradients.
//
// Inputs: params.q, k, v, mask options and bias as in the forward; params.out and
// params.lse hold the forward's results (read, not written; the streaming kernel needs
// them, the reference recomputes both). params.probs is not used. A row whose lse is -inf
// (it saw no key) gets zero gradients. Gradients must not share memory with any input or
// with each other (an Error otherwise).
#pragma once

#include "headcount/attention.h"

namespace headcount {

struct AttentionGrads {
  TensorView d_out;   // f32 [batch, q_len, heads, v_head_dim], read
  TensorView d_q;     // f32 [batch, q_len, heads, head_dim], written
  TensorView d_k;     // f32 [batch, kv_len, kv_heads, head_dim], written
  TensorView d_v;     // f32 [batch, kv_len, kv_heads, v_head_dim], written
  TensorView d_bias;  // optional f32, the shape of params.bias, written; empty: not computed
};

// What a backward call did, counted by the kernel (the cost model's checks).
struct AttentionBackwardStats {
  std::int64_t macs = 0;                // multiply-adds of the five products
  std::int64_t peak_score_entries = 0;  // score values that existed at once (S and dP tiles)
};

// Checks grads against params (which validate() checks); throws Error naming the field.
void validate_backward(const AttentionParams& params, const AttentionGrads& grads);

// The oracle: plain passes, double accumulation, the whole P of each head materialised.
// params.out and params.lse may be empty; when given they are validated but not read: the
// oracle always recomputes them in double, so its gradients are those of the exact function.
AttentionBackwardStats attention_backward_reference(Context& ctx, const AttentionParams& params,
                                                    const AttentionGrads& grads);

// Tiled, FlashAttention-2 style; needs params.out and params.lse from a forward call.
// Parallel over (batch, kv head, chunk of key tiles): each task owns its dK/dV rows and a
// dQ partial (summed in a fixed order), so nothing needs atomics and results are bitwise
// the same for any thread count. Extra memory: the dQ partials (one |dQ| when batch x
// kv_heads >= 8, more chunks' worth below that) and ~0.6 MiB of scratch per worker.
AttentionBackwardStats attention_backward_streaming(Context& ctx, const AttentionParams& params,
                                                    const AttentionGrads& grads);

AttentionBackwardStats attention_backward(Context& ctx, Kernel kernel,
                                          const AttentionParams& params,
                                          const AttentionGrads& grads);

}  // namespace headcount
