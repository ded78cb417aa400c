// Multi-head to grouped-query attention by mean-pooling (Ainslie et al. 2023, "GQA"): a
// trained model's kv_heads K and V heads are averaged within contiguous groups of
// kv_heads / G into G heads. Query head i of the new model reads group i / (heads / G), which
// is the mean of the old K/V heads that served query heads [i - i % (heads / G), ...): the
// grouping keeps each query head with the K/V heads it was trained beside.
//   new K_g columns = (1 / r) sum_{k < r} old K_{g r + k} columns   (r = old kv_heads / G)
//   new V_g likewise, and the same for the K/V entries of b_qkv; every other tensor is copied.
// The mean is accumulated in double and rounded once, so r identical heads pool to exactly
// that head and G = old kv_heads copies every bit.
#pragma once

#include <cstdint>

#include "headcount/train/model.h"

namespace headcount::train {

// Throws Error ("kv_heads: expected a divisor of <old kv_heads>, got G") unless G divides the
// model's kv_heads. The new model's buffers are its own (Model is not copyable).
Model convert_kv_heads(const Model& model, std::int64_t kv_heads);

// Copies every parameter value of `from` into `to` (same names and shapes, else Error).
void copy_parameters(const Model& from, Model& to);

}  // namespace headcount::train
