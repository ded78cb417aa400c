// The packed GEMM's task split (packed_gemm.cpp), in its own header so that its
// bookkeeping (every row and panel exactly once, one contiguous group per worker) is tested
// on its own (tests/test_packed_gemm.cpp) rather than only through the GEMM's results, which
// no split changes.
#pragma once

#include <algorithm>
#include <cstdint>

#include "headcount/context.h"
#include "simd/tuning.h"

namespace headcount::layers {

// How a call's rows and panels become tasks. Few rows (one block of gemm_task_rows(), or
// fewer blocks than workers): blocks x panels, panel-major (consecutive tasks share a panel,
// which a task at batch 1 streams from memory), handed out dynamically. More rows: the rows
// are cut into one group per worker, each group into blocks, and a task is (block, panel),
// ordered group-major and panel-major within a group; parallel_for_ranges then gives group w
// to worker w, so each core multiplies the rows it normalised (LayerNorm) or attended (the
// attention's batch-major tasks) a moment ago, and writes y rows the next step reads there.
// With the rows spread over all workers a row's x and y lines moved between the cores' L2s on
// every step. On the Intel host (2 cores, 2 MiB L2 each), `build/gemm_stream 1 M 2 15 fp32`'s
// "alone" lines, old and new binaries alternating twice: qkv / o / up at m 448 298-303 ->
// 313-320 GFLOP/s, at m 640 300-308 -> 313-327; down (k 1536, 4x the work per y line) 321-324
// both. No split changes a result (packed_gemm.h).
struct TaskGrid {
  std::int64_t m = 0, panels = 0, row_blocks = 0, block = 0, blocks_per_group = 0;
  bool grouped = false;

  TaskGrid(std::int64_t rows, std::int64_t panel_count, int threads)
      : m(rows), panels(panel_count) {
    const std::int64_t natural = (rows + tuning::gemm_task_rows() - 1) / tuning::gemm_task_rows();
    grouped = threads > 1 && natural >= threads;
    if (!grouped) {
      row_blocks = blocks_per_group = natural;
      block = tuning::gemm_task_rows();
      return;
    }
    row_blocks = (natural + threads - 1) / threads * threads;
    blocks_per_group = row_blocks / threads;
    // Equal blocks, rounded up to whole register tiles (6 rows on every ISA) unless that would
    // leave the last block empty (many threads): then a ragged last tile per block instead.
    constexpr std::int64_t kTileRows = 6;
    block = (rows + row_blocks - 1) / row_blocks;
    const std::int64_t whole_tiles = (block + kTileRows - 1) / kTileRows * kTileRows;
    if (whole_tiles * (row_blocks - 1) < rows) block = whole_tiles;
  }
  std::int64_t tasks() const { return row_blocks * panels; }
  // Task t's panel and row block.
  std::int64_t panel(std::int64_t t) const {
    return grouped ? t % (blocks_per_group * panels) / blocks_per_group : t / row_blocks;
  }
  std::int64_t row_block(std::int64_t t) const {
    return grouped ? t / (blocks_per_group * panels) * blocks_per_group + t % blocks_per_group
                   : t % row_blocks;
  }
  std::int64_t first_row(std::int64_t rb) const { return std::min(m, rb * block); }
  std::int64_t rows(std::int64_t rb) const { return std::min(m, (rb + 1) * block) - first_row(rb); }
  void run(Context& ctx, std::int64_t count, FunctionRef<void(std::int64_t, int)> fn) const {
    if (grouped)
      ctx.parallel_for_ranges(count, fn);
    else
      ctx.parallel_for(count, fn);
  }
};

}  // namespace headcount::layers
