// What each attention row looks at, summarised without storing the row: the measures of
// Clark et al. 2019, "What Does BERT Look At? An Analysis of BERT's Attention" (BlackboxNLP),
// per (batch, head, query row).
//
// Two paths give the same numbers:
//   attention_row_stats           a second pass over the keys that reuses the log-sum-exp the
//                                 streaming kernel wrote: p_ij = exp(t_ij - lse_i) with
//                                 t_ij = scale * q_i.k_j + bias_ij. Scratch: head_dim floats
//                                 per worker; the output is O(batch * heads * q_len).
//   attention_row_stats_from_probs  reduces probabilities the reference kernel materialised
//                                 ([batch, heads, q_len, kv_len], the h*n^2 grid).
//
// Fields of one row (RowStatsField, then the offsets, then the key classes):
//   mass       sum_j p_ij: 1 for a row that sees a key, 0 for one that sees none (a check)
//   entropy    -sum_j p_ij ln p_ij, in nats
//   visible    number of keys the masks let the row see; ln(visible) is the entropy of the
//              uniform row, the "broad attention" baseline
//   distance   sum_j p_ij |j - (i + kv_len - q_len)|: mean attention distance, in tokens
//   offset o   p_i,(i + kv_len - q_len + o): attention to a fixed relative position
//              (o = -1: previous token, 0: itself, +1: next token)
//   class c    sum of p_ij over keys j whose key_classes[b, j] has bit c set (for example
//              [CLS], [SEP], punctuation)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "headcount/attention.h"
#include "headcount/context.h"
#include "headcount/tensor.h"

namespace headcount {

enum RowStatsField : std::int64_t {
  kRowMass = 0,
  kRowEntropy,
  kRowVisible,
  kRowDistance,
  kRowFixedFields
};

struct RowStatsSpec {
  std::vector<std::int64_t> offsets;          // relative key positions, each reported as a mass
  std::span<const std::uint8_t> key_classes;  // [batch, kv_len] bit sets, row-major; or empty
  int classes = 0;  // class bits in use, 0..8 (0 when key_classes is empty)

  std::int64_t fields() const {
    return kRowFixedFields + static_cast<std::int64_t>(offsets.size()) + classes;
  }
  std::int64_t offset_field(std::size_t index) const {
    return kRowFixedFields + static_cast<std::int64_t>(index);
  }
  std::int64_t class_field(int bit) const {
    return kRowFixedFields + static_cast<std::int64_t>(offsets.size()) + bit;
  }
};

// The second pass. `params` are those of an attention call that already ran with params.lse
// set (any kernel; the layer's observe hook hands them over), so q, k, the masks, the bias and
// lse are read; v and out are not. out: contiguous f64 [batch, heads, q_len, spec.fields()].
// Throws Error naming the field for an lse missing or of the wrong shape, a bad spec or out.
void attention_row_stats(Context& ctx, const AttentionParams& params, const RowStatsSpec& spec,
                         const TensorView& out);

// The same fields from materialised probabilities: probs f32 or f64 [batch, heads, q_len,
// kv_len] as attention_reference writes them (ProbsMode::per_head) for `params`. The masks in
// `params` give `visible`.
void attention_row_stats_from_probs(const AttentionParams& params, const TensorView& probs,
                                    const RowStatsSpec& spec, const TensorView& out);

}  // namespace headcount
