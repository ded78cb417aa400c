// The streaming (flash) forward kernel: exact attention that never holds more than one
// tile of scores per worker, whatever q_len, kv_len and heads are.
//
// Work is split into tasks of (batch, head, query tile of Tq rows). A task
//   - packs its Tq query rows into contiguous scratch,
//   - walks the key tiles (Tk keys) that any of its rows can see: the masks allow one
//     interval of keys per row (kernels/masking.h), so tiles outside the union of those
//     intervals (above the causal diagonal, outside the window, in the padding) are
//     skipped, not computed and then masked,
//   - per key tile: packs K and V, computes the Tq x Tk scores, masks the rest of the
//     tile with -inf, and folds the tile into each row's online softmax (running max,
//     running sum, rescaled fp32 accumulator; kernels/online_softmax.h),
//   - finalises: O = acc / sum, lse = max + log(sum); a row that saw no key gets zeros
//     and lse = -inf.
// Memory per worker: Tq·d + Tk·(d + d_v) + Tq·Tk + Tq·d_v floats (64 x 64 tiles with
// d = d_v = 128: 112 KiB), borrowed from the context's scratch.
// Each output row is produced by exactly one task with a fixed order of operations, so
// the result does not depend on the number of threads.
//
// This is the correct, portable version; the SIMD micro-kernels replace the inner loops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "headcount/attention.h"
#include "headcount/error.h"
#include "kernels/masking.h"
#include "kernels/online_softmax.h"
#include "kernels/tuning.h"

namespace headcount {

using kernels::KeyRange;
using kernels::MaskSpec;
using kernels::OnlineSoftmax;

namespace {

struct TileScratch {
  float* q;       // [Tq, head_dim]
  float* k;       // [Tk, head_dim]
  float* v;       // [Tk, v_head_dim]
  float* scores;  // [Tq, Tk]
  float* acc;     // [Tq, v_head_dim]

  static std::size_t floats(const AttentionShape& s) {
    const std::int64_t tq = tuning::streaming_query_tile(), tk = tuning::streaming_key_tile();
    return static_cast<std::size_t>(tq * s.head_dim + tk * (s.head_dim + s.v_head_dim) + tq * tk +
                                    tq * s.v_head_dim);
  }
  static TileScratch carve(float* base, const AttentionShape& s) {
    const std::int64_t tq = tuning::streaming_query_tile(), tk = tuning::streaming_key_tile();
    TileScratch t;
    t.q = base;
    t.k = t.q + tq * s.head_dim;
    t.v = t.k + tk * s.head_dim;
    t.scores = t.v + tk * s.v_head_dim;
    t.acc = t.scores + tq * tk;
    return t;
  }
};

// Copies rows [row0, row0 + rows) of one head of a [batch, len, heads, dim] view into a
// dense [rows, dim] block.
void pack_rows(const TensorView& view, std::int64_t b, std::int64_t row0, std::int64_t rows,
               std::int64_t head, float* dst) {
  const float* src = view.ptr<const float>();
  const std::int64_t dim = view.shape[3];
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = src + view.offset({b, row0 + r, head, 0});
    if (view.strides[3] == 1) {
      std::copy(row, row + dim, dst + r * dim);
    } else {
      for (std::int64_t d = 0; d < dim; ++d) dst[r * dim + d] = row[d * view.strides[3]];
    }
  }
}

}  // namespace

