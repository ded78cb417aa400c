// Every tuning constant of the kernels and the GEMM, in one place, each with the reason for its
// value. It lives in simd/, the lowest floor, because the micro-kernels read it too: the
// kernels, the layers and the cost model include it downwards.
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

// fp32 calls with at least this many keys copy each head's K and V into contiguous rows once
// per call (streaming.cpp: pack_head_rows says why). Shorter ones read K in place and copy V
// per tile: a head's rows then fit in cache whatever their stride, and the copy would add
// two parallel regions to calls (the encoder's, n ~ 30) that open ~50 regions a sentence.
// Measured (Intel Xeon, one thread, 8 x 64, build/attention_time, three alternating pairs each,
// with a temporary environment switch for this threshold, not committed):
// copying at n 256 cost 3% (1.09 against 1.11 ms fastest), at n 512 it gained 2% (4.17 against
// 4.27 ms), at n 768 6% (8.95-9.09 against 9.54-9.60 ms).
constexpr std::int64_t streaming_pack_heads_min_keys() { return 512; }

// The most bytes of packed K and V held at once: heads are packed and run in chunks of this
// size, and a call whose single head is larger reads K and V in place. Worked example: n 16384,
// head_dim 64 → 8 MiB a head, 2 heads a chunk; n 4096 → 2 MiB a head, 8 heads a chunk;
// n 65536 → 32 MiB a head: not copied.
constexpr std::int64_t streaming_pack_heads_budget_bytes() { return std::int64_t{16} << 20; }

// K/V rows one copy task moves (so that the copy of a chunk of few heads still uses every worker).
constexpr std::int64_t streaming_pack_heads_copy_rows() { return 512; }

// Score entries one worker of the streaming kernel holds at once (a tile is never taller
// than the queries there are).
constexpr std::int64_t streaming_tile_entries(std::int64_t group, std::int64_t q_len) {
  return std::min(streaming_query_tile(group), std::max<std::int64_t>(1, q_len)) *
         std::max<std::int64_t>(1, group) * streaming_key_tile();
}

// ---- the streaming backward (backward_streaming.cpp) ---------------------------------------

// Score rows of one backward block: query positions times the heads of one group, like the
// forward. 64 rows keep the packed Q, Q^T, dO, dO^T of a block at 4 x 16 KiB (head_dim 64).
constexpr std::int64_t backward_rows() { return 64; }

// Query positions per backward block for a group of `group` query heads.
// Worked example: multi-head → 64 positions; group 8 → 8 positions x 8 heads.
constexpr std::int64_t backward_query_tile(std::int64_t group) {
  return std::max<std::int64_t>(1, backward_rows() / std::max<std::int64_t>(1, group));
}

// Keys per backward tile. Every query block that sees a tile is packed again for it (Q, dO
// and their transposes: rows x 2(d + dv) copies), so the tile must be long for that to be
// small next to the block's rows x keys x (3d + 2dv) multiply-adds; a block computes only
// the columns its queries see, so a long tile costs nothing extra on a causal diagonal.
// Per worker at head_dim 64: S^T and dP^T 2 x 128 KiB, the dK and dV accumulators
// 2 x 128 KiB, the block 64 KiB: ~580 KiB, inside a 1 MiB L2. Measured (n 4096, 8 x 64, one
// thread, CPU time): 64 keys 44, 128: 61, 256: 71, 512: 87, 1024: 87 GFLOP/s.
constexpr std::int64_t backward_key_tile() { return 512; }

// Fewest tasks a backward call is split into when the (batch, kv head) pairs are fewer:
// keys are then dealt out in this many interleaved chunks (a function of the shape only, so
// results do not depend on the thread count), at most one per key tile. 8 keeps 2-4 workers
// busy; each chunk past the first costs one more fp32 partial of dQ. Worked example: batch
// 1, 8 kv heads → 1 chunk; batch 1, one kv head (MQA), n 4096 → 8 chunks (8 tiles of 512).
constexpr std::int64_t backward_min_tasks() { return 8; }

