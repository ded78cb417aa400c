// What ring attention's forward and backward share: the checks every rank runs and agrees on,
// which of this rank's queries meet which prefix of the K/V block in hand at each step, the
// block's key lengths, and views of row ranges. ring.cpp has the schedule's reasoning.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <span>
#include <vector>

#include "headcount/distributed.h"

namespace headcount::distributed::detail {

// Validates params (window, bias and probs refused; q_len = kv_len, even) on every rank and
// agrees on shapes, masks and key lengths across ranks; returns the shape and this rank's layout.
struct RingCall {
  AttentionShape shape;
  RingLayout layout;
  AttentionParams base;  // params without key_lengths (those are per block)
};
RingCall check_ring_call(MPI_Comm comm, const AttentionParams& params, bool need_lse,
                         const Watchdog& watchdog);

// Step t of rank r, holding the block of rank `source`: queries [q_begin, q_end) of this rank
// meet the block's keys [0, kv_rows); `causal`: step 0's own causal mask.
struct RingStep {
  std::int64_t q_begin = 0, q_end = 0, kv_rows = 0;
  bool causal = false;
};
RingStep ring_step(const RingLayout& lay, int t, int source, bool causal);

// Per batch element, the keys of `source`'s block before the global key lengths: a prefix of
// the block (capped at `kv_rows`).
void block_key_lengths(const RingLayout& lay, int source, std::span<const std::int64_t> key_lengths,
                       std::int64_t batch, std::int64_t kv_rows, std::vector<std::int64_t>& out);

// Rows [begin, begin + count) along dimension `dim` of a view.
TensorView slice(const TensorView& t, int dim, std::int64_t begin, std::int64_t count);
// Copies a [B, rows, heads, dim] view into a contiguous buffer, and back.
void pack(const TensorView& t, float* dst);
void unpack(const float* src, const TensorView& t);

}  // namespace headcount::distributed::detail
