// Inputs for a case of the table, and the tests' own independent implementations of
// attention: a float64 one (the oracle of the oracle) and a plain float32 one (to measure
// the rounding error a straightforward fp32 implementation makes on the same inputs).
// Both test each mask per element from its definition, sharing nothing with the kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "case_table.h"
#include "headcount/attention.h"

namespace headcount::testing {

struct AttentionInputs {
  AttentionCase c;
  Tensor q_storage, k_storage, v_storage, bias_storage;
  TensorView q, k, v, bias;
  std::vector<std::int64_t> key_lengths;

  // Params with every mask of the case; out [B, q_len, H, Dv] and lse [B, H, q_len].
  AttentionParams params(const Tensor& out, const Tensor& lse) const;
};

AttentionInputs make_inputs(const AttentionCase& c, std::uint64_t seed);

struct NaiveResult {
  std::vector<double> out;  // [B, q_len, H, Dv]
  std::vector<double> lse;  // [B, H, q_len]
};

NaiveResult naive_attention_f64(const AttentionInputs& in);
// The float64 softmax probabilities [B, H, q_len, kv_len] (0 for hidden keys).
std::vector<double> naive_probs_f64(const AttentionInputs& in);
// Rounds the f32 values of `storage` to bf16 in place (so float oracles see the bf16 values) and
// returns a bf16 view of `view` (same shape and strides) into `copy`, which it fills.
TensorView round_to_bf16(const TensorView& view, Tensor& storage, Tensor& copy);
// q, k and v of `in` rounded to bf16 in place (the float oracles then see the bf16 values), with
// bf16 views of the same strides for the kernels; a fused K/V layout (k and v in one buffer)
// keeps its sharing.
struct Bf16Inputs {
  Tensor q16, k16, v16;
  TensorView q, k, v;
};
Bf16Inputs round_inputs_to_bf16(AttentionInputs& in);
// The masks straight from their definitions in attention.h (bias aside).
bool key_visible(const AttentionInputs& in, std::int64_t b, std::int64_t i, std::int64_t j);
NaiveResult naive_attention_f32(const AttentionInputs& in);  // every operation in float

}  // namespace headcount::testing