// ---- the packed GEMM of the encoder's projections (layers/packed_gemm.cpp) -----------------

// Columns of one packed weight panel: k rows of 64 floats, contiguous. 64 is one AVX-512
// register tile's width (4 vectors), four AVX2 tiles, eight SSE2 ones, so one layout serves
// every ISA. Worked example: W_qkv of MiniLM, [384, 1152] → 18 panels of 384 x 64 (96 KiB each).
constexpr std::int64_t gemm_panel_columns() { return 64; }

// Rows of x one GEMM task multiplies with one panel. A task reads its panel from memory once
// and keeps it in L2 (k = 1536: 384 KiB) while its row tiles pass over it; 96 rows (16 AVX-512
// tiles) amortise that read, and the tasks of a batch of 32 sentences (~600 rows) x 6-24
// panels keep 2-4 workers busy. Worked example: 15 rows (one sentence) x W_o (6 panels) → 6
// tasks; 640 rows x W_up (24 panels) → 7 x 24 = 168 tasks. The split never changes a result.
constexpr std::int64_t gemm_task_rows() { return 96; }

// Depth of one pass of the packed GEMM's register tiles over a panel. Partial sums go through
// y in fp32, exactly, so this changes speed, never a result. Without depth blocks a task's
// 384 KiB panel of FFN down (k = 1536) and its 96 x 1536 rows of x (576 KiB) overflowed a
// 1 MiB L2 (AMD) and the GEMM ran at a third of its rate at batch 32. Blocks of 128 (a 32 KiB
// panel block, meant to stay in L1) cured that, but every block reloads and stores each tile's
// 24 partial-sum vectors. At 768 the MiniLM projections of k = 384 run in one block and FFN
// down in two, with 192 KiB of panel and 288 KiB of x per block: half of a 1 MiB L2.
// Measured on the Intel host (2 MiB L2), one thread, m = 448: `bench/gemm_depth_ab.sh 128 448
// 40` (768 against 128 in one process; the 64-row task runs the small tasks' 128 on both
// sides) time ratio 0.97-0.98 for the four projections (qkv 1.03-1.04, o 0.99-1.01, up
// 0.98-1.00, down 0.88-0.90); with 768 for every task 0.95, against 384 1.00 (down 0.96),
// against no blocks 1.00. `build/gemm_stream 1 448 1 11 fp32`, the 128 and the final binaries
// alternating five times: 9820-10111 -> 9371-9688 us a pass. Tasks of at most
// gemm_prefetch_max_rows() rows keep the blocks below.
constexpr std::int64_t gemm_depth_block() { return 768; }

// The depth block of tasks of at most gemm_prefetch_max_rows() rows (batch 1), whose weights
// stream from memory: their first row tile prefetches the panel and the other one or two find
// a 128-row block (32 KiB) still in L1. With 768 there `build/gemm_stream 6 14 1 9 fp32` ran
// 12% slower (alternating six times: 2843-3816 -> 3067-3884 us a pass, every pair slower).
constexpr std::int64_t gemm_streaming_depth_block() { return 128; }

// Panel rows (fp32) or pair rows (bf16) ahead of the multiply-adds that a depth block's first
// row tile prefetches into L2: 32 rows of 256 bytes, 8 KiB in flight per worker. Without it,
// when the weights come from memory (batch 1: MiniLM's 42 MB of fp32 panels against a 32 MB
// L3), each block's first tile waits for its rows and the others then find them: memory and
// arithmetic take turns. Measured on AMD EPYC (Zen 4), 2 threads, the four projections of six
// layers (bench/gemm_stream.cpp), in one process with a temporary switch between the two,
// interleaved, medians of 11-15 rounds: fp32 m = 7: 2120 -> 1588 us a pass, m = 14: 2941 ->
// 2314 and 3410 -> 3104, m = 30: 4969 -> 4416, m = 64: 9328 -> 8762; bf16 m = 14: 1186 ->
// 1059; m = 1 and m = 448 (weights in cache) no gain. 16 rows ahead gained less at m = 14, 64
// about the same as 32; prefetcht0 (into L1) instead of prefetcht1 lost 2-10%. End to end it
// did not show: `bench/embed_ab.sh` (7 rounds, fp32) gave batch 1 2.70 -> 2.72 s and batch 32
// 5.40 -> 5.44 s, inside the spread of the rounds (2.31-2.95 s at batch 1).
constexpr std::int64_t gemm_prefetch_rows() { return 32; }

