// The cost model: weights, multiply-adds, activation bytes and score memory of one
// transformer layer (multi-head attention + feed-forward), counted from shapes alone.
//
// Shapes use the kernels' vocabulary: batch B, seq_len n (queries), kv_len m (keys),
// heads H, kv_heads Hkv, head_dim Dk, v_head_dim Dv, d_model d, d_ff. Self-attention:
// queries, keys and values are all projected from the d_model-wide stream.
//
//   stage          weights      multiply-adds     activation (output) elements
//   Q projection   d*H*Dk       B*n*d*H*Dk        B*n*H*Dk
//   K projection   d*Hkv*Dk     B*m*d*Hkv*Dk      B*m*Hkv*Dk
//   V projection   d*Hkv*Dv     B*m*d*Hkv*Dv      B*m*Hkv*Dv
//   scores         -            B*H*n*m*Dk        B*H*n*m  (the reference path's full grid)
//   weighted sum   -            B*H*n*m*Dv        B*n*H*Dv (the concatenated heads)
//   O projection   H*Dv*d       B*n*H*Dv*d        B*n*d
//   feed-forward   2*d*d_ff     2*B*n*d*d_ff      B*n*d_ff (the hidden layer)
// Activation bytes = elements * dtype bytes (f32: 4, bf16: 2). Biases are not counted:
// they are O(width) next to the O(width^2) matrices, and the reference tables leave them out.
//
// With Dk = d/H the head count cancels from every weight and multiply-add count; what it
// does change is how many scores exist at once: B*H*n*m on the reference path, against
// threads * tuning::streaming_tile_entries(group) on the streaming path.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "headcount/tensor.h"

namespace headcount {

struct CostConfig {
  std::int64_t d_model = 0;     // required, >= 1
  std::int64_t heads = 0;       // required, >= 1
  std::int64_t kv_heads = 0;    // 0: = heads; must divide heads
  std::int64_t head_dim = 0;    // 0: = d_model / heads (heads must divide d_model)
  std::int64_t v_head_dim = 0;  // 0: = head_dim
  std::int64_t seq_len = 1;     // queries per sequence
  std::int64_t kv_len = 0;      // 0: = seq_len
  std::int64_t batch = 1;       // sequences
  std::int64_t d_ff = 0;        // 0: = 4 * d_model
  DType dtype = DType::f32;     // f32 or bf16
  int threads = 1;              // streaming workers, each holding one score tile
  // KV-cache section (decoding): positions cached per sequence, 0 for no section; and the
  // model's layers. Bytes = layers * batch * context * cache_token_bytes(...) (decode.h).
  std::int64_t context = 0;
  std::int64_t layers = 1;
};

// Validates a config and fills in the defaults; throws Error naming the field.
CostConfig resolve(const CostConfig& config);

// One row of the cost table. Score entries are nonzero only where scores are formed.
struct StageCost {
  std::string stage;
  std::int64_t weights = 0;                  // parameters, biases excluded
  std::int64_t macs = 0;                     // multiply-adds
  std::int64_t activation_bytes = 0;         // the output tensor of the stage
  std::int64_t reference_score_entries = 0;  // scores alive at once, reference kernel
  std::int64_t streaming_score_entries = 0;  // scores alive at once, streaming kernel
};

// KV-cache bytes of a whole model and context for one head layout, in every cache dtype.
// Exactly KvCache::bytes() of KvCache{layers, batch, kv_heads, head_dim, v_head_dim,
// capacity = context, dtype}.
struct KvCacheLayoutCost {
  std::string layout;  // "MHA" (kv_heads = heads), "GQA", "MQA" (kv_heads = 1)
  std::int64_t kv_heads = 0;
  bool configured = false;                                     // the config's own kv_heads
  std::int64_t f32_bytes = 0, bf16_bytes = 0, int8_bytes = 0;  // int8 includes its scales
};

struct CostReport {
  CostConfig config;  // resolved
  // In order: "Q projection", "K projection", "V projection", "scores", "weighted sum",
  // "O projection", "attention block", "feed-forward", "layer". The two total rows sum
  // weights, macs and activation bytes, and take the largest score-entry count (a peak).
  std::vector<StageCost> stages;
  std::int64_t kv_cache_bytes_per_token = 0;  // one layer's K and V for one token
  std::int64_t kv_cache_bytes = 0;            // ... for batch * kv_len tokens
  std::int64_t total_parameters = 0;          // the layer's weights
  // The four projections together (Q, K, V, O): the seeds' "4 x n x d^2" figure
  // (d_model 512, seq_len 1000: 4 * 1,000 * 512 * 512 = 1,048,576,000 multiply-adds),
  // whatever the head count. Score entries are 0: projections form no scores.
  StageCost projections;
  // When config.context > 0: MHA, GQA and MQA side by side. GQA is the configured kv_heads
  // when 1 < kv_heads < heads, else the largest divisor of heads in (1, max(2, heads/4)]
  // (32 heads -> 8), absent when heads has none (heads 1, 2, 3).
  std::vector<KvCacheLayoutCost> kv_cache_layouts;

