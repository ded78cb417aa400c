// Where each head of a TRAINED model looks: for every layer and head, the attention entropy
// and the fraction of attention on each named relation (a fixed offset, the previous
// occurrence of the query's token, the token after it, the arc's head in esp ...), averaged
// over the scored query positions of the task's validation batches. The probabilities come
// from Model::forward(keep_probs) + Model::probs (the reference kernel's P).
//
//   for each validation row b, scored query position t (target != kIgnore), head h:
//     entropy(b, h, t)     = -sum_{s <= t} P[b, h, t, s] ln P[b, h, t, s]     (nats)
//     fraction_r(b, h, t)  = sum_{s in positions_r(b, t)} P[b, h, t, s]
//   reported: the means over (b, t) of both; a relation whose position set is empty at (b, t)
//   leaves that (b, t) out of its own mean (and says how many it counted).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "headcount/context.h"
#include "headcount/train/model.h"
#include "headcount/train/task.h"
#include "nlohmann/json_fwd.hpp"

namespace headcount::train {

// A relation: the key positions (each <= t, distinct) that query position t of row `row`
// relates to.
struct Relation {
  std::string name;
  std::function<std::vector<std::int64_t>(const Batch& batch, std::int64_t row, std::int64_t t)>
      positions;
};

// s = t - a (empty when t < a).
Relation offset_relation(std::int64_t a);
// s = j + shift for the last j < t with x_j = x_t (empty when there is none); shift 0 is
// "previous occurrence", shift 1 "after previous occurrence".
Relation previous_occurrence_relation(std::int64_t shift);
// Every s <= t whose token is the target of t ("target token"): esp's arc head.
Relation target_token_relation();
// Every s < t whose token is neither the target of t nor x_t ("other token"): esp's arc tail.
Relation other_token_relation();

struct HeadLook {
  std::int64_t layer = 0, head = 0;
  double entropy = 0;                 // nats, mean over scored query positions
  std::vector<double> fractions;      // per relation, in the order given
  std::vector<std::int64_t> counted;  // query positions each fraction averaged over
};

struct HeadProbeResult {
  std::vector<std::string> relations;
  std::vector<HeadLook> heads;  // layer-major, then head
  std::int64_t queries = 0;     // scored query positions seen
};

// Runs the validation batches (at most max_batches of `batch` rows; 0: all) through `model`
// with keep_probs and accumulates the means above in double.
HeadProbeResult probe_heads(Context& ctx, Model& model, const Task& task,
                            const std::vector<Relation>& relations, std::int64_t batch,
                            std::int64_t max_batches = 0);
// The same, from a probabilities tensor [B, heads, T, T] already at hand (one layer), for
// callers and tests that build P themselves. Accumulates into `sums` (per head: entropy sum,
// then per relation sum and count) so batches can be added up.
void accumulate_head_probe(const Tensor& probs, const Batch& batch,
                           const std::vector<Relation>& relations, std::vector<double>& sums,
                           std::vector<std::int64_t>& counts, std::int64_t& queries);

nlohmann::json to_json(const HeadProbeResult& result);

}  // namespace headcount::train
