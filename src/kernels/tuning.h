// Every tuning constant of the kernels, in one place, each with the reason for its value.
#pragma once

#include <cstdint>

namespace headcount::tuning {

// Queries per streaming tile. 64 rows x 64 keys of fp32 scores = 16 KiB: with a head_dim
// 128 query tile (32 KiB) and one K/V tile (2 x 32 KiB) it stays inside a 1 MiB L2.
// Worked example: n = 4096, 8 heads, batch 1 → 4096/64 * 8 = 512 independent tasks,
// plenty to balance two or sixty-four workers.
constexpr std::int64_t streaming_query_tile() { return 64; }

// Keys per streaming tile; see streaming_query_tile() for the memory budget.
constexpr std::int64_t streaming_key_tile() { return 64; }

// Score entries one worker of the streaming kernel holds at once.
constexpr std::int64_t streaming_tile_entries() {
  return streaming_query_tile() * streaming_key_tile();
}

}  // namespace headcount::tuning
