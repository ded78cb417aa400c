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

}  // namespace headcount::tuning
