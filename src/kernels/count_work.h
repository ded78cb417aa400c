// The kernels' own multiply-add counts (AttentionStats, AttentionBackwardStats) handed to the
// work counters (headcount/work_counters.h) as each kernel returns. The exponentials are the
// score entries the kernel computed: score_macs / head_dim in a forward (one exp per entry),
// macs / (3 head_dim + 2 v_head_dim) in a backward (P recomputed once per entry).
#pragma once

#include "headcount/attention.h"
#include "headcount/attention_backward.h"
#include "headcount/work_counters.h"

namespace headcount::kernels {

inline AttentionStats counted(const AttentionStats& stats, const AttentionShape& s) {
  if (work_counters::enabled())
    work_counters::add_attention(stats.score_macs + stats.weighted_sum_macs,
                                 s.head_dim > 0 ? stats.score_macs / s.head_dim : 0);
  return stats;
}

inline AttentionBackwardStats counted(const AttentionBackwardStats& stats,
                                      const AttentionShape& s) {
  const std::int64_t per_entry = 3 * s.head_dim + 2 * s.v_head_dim;
  if (work_counters::enabled())
    work_counters::add_attention(stats.macs, per_entry > 0 ? stats.macs / per_entry : 0);
  return stats;
}

}  // namespace headcount::kernels
