// Measures of a model's attention that experiments attach to their runs as hooks, all read
// from Model::probs after one forward with ForwardOptions::keep_probs (probabilities
// [B, heads, T, T] per layer; causal rows are zero above the diagonal).
//
// attention_stats: over every layer, head and query row t of the batch with at least two keys
//   logit_std  = the standard deviation of the row's scores over its keys. softmax removes one
//                constant per row, so log p_tj = s_tj - lse_t differs from the scores by the row's
//                constant and their standard deviation over j is the scores' own: it is computed
//                from log p, and is the row-centred score spread (at initialisation the rows'
//                means are ~0, so it is also the spread of the raw scores).
//   entropy    = -Σ_j p_tj log p_tj (nats), and uniform_entropy = log(keys of the row), its
//                maximum, averaged over the same rows.
//   Rows with a zero probability among their keys (underflow) are left out and counted.
// attention_maps: the probabilities of a few heads of given layers for one sequence, cropped to
//   the first `positions` queries and keys, rounded to 4 decimals (the page draws them).
#pragma once

#include <cstdint>
#include <vector>

#include "headcount/context.h"
#include "headcount/train/model.h"
#include "headcount/train/task.h"
#include "nlohmann/json.hpp"

namespace headcount::experiments {

struct AttentionStats {
  double logit_std = 0;           // mean over rows of the row's score standard deviation
  double entropy = 0;             // mean over rows, nats
  double uniform_entropy = 0;     // mean over rows of log(keys)
  std::int64_t rows = 0;          // rows measured
  std::int64_t skipped_rows = 0;  // rows with an underflowed probability
};
AttentionStats attention_stats(Context& ctx, train::Model& model, const train::Batch& batch);
nlohmann::json to_json(const AttentionStats& stats);

// {"sequence": index, "positions": P, "maps": [{"layer", "head", "values": [P*P]}]}: for each
// layer in `layers` (negative: from the end, -1 = last), heads [0, min(heads, max_heads)).
nlohmann::json attention_maps(Context& ctx, train::Model& model, const train::Batch& sequence,
                              const std::vector<std::int64_t>& layers, std::int64_t max_heads,
                              std::int64_t positions);

// The first sequence of validation batch 0, alone (the maps' input).
train::Batch first_validation_sequence(const train::Task& task);

}  // namespace headcount::experiments
