// The tests' own attention backward, sharing no code with the kernels: for every (batch,
// head, query) it recomputes the softmax row from its definition (masks tested per element
// by key_visible), then applies the chain rule of out = softmax(scale·q·kᵀ + bias)·v to
// the loss L = sum(out ∘ dO). Written once as a template: in double it is the oracle; in
// float (every operation in fp32, plain sequential sums) it measures the error a
// straightforward fp32 implementation makes on the same inputs, from which the kernels'
// tolerances are derived.
#pragma once

#include <cstdint>
#include <vector>

#include "attention_inputs.h"

namespace headcount::testing {

struct NaiveGrads {
  std::vector<double> d_q;     // [B, q_len, H, D]
  std::vector<double> d_k;     // [B, kv_len, G, D]
  std::vector<double> d_v;     // [B, kv_len, G, Dv]
  std::vector<double> d_bias;  // the bias's shape, or empty
  // The condition of each gradient element: the same sums over the absolute values of
  // their terms (|dS| taken as P·(|dO|·|v| + |dO|·|O|), its two parts before they cancel).
  // An fp32 evaluation of any order errs by a small multiple of u times this.
  std::vector<double> cond_q, cond_k, cond_v, cond_bias;
};

// d_out: f32 [B, q_len, H, Dv] (any strides).
NaiveGrads naive_backward_f64(const AttentionInputs& in, const TensorView& d_out);
NaiveGrads naive_backward_f32(const AttentionInputs& in, const TensorView& d_out);

// The loss sum(out ∘ dO) of the float64 forward, for finite differences.
double naive_loss_f64(const AttentionInputs& in, const TensorView& d_out);

}  // namespace headcount::testing