  // The row named `name`; throws Error if there is none.
  const StageCost& stage(std::string_view name) const;
};

// Resolves `config` and counts every stage. Throws Error on a bad config, or if a count
// would not fit in 64 bits.
CostReport estimate_cost(const CostConfig& config);

// Communication of one attention layer split over `ranks` MPI ranks (distributed.h), per
// rank, in payload bytes (what the rank hands to MPI; f32, as the distributed code sends):
//   heads over ranks (the layer):  one all-reduce of the output, B*n*d floats:
//                                    allreduce_bytes = 4*B*n*d; a ring all-reduce
//                                    (reduce-scatter + all-gather) puts 2*(P-1)/P of it on
//                                    the wire from each rank: allreduce_wire_bytes
//   heads over ranks (the core, gathered on rank 0): each other rank sends its heads' out
//                                    and lse: gather_bytes = 4*B*n*(H/P)*(Dv+1)
//   sequence over ranks (ring):    P-1 steps, each sending this rank's K/V block of
//                                    B*(n/P)*Hkv*(Dk+Dv) floats: ring_bytes (the same
//                                    received); ring_bytes_per_step, its step
//   ring backward:                 P-1 K/V blocks on, then P blocks of dK/dV (the same
//                                    size) following them and home: ring_backward_bytes
//   heads over ranks, a whole block (encoder or training; the FFN split too, so P must also
//                                    divide d_ff: block_possible): the forward all-reduces
//                                    the attention's and the FFN's partial outputs,
//                                    block_forward_bytes = 2*4*B*n*d; a training step also the
//                                    backward's two partial input gradients,
//                                    block_train_step_bytes = 4*4*B*n*d; both 0 for one rank
//                                    (nothing to sum). A training step adds 8 bytes (the
//                                    clipping norm's double) for the whole model.
// P must divide kv_heads (heads) and 2P divide seq_len (ring), as the splits require;
// otherwise the split's term is 0 and its `*_possible` flag false.
struct CommunicationCost {
  int ranks = 1;
  bool heads_possible = false, ring_possible = false;
  std::int64_t allreduce_bytes = 0, allreduce_wire_bytes = 0, gather_bytes = 0;
  std::int64_t ring_bytes = 0, ring_bytes_per_step = 0, ring_backward_bytes = 0;
  bool block_possible = false;
  std::int64_t block_forward_bytes = 0, block_train_step_bytes = 0;
};
CommunicationCost communication_cost(const CostConfig& config, int ranks);

// A table for people: the resolved configuration, one row per stage with thousands
// separators, the KV-cache size and a note on reference vs streaming score memory.
std::string format_cost_table(const CostReport& report);

// The same figures as a JSON object: {"config": {...}, "stages": [{"stage", "weights",
// "macs", "activation_bytes", "reference_score_entries", "streaming_score_entries"}],
// "kv_cache_bytes_per_token", "kv_cache_bytes", "total_parameters",
// "streaming_tile_entries"}.
std::string cost_to_json(const CostReport& report, int indent = 2);

}  // namespace headcount
