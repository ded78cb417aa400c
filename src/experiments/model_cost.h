// The cost model (include/headcount/cost.h) summed over a whole trainable model at a run's
// shape: what one training step of a config multiplies, from shapes alone.
//
//   forward_macs = layers × (attention block + feed-forward)   [cost.h's rows: Q/K/V/O
//                  projections, the full n × n score grid and the weighted sum, both FFN matrices;
//                  attention-only models count the attention block only]
//                + LM head  batch × seq_len × d_model × vocab
//   embeddings are lookups (0 multiply-adds); biases, LayerNorm, softmax, GELU, the loss and the
//   optimizer are O(width) per token and left out, as cost.h leaves them out. The causal mask
//   is not used to halve the score grid (cost.h counts every score the reference path forms).
//   train_macs   = 3 × forward_macs: the backward of every product Y = X·W is two products of
//                  the same size (dX = dY·Wᵀ, dW = Xᵀ·dY); the streaming backward's recomputation
//                  of the scores from the log-sum-exp is not counted.
#pragma once

#include <cstdint>

#include "headcount/train/model.h"
#include "nlohmann/json.hpp"

namespace headcount::experiments {

struct ModelCost {
  std::int64_t attention_macs = 0;  // all layers' attention blocks
  std::int64_t ffn_macs = 0;        // all layers' feed-forward blocks
  std::int64_t head_macs = 0;       // the LM head
  std::int64_t forward_macs = 0;    // the sum
  std::int64_t train_macs = 0;      // 3 × forward_macs
  std::int64_t weights =
      0;  // the cost model's weights: layers' matrices + embeddings + head matrix
  std::int64_t kv_cache_bytes_per_token = 0;  // f32 K and V of every layer for one token
};

// `model` resolved (Trainer::config().model); one step = `batch` sequences of `seq_len`.
ModelCost model_cost(const train::ModelConfig& model, std::int64_t batch, std::int64_t seq_len);
nlohmann::json to_json(const ModelCost& cost);

}  // namespace headcount::experiments