// Tasks of at most this many rows stream their weights from memory (batch 1): they take the
// short depth blocks above. Of the larger tasks, the bf16 and int8 ones do not prefetch: 11+
// row tiles share each block's wait for memory (AMD EPYC, m = 448, weights in cache: bf16 4253
// -> 4391 us with prefetch). The fp32 ones do since the row groups of packed_gemm.cpp, whose
// tasks meet each panel once or twice before it leaves L2: on the Intel host
// `bench/embed_ab.sh` (5 rounds, batch 32) 0.972 of the time with it, every round faster,
// `build/gemm_stream 6 448 2 9 fp32` 283-288 -> 294 GFLOP/s. (On AMD before the row groups,
// fp32 at m = 448 lost 1%: 8329 -> 8430 us; not measured there since.)
constexpr std::int64_t gemm_prefetch_max_rows() { return 64; }

// The same for int8 weights (depths, a multiple of 4): 768 depths, as fp32's, so FFN down
// (k = 1536) runs in two blocks (192 quad rows of 64 32-bit lanes, 48 KiB of panel a block).
// It was 512 (the 32 KiB of fp32's old 128): `build/gemm_stream 1 448 1 15 int8`, old and new
// binaries alternating four times, 3691-4416 -> 3570-3835 us a pass (medians ~3890 -> ~3730;
// with 768 for every task then). Tasks of at most gemm_prefetch_max_rows() rows keep 512: at
// m = 14, 768 gave medians 847 -> 893 us in five alternating pairs of `build/gemm_stream 6 14
// 1 9 int8` (two of the five faster: not clearly a loss, not a gain either).
constexpr std::int64_t gemm_i8_depth_block() { return 768; }
constexpr std::int64_t gemm_i8_streaming_depth_block() { return 512; }

// The same for bf16 weights (depths, even): 256 depths of a bf16 panel are 128 pair rows of 64
// 32-bit lanes, the same 32 KiB of L1 as fp32's 128.
constexpr std::int64_t gemm_bf16_depth_block() { return 256; }

// bf16 weights on an ISA without vdpbf16ps: calls of at least this many rows widen x and every
// panel to fp32 once and run the fp32 tiles (layers/packed_gemm.cpp); shorter ones keep the
// bf16 kernel, which widens each pair as it multiplies. Widening all k x n weights costs as
// much as ~27 rows of the widened kernel's extra work (one thread, m 448, k 384, n 1536, fastest
// of 100 calls with a driver not committed: fp32 172, widened kernel 111, widen once 161
// GFLOP/s; `build/gemm_stream 1 448 1 30 fp32|bf16` now: 162 and 144-154), so the switch pays
// from ~50 rows; a batch of one sentence (~15 rows) stays on the kernel. Same bits either way.
constexpr std::int64_t gemm_bf16_widen_min_rows() { return 64; }

// The int8 GEMM runs on AMX tiles (TDPBUSD) from this many rows (same bits as vpdpbusd either
// way: exact int32 sums); below, vpdpbusd, since a tile step multiplies 16 rows whatever the
// call has. Measured on the Intel AMX host (family 6 model 167, 2 threads), `build/gemm_stream 6
// M 2 7 int8` with HEADCOUNT_ISA=amx_bf16 against avx512_bf16, medians of a pass: m 16 723.6
// against 665.5 us, m 24 828.3 against 897.1, m 32 867.4 against 1065.4, m 128 1865 against 3021
// (with a tile configuration per panel, before the panel groups and one-row tiles of small calls;
// not re-measured since, so the crossover may now lie lower).
constexpr std::int64_t gemm_i8_amx_min_rows() { return 20; }

}  // namespace headcount::tuning
