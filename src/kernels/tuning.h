// Every tuning constant of the kernels, in one place, each with the reason for its value.
#pragma once

#include <algorithm>
#include <cstdint>

namespace headcount::tuning {

// Score rows one streaming task works on: the query positions of one tile times the query
// heads of one head group, which share every K/V tile (K and V are packed once per group).
// 128 rows x 128 keys of fp32 scores = 64 KiB, and with head_dim 64 the packed Q, K^T, V
// and the accumulator add 4 x 32 KiB: about 200 KiB per worker, inside a 1 MiB L2.
constexpr std::int64_t streaming_rows() { return 128; }

// Query positions per streaming task for a head group of `group` query heads.
// Worked example: multi-head (group 1) → 128 positions; 32 heads over 4 kv heads
// (group 8) → 16 positions x 8 heads. n = 4096, 8 heads, batch 1 → 32 x 8 = 256 tasks.
constexpr std::int64_t streaming_query_tile(std::int64_t group) {
  return std::max<std::int64_t>(1, streaming_rows() / std::max<std::int64_t>(1, group));
}

// Keys per streaming tile: long enough that the per-tile work (rescaling the accumulator,
// masking the diagonal tile) is 1/128 of the multiply-adds, short enough for L2.
constexpr std::int64_t streaming_key_tile() { return 96; }

// Score entries one worker of the streaming kernel holds at once (a tile is never taller
// than the queries there are).
constexpr std::int64_t streaming_tile_entries(std::int64_t group, std::int64_t q_len) {
  return std::min(streaming_query_tile(group), std::max<std::int64_t>(1, q_len)) *
         std::max<std::int64_t>(1, group) * streaming_key_tile();
}

// ---- the streaming backward (backward_streaming.cpp) ---------------------------------------

// Score rows of one backward block: query positions times the heads of one group, like the
// forward. Per worker at head_dim 64 the block's S^T and dP^T (64 keys x 64 rows, 16 KiB
// each), the packed Q, Q^T, dO, dO^T (4 x 16 KiB) and the dK, dV accumulators of the key
// tile (2 x 16 KiB) come to ~130 KiB: inside a 1 MiB L2 with the K/V tile.
constexpr std::int64_t backward_rows() { return 64; }

// Query positions per backward block for a group of `group` query heads.
// Worked example: multi-head → 64 positions; group 8 → 8 positions x 8 heads.
constexpr std::int64_t backward_query_tile(std::int64_t group) {
  return std::max<std::int64_t>(1, backward_rows() / std::max<std::int64_t>(1, group));
}

// Keys per backward tile: the dK/dV accumulators of a tile stay in L1/L2 while every query
// block passes over it; 64 keys make the per-block packing of Q and dO (rows x 2(d + dv)
// copies) ~1% of the block's rows x 64 x (3d + 2dv) multiply-adds.
constexpr std::int64_t backward_key_tile() { return 64; }

// Fewest tasks a backward call is split into when the (batch, kv head) pairs are fewer:
// keys are then dealt out in this many interleaved chunks (a function of the shape only, so
// results do not depend on the thread count). 8 keeps 2-4 workers busy; each chunk past the
// first costs one more fp32 partial of dQ. Worked example: batch 1, 8 kv heads → 1 chunk;
// batch 1, one kv head (MQA) → 8 chunks, 8 dQ partials.
constexpr std::int64_t backward_min_tasks() { return 8; }

}  // namespace headcount::tuning