AttentionStats attention_streaming(Context& ctx, const AttentionParams& p) {
  check(p.probs_mode == ProbsMode::none, "probs_mode",
        "none on the streaming kernel (only the reference materialises probabilities)",
        p.probs_mode == ProbsMode::per_head ? "per_head" : "averaged");
  const AttentionShape s = validate(p);
  const MaskSpec mask = MaskSpec::from(p, s);
  const std::int64_t tq = tuning::streaming_query_tile();
  const std::int64_t tk = tuning::streaming_key_tile();
  const std::int64_t q_tiles = (s.q_len + tq - 1) / tq;
  const std::int64_t tasks = s.batch * s.heads * q_tiles;
  const float minus_inf = -std::numeric_limits<float>::infinity();

  // Borrow every worker's scratch before the parallel region, so nothing allocates (or
  // throws) inside it.
  const int workers = static_cast<int>(std::min<std::int64_t>(ctx.threads(), tasks));
  for (int w = 0; w < workers; ++w) ctx.scratch(w, TileScratch::floats(s) * sizeof(float));
  std::vector<std::int64_t> entries_by_task(static_cast<std::size_t>(tasks), 0);

  float* out = p.out.ptr<float>();
  const float* bias = p.bias.empty() ? nullptr : p.bias.ptr<const float>();

  ctx.parallel_for(tasks, [&](std::int64_t task, int worker) {
    const std::int64_t b = task / (s.heads * q_tiles);
    const std::int64_t h = (task / q_tiles) % s.heads;
    const std::int64_t row0 = (task % q_tiles) * tq;
    const std::int64_t rows = std::min(tq, s.q_len - row0);
    const std::int64_t kv_h = kv_head_of(h, s.group);
    const std::int64_t key_length = kernels::key_length_of(p, s, b);
    TileScratch t = TileScratch::carve(
        static_cast<float*>(ctx.scratch(worker, TileScratch::floats(s) * sizeof(float))), s);

    KeyRange keys_of_row[64];
    static_assert(tuning::streaming_query_tile() <= 64);
    KeyRange tile_keys{std::numeric_limits<std::int64_t>::max(), 0};
    for (std::int64_t r = 0; r < rows; ++r) {
      keys_of_row[r] = mask.keys_for(row0 + r, key_length);
      if (keys_of_row[r].empty()) continue;
      tile_keys.begin = std::min(tile_keys.begin, keys_of_row[r].begin);
      tile_keys.end = std::max(tile_keys.end, keys_of_row[r].end);
    }

    OnlineSoftmax softmax[64];
    std::fill(t.acc, t.acc + rows * s.v_head_dim, 0.0f);
    pack_rows(p.q, b, row0, rows, h, t.q);
    std::int64_t entries = 0;

    // Key tiles start at multiples of Tk so every query tile sees the same tiling.
    const std::int64_t first_tile = tile_keys.empty() ? 0 : tile_keys.begin / tk * tk;
    for (std::int64_t col0 = first_tile; col0 < tile_keys.end; col0 += tk) {
      const std::int64_t cols = std::min(tk, s.kv_len - col0);
      pack_rows(p.k, b, col0, cols, kv_h, t.k);
      pack_rows(p.v, b, col0, cols, kv_h, t.v);
      entries += rows * cols;

      for (std::int64_t r = 0; r < rows; ++r) {
        float* score = t.scores + r * tk;
        const float* q_row = t.q + r * s.head_dim;
        const KeyRange keys = keys_of_row[r];
        float block_max = minus_inf;
        for (std::int64_t c = 0; c < cols; ++c) {
          const std::int64_t j = col0 + c;
          if (j < keys.begin || j >= keys.end) {
            score[c] = minus_inf;
            continue;
          }
          const float* k_row = t.k + c * s.head_dim;
          float dot = 0.0f;
          for (std::int64_t d = 0; d < s.head_dim; ++d) dot += q_row[d] * k_row[d];
          score[c] = s.scale * dot;
          if (bias) {
            const std::int64_t bb = p.bias.shape[0] == 1 ? 0 : b;
            const std::int64_t bh = p.bias.shape[1] == 1 ? 0 : h;
            score[c] += bias[p.bias.offset({bb, bh, row0 + r, j})];
          }
          block_max = std::max(block_max, score[c]);
        }
        if (block_max == minus_inf) continue;  // nothing visible in this tile

        float* acc = t.acc + r * s.v_head_dim;
        const float alpha = softmax[r].rescale_to(block_max);
        if (alpha != 1.0f)
          for (std::int64_t e = 0; e < s.v_head_dim; ++e) acc[e] *= alpha;
        for (std::int64_t c = 0; c < cols; ++c) {
          if (score[c] == minus_inf) continue;
          const float weight = std::exp(score[c] - softmax[r].max);
          softmax[r].sum += weight;
          const float* v_row = t.v + c * s.v_head_dim;
          for (std::int64_t e = 0; e < s.v_head_dim; ++e) acc[e] += weight * v_row[e];
        }
      }
    }

    for (std::int64_t r = 0; r < rows; ++r) {
      const float inverse = softmax[r].inverse_sum();
      float* dst = out + p.out.offset({b, row0 + r, h, 0});
      for (std::int64_t e = 0; e < s.v_head_dim; ++e)
        dst[e * p.out.strides[3]] = t.acc[r * s.v_head_dim + e] * inverse;
      if (!p.lse.empty()) p.lse.ptr<float>()[p.lse.offset({b, h, row0 + r})] = softmax[r].log_sum_exp();
    }
    entries_by_task[static_cast<std::size_t>(task)] = entries;
  });

  AttentionStats stats;
  for (std::int64_t entries : entries_by_task) {
    stats.score_macs += entries * s.head_dim;
    stats.weighted_sum_macs += entries * s.v_head_dim;
  }
  stats.peak_score_entries = workers * tuning::streaming_tile_entries();
  return stats;
}

}  // namespace headcount
