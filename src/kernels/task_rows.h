// What the two streaming paths (streaming.cpp, streaming_amx.cpp) do the same way at the
// start and the end of a task: the visible key interval of each query position, and the
// finished rows written out.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>

#include "headcount/attention.h"
#include "headcount/error.h"
#include "kernels/masking.h"

namespace headcount::kernels {

// keys_of[i] for the task's positions row0 .. row0 + n - 1; returns their union (empty if
// no position sees a key).
inline KeyRange visible_keys(const MaskSpec& mask, std::int64_t row0, std::int64_t n,
                             std::int64_t key_length, KeyRange* keys_of) {
  KeyRange all{std::numeric_limits<std::int64_t>::max(), 0};
  for (std::int64_t i = 0; i < n; ++i) {
    keys_of[i] = mask.keys_for(row0 + i, key_length);
    if (keys_of[i].empty()) continue;
    all.begin = std::min(all.begin, keys_of[i].begin);
    all.end = std::max(all.end, keys_of[i].end);
  }
  return all;
}

// Row r = h_in_group * n + i of a task holds query (row0 + i) of head (kv_head * group +
// h_in_group): writes O = acc / sum and lse = max + log(sum) (zeros and -inf for a row that
// saw no key). Returns true if a row overflowed fp32 (an infinite max, a non-finite sum).
// `scale` is the ISA's y = x * s (simd::TileKernels::scale_f32) for unit-stride rows of out.
inline bool write_rows(const AttentionParams& p, const AttentionShape& s, std::int64_t b,
                       std::int64_t kv_head, std::int64_t row0, std::int64_t n, const float* acc,
                       std::int64_t ld_acc, const float* max, const float* sum,
                       void (*scale)(const float*, float, float*, std::int64_t)) {
  bool overflow = false;
  float* out = p.out.ptr<float>();
  for (std::int64_t r = 0; r < n * s.group; ++r) {
    const std::int64_t i = r % n, head = kv_head * s.group + r / n;
    const bool saw_key = sum[r] > 0.0f;
    if (!(max[r] < std::numeric_limits<float>::infinity()) || !std::isfinite(sum[r]))
      overflow = true;
    const float inverse = saw_key ? 1.0f / sum[r] : 0.0f;
    float* dst = out + p.out.offset({b, row0 + i, head, 0});
    if (p.out.strides[3] == 1)
      scale(acc + r * ld_acc, inverse, dst, s.v_head_dim);
    else
      for (std::int64_t e = 0; e < s.v_head_dim; ++e)
        dst[e * p.out.strides[3]] = acc[r * ld_acc + e] * inverse;
    if (!p.lse.empty())
      p.lse.ptr<float>()[p.lse.offset({b, head, row0 + i})] =
          saw_key ? max[r] + std::log(sum[r]) : -std::numeric_limits<float>::infinity();
  }
  return overflow;
}

struct TaskResult {
  std::int64_t entries = 0;  // scores computed
  bool overflow = false;
};

// Runs `tasks` tasks over the context's workers, each with `scratch_bytes` of worker-private
// scratch borrowed before the parallel region (so nothing allocates or throws inside it),
// and sums what they did into the kernel's stats. run(task, scratch) returns a TaskResult;
// an overflow in any task is an Error once all are done.
template <typename Run>
AttentionStats run_tasks(Context& ctx, const AttentionShape& s, std::int64_t tasks,
                         std::size_t scratch_bytes, std::int64_t tile_entries, Run&& run) {
  const int workers = static_cast<int>(std::min<std::int64_t>(ctx.threads(), tasks));
  for (int w = 0; w < workers; ++w) ctx.scratch(w, scratch_bytes);
  std::atomic<std::int64_t> entries{0};
  std::atomic<bool> overflow{false};
  // By ranges: the tasks are batch-major, so worker w attends the sequences whose rows it
  // projected (packed_gemm.cpp's row groups) and writes its output rows where W_o reads them.
  ctx.parallel_for_ranges(tasks, [&](std::int64_t task, int worker) {
    const TaskResult r = run(task, ctx.scratch(worker, scratch_bytes));
    entries.fetch_add(r.entries, std::memory_order_relaxed);
    if (r.overflow) overflow.store(true, std::memory_order_relaxed);
  });
  check(!overflow.load(), "scores", "finite fp32 values of scale * q·k + bias",
        "an overflow (|score| > 3.4e38): scale q or k down");
  AttentionStats stats;
  stats.score_macs = entries.load() * s.head_dim;
  stats.weighted_sum_macs = entries.load() * s.v_head_dim;
  stats.peak_score_entries = workers * tile_entries;
  return stats;
}

}  // namespace headcount::kernels
