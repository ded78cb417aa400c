// The streaming (FlashAttention-2) backward: exact gradients without any n^2 storage.
//
// P is never stored: it is recomputed tile by tile from the forward's lse, P = exp(S - lse),
// and D_i = dO_i · O_i is computed once per row from the forward's output (row_terms).
// Work is split into tasks that each OWN what they write, so nothing needs atomics and
// results are bitwise the same for any thread count:
//   task = (outer, chunk). `outer` is a (batch, kv head) pair; the task owns dK and dV of
//   that kv head for the key tiles of its chunk (tiles t with t % chunks == chunk:
//   interleaved, so a causal mask spreads its work evenly over the chunks), and a private
//   fp32 partial of dQ for the group's query heads [q_len, group, head_dim].
//   chunks = ceil(backward_min_tasks / outers) (tuning.h), at most the key tiles: a
//   function of the shape alone. With batch 1 and 8 kv heads that is one chunk: 8 tasks.
//   When d_bias is asked for and the bias broadcasts over batch (or heads), tasks of
//   different batch elements (kv heads) would add into one d_bias element: then those
//   dimensions are looped INSIDE the task (outer collapses them), so every d_bias element
//   is still written by one task only, in a fixed order.
// Per (batch, kv head) of a task, per key tile (Tk keys) of its chunk:
//   zero the dK, dV accumulators; for every query block (positions x the group's heads,
//   row r = position * group + head in group) whose visible keys meet the tile, on the
//   tile's columns that those queries see (masking.h's intervals; the rest is skipped):
//     pack Q, Q^T, dO, dO^T, lse and D of the block
//     S^T  = scale · K · Q^T           (keys x rows: vectorised across queries, as forward)
//     mask the interval edges to -inf, add the bias
//     dP^T = V · dO^T
//     P = exp(S - lse), dS = P ∘ (dP - D)  (simd backward_probs; lse = -inf → P = 0)
//     d_bias += dS
//     dV += P^T · dO,  dK += dS^T · Q,  dQ_partial += dS · K
//   write dK = scale · acc and dV = acc for the tile's keys (keys nobody sees get 0).
// Then one pass sums the dQ partials in chunk order: dQ = scale · sum_c partial_c.
//
// Why the dQ partial and not accumulate straight into d_q: the micro-kernels want rows at
// one stride, and the group's rows r = (position, head) are two strides apart in d_q; the
// partial is the extra memory of the algorithm, chunks x |dQ| (one |dQ| in the common case:
// 32 MiB at n 16384, 8 x 64), next to the O(n·d) of the inputs. Scratch per worker: one
// block and one key tile, ~580 KiB at head_dim 64 (tuning.h).
//
// bf16 q/k/v: widened to fp32 as they are packed (the gradients are fp32).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "headcount/attention_backward.h"
#include "headcount/error.h"
#include "kernels/backward_checks.h"
#include "kernels/count_work.h"
#include "kernels/masking.h"
#include "kernels/task_rows.h"
#include "simd/tiles.h"
#include "simd/tuning.h"

namespace headcount {

using kernels::KeyRange;
using kernels::MaskSpec;
using i64 = std::int64_t;

namespace {

constexpr int kSlotDq = 12;        // the context workspace holding the dQ partials
constexpr int kSlotRowTerms = 13;  // and the one holding each row's lse and D

i64 round_up(i64 x, i64 multiple) { return (x + multiple - 1) / multiple * multiple; }
inline float to_f32(float x) { return x; }
inline float to_f32(bf16 x) { return to_float(x); }

// The sizes of one call, the task split, and where each buffer sits in a worker's scratch
// (in floats).
struct Plan {
  AttentionShape s;
  MaskSpec mask;
  const simd::TileKernels* tiles = nullptr;
  i64 positions = 0, rows = 0, rows_pad = 0, key_tile = 0, dpad = 0, dvpad = 0;
  bool k_direct = false;  // K rows read in place by S^T and by dQ += dS·K
  bool v_direct = false;  // V rows read in place by dP^T
  bool batch_inside = false, heads_inside = false;  // d_bias broadcast: loop inside a task
  i64 outer_batches = 0, outer_heads = 0, outers = 0, chunks = 0, key_tiles = 0, q_tiles = 0;
  i64 dq_floats = 0;  // one dQ partial: q_len x group x dpad
  i64 qp_off = 0, qt_off = 0, dop_off = 0, dot_off = 0, lse_off = 0, delta_off = 0, st_off = 0,
      dpt_off = 0, dk_off = 0, dv_off = 0, kp_off = 0, vp_off = 0, ones_off = 0, keys_off = 0,
      words = 0;

  Plan(const AttentionParams& p, const AttentionGrads& g, const AttentionShape& shape, Isa isa)
      : s(shape) {
    mask = MaskSpec::from(p, s);
    tiles = &simd::tile_kernels(isa);
    const i64 w = tiles->vector_floats;
    positions = std::min(tuning::backward_query_tile(s.group), s.q_len);
    rows = positions * s.group;
    rows_pad = round_up(rows, w);
    key_tile = tuning::backward_key_tile();
    dpad = round_up(s.head_dim, w);
    dvpad = round_up(s.v_head_dim, w);
    const bool f32 = p.q.dtype == DType::f32;
    k_direct = f32 && p.k.strides[3] == 1 && s.head_dim % w == 0;
    v_direct = f32 && p.v.strides[3] == 1;

    const bool d_bias = !g.d_bias.empty();
    batch_inside = d_bias && p.bias.shape[0] == 1 && s.batch > 1;
    heads_inside = d_bias && p.bias.shape[1] == 1 && s.kv_heads > 1;
    outer_batches = batch_inside ? 1 : s.batch;
    outer_heads = heads_inside ? 1 : s.kv_heads;
    outers = outer_batches * outer_heads;
    key_tiles = (s.kv_len + key_tile - 1) / key_tile;
    q_tiles = (s.q_len + positions - 1) / positions;
    chunks = std::clamp((tuning::backward_min_tasks() + outers - 1) / outers, i64{1}, key_tiles);
    dq_floats = s.q_len * s.group * dpad;

    auto next = [](i64 offset, i64 words) { return offset + round_up(words, 16); };
    qp_off = 0;
    qt_off = next(qp_off, rows_pad * dpad);
    dop_off = next(qt_off, s.head_dim * rows_pad);
    dot_off = next(dop_off, rows_pad * dvpad);
    lse_off = next(dot_off, s.v_head_dim * rows_pad);
    delta_off = next(lse_off, rows_pad);
    st_off = next(delta_off, rows_pad);
    dpt_off = next(st_off, key_tile * rows_pad);
    dk_off = next(dpt_off, key_tile * rows_pad);
    dv_off = next(dk_off, key_tile * dpad);
    kp_off = next(dv_off, key_tile * dvpad);
    vp_off = next(kp_off, k_direct ? 0 : key_tile * dpad);
    ones_off = next(vp_off, v_direct ? 0 : key_tile * s.v_head_dim);
    keys_off = next(ones_off, std::max(rows_pad, key_tile));
    words = keys_off + positions * 4;  // KeyRange = two int64
  }

  i64 tasks() const { return outers * chunks; }
};

// One query block packed for the five products: Q and dO row-major [rows, pad] and
// transposed [dim, rows_pad], all zero-padded, and the rows' lse and D (from
// row_terms; padding rows get lse = +inf, so P = exp(S - lse) = 0 there).
template <typename T>
void pack_block(const Plan& plan, const AttentionParams& p, const AttentionGrads& g,
                const float* rows_lse, const float* rows_delta, i64 b, i64 kv_head, i64 row0, i64 n,
                float* scratch) {
  const AttentionShape& s = plan.s;
  float* qp = scratch + plan.qp_off;
  float* qt = scratch + plan.qt_off;
  float* dop = scratch + plan.dop_off;
  float* dot = scratch + plan.dot_off;
  float* lse = scratch + plan.lse_off;
  float* delta = scratch + plan.delta_off;
  const i64 ld = plan.rows_pad, rows = n * s.group;
  std::memset(qp, 0, static_cast<std::size_t>(ld * plan.dpad) * sizeof(float));
  std::memset(dop, 0, static_cast<std::size_t>(ld * plan.dvpad) * sizeof(float));
  if (rows < ld) {
    for (i64 d = 0; d < s.head_dim; ++d) std::fill(qt + d * ld + rows, qt + (d + 1) * ld, 0.0f);
    for (i64 e = 0; e < s.v_head_dim; ++e) std::fill(dot + e * ld + rows, dot + (e + 1) * ld, 0.0f);
  }
  std::fill(lse + rows, lse + ld, std::numeric_limits<float>::infinity());
  std::fill(delta + rows, delta + ld, 0.0f);

  const T* q = p.q.ptr<const T>();
  const float* d_out = g.d_out.ptr<const float>();
  for (i64 i = 0; i < n; ++i)
    for (i64 hg = 0; hg < s.group; ++hg) {
      const i64 r = i * s.group + hg, head = kv_head * s.group + hg;
      const T* q_row = q + p.q.offset({b, row0 + i, head, 0});
      for (i64 d = 0; d < s.head_dim; ++d) {
        const float x = to_f32(q_row[d * p.q.strides[3]]);
        qp[r * plan.dpad + d] = x;
        qt[d * ld + r] = x;
      }
      const float* do_row = d_out + g.d_out.offset({b, row0 + i, head, 0});
      for (i64 e = 0; e < s.v_head_dim; ++e) {
        const float x = do_row[e * g.d_out.strides[3]];
        dop[r * plan.dvpad + e] = x;
        dot[e * ld + r] = x;
      }
      delta[r] = rows_delta[(b * s.heads + head) * s.q_len + row0 + i];
      lse[r] = rows_lse[(b * s.heads + head) * s.q_len + row0 + i];
    }
}

// Rows of K (f32 [cols, dpad], zero-padded) or V (f32 [cols, v_head_dim]) of one key tile.
template <typename T>
void pack_rows(const TensorView& t, i64 b, i64 kv_head, i64 col0, i64 cols, i64 dim, i64 ld,
               float* dst) {
  const T* src = t.ptr<const T>();
  for (i64 c = 0; c < cols; ++c) {
    const T* row = src + t.offset({b, col0 + c, kv_head, 0});
    for (i64 d = 0; d < dim; ++d) dst[c * ld + d] = to_f32(row[d * t.strides[3]]);
    std::fill(dst + c * ld + dim, dst + (c + 1) * ld, 0.0f);
  }
}

// The per-row terms, once per call ([batch, heads, q_len] each): the lse with -inf turned
// into +inf (so that exp(S - lse) = 0 on a row that sees no key) and D = dO · O, summed in
// a fixed order.
void row_terms(Context& ctx, const AttentionShape& s, const AttentionParams& p,
               const AttentionGrads& g, float* rows_lse, float* rows_delta) {
  ctx.parallel_for(s.batch * s.heads, [&](i64 task, int /*worker*/) {
    const i64 b = task / s.heads, h = task % s.heads;
    for (i64 i = 0; i < s.q_len; ++i) {
      const float* o = p.out.ptr<const float>() + p.out.offset({b, i, h, 0});
      const float* d_o = g.d_out.ptr<const float>() + g.d_out.offset({b, i, h, 0});
      float sum = 0.0f;
      for (i64 e = 0; e < s.v_head_dim; ++e)
        sum += d_o[e * g.d_out.strides[3]] * o[e * p.out.strides[3]];
      const float l = p.lse.ptr<const float>()[p.lse.offset({b, h, i})];
      rows_delta[task * s.q_len + i] = sum;
      rows_lse[task * s.q_len + i] =
          l == -std::numeric_limits<float>::infinity() ? std::numeric_limits<float>::infinity() : l;
    }
  });
}

// One (batch, kv head) of a task: every key tile of its chunk.
template <typename T>
i64 run_pair(const Plan& plan, const AttentionParams& p, const AttentionGrads& g,
             const float* rows_lse, const float* rows_delta, i64 b, i64 kv_head, i64 chunk,
             float* scratch, float* dq) {
  const AttentionShape& s = plan.s;
  const simd::TileKernels& tiles = *plan.tiles;
  const i64 ld = plan.rows_pad, tk = plan.key_tile;
  const i64 key_length = kernels::key_length_of(p, s, b);
  const float minus_inf = -std::numeric_limits<float>::infinity();
  float* st = scratch + plan.st_off;
  float* dpt = scratch + plan.dpt_off;
  float* dk_acc = scratch + plan.dk_off;
  float* dv_acc = scratch + plan.dv_off;
  float* k_pack = scratch + plan.kp_off;
  float* v_pack = scratch + plan.vp_off;
  const float* ones = scratch + plan.ones_off;
  float* qp = scratch + plan.qp_off;
  float* qt = scratch + plan.qt_off;
  float* dop = scratch + plan.dop_off;
  float* dot = scratch + plan.dot_off;
  const float* lse = scratch + plan.lse_off;
  const float* delta = scratch + plan.delta_off;
  auto* keys_of = reinterpret_cast<KeyRange*>(scratch + plan.keys_off);
  const float* bias = p.bias.empty() ? nullptr : p.bias.ptr<const float>();
  float* d_bias = g.d_bias.empty() ? nullptr : g.d_bias.ptr<float>();
  float* d_k = g.d_k.ptr<float>();
  float* d_v = g.d_v.ptr<float>();
  i64 entries = 0;

  std::memset(dq, 0, static_cast<std::size_t>(plan.dq_floats) * sizeof(float));
  for (i64 t = chunk; t < plan.key_tiles; t += plan.chunks) {
    const i64 col0 = t * tk, cols = std::min(tk, s.kv_len - col0);
    std::memset(dk_acc, 0, static_cast<std::size_t>(tk * plan.dpad) * sizeof(float));
    std::memset(dv_acc, 0, static_cast<std::size_t>(tk * plan.dvpad) * sizeof(float));
    const float* k_rows = k_pack;
    i64 ldk = plan.dpad;
    const float* v_rows = v_pack;
    i64 ldv = s.v_head_dim;
    bool packed = false;

    for (i64 qtile = 0; qtile < plan.q_tiles && col0 < key_length; ++qtile) {
      const i64 row0 = qtile * plan.positions, n = std::min(plan.positions, s.q_len - row0);
      const KeyRange all = kernels::visible_keys(plan.mask, row0, n, key_length, keys_of);
      // The block's keys in this tile: [c_lo, c_hi) of the tile's columns. Only those are
      // computed, so a diagonal or window edge costs a block's width, not a tile's.
      const i64 c_lo = std::max(all.begin, col0) - col0,
                c_hi = std::min(all.end, col0 + cols) - col0;
      if (all.begin >= all.end || c_lo >= c_hi) continue;
      const i64 kc = c_hi - c_lo;
      if (!packed) {  // K and V of the tile, once, for the first block that needs them
        if (plan.k_direct) {
          k_rows = p.k.ptr<const float>() + p.k.offset({b, col0, kv_head, 0});
          ldk = p.k.strides[1];
        } else {
          pack_rows<T>(p.k, b, kv_head, col0, cols, s.head_dim, plan.dpad, k_pack);
        }
        if (plan.v_direct) {
          v_rows = p.v.ptr<const float>() + p.v.offset({b, col0, kv_head, 0});
          ldv = p.v.strides[1];
        } else {
          pack_rows<T>(p.v, b, kv_head, col0, cols, s.v_head_dim, s.v_head_dim, v_pack);
        }
        packed = true;
      }
      pack_block<T>(plan, p, g, rows_lse, rows_delta, b, kv_head, row0, n, scratch);
      const i64 rows = n * s.group;
      entries += rows * kc;
      float* st_lo = st + c_lo * ld;
      float* dpt_lo = dpt + c_lo * ld;

      // S^T = scale · K · Q^T, then the masks at each query's interval edges and the bias.
      tiles.scores_f32(k_rows + c_lo * ldk, ldk, qt, ld, s.head_dim, st_lo, ld, kc, ld, s.scale,
                       nullptr);
      for (i64 i = 0; i < n; ++i) {
        const i64 lo = std::clamp(keys_of[i].begin - col0, c_lo, c_hi);
        const i64 hi = std::clamp(keys_of[i].end - col0, lo, c_hi);
        if (lo == c_lo && hi == c_hi && !bias) continue;
        for (i64 hg = 0; hg < s.group; ++hg) {
          const i64 r = i * s.group + hg;
          for (i64 c = c_lo; c < lo; ++c) st[c * ld + r] = minus_inf;
          for (i64 c = hi; c < c_hi; ++c) st[c * ld + r] = minus_inf;
          if (bias) {
            const i64 head = kv_head * s.group + hg;
            const float* bias_row =
                bias + p.bias.offset({p.bias.shape[0] == 1 ? 0 : b, p.bias.shape[1] == 1 ? 0 : head,
                                      row0 + i, col0});
            for (i64 c = lo; c < hi; ++c) st[c * ld + r] += bias_row[c * p.bias.strides[3]];
          }
        }
      }

      // dP^T = V · dO^T; then P and dS in place of S^T and dP^T.
      tiles.scores_f32(v_rows + c_lo * ldv, ldv, dot, ld, s.v_head_dim, dpt_lo, ld, kc, ld, 1.0f,
                       nullptr);
      tiles.backward_probs(st_lo, dpt_lo, ld, kc, ld, lse, delta);

      if (d_bias) {
        for (i64 i = 0; i < n; ++i) {
          const i64 lo = std::clamp(keys_of[i].begin - col0, c_lo, c_hi);
          const i64 hi = std::clamp(keys_of[i].end - col0, lo, c_hi);
          for (i64 hg = 0; hg < s.group; ++hg) {
            const i64 r = i * s.group + hg, head = kv_head * s.group + hg;
            float* row =
                d_bias + g.d_bias.offset({g.d_bias.shape[0] == 1 ? 0 : b,
                                          g.d_bias.shape[1] == 1 ? 0 : head, row0 + i, col0});
            for (i64 c = lo; c < hi; ++c) row[c * g.d_bias.strides[3]] += dpt[c * ld + r];
          }
        }
      }

      // dV += P^T · dO;  dK += dS^T · Q;  dQ += dS · K  (the scale is applied once, at the end).
      tiles.weighted_sum_f32(st_lo, ld, 1, dop, plan.dvpad, rows, dv_acc + c_lo * plan.dvpad,
                             plan.dvpad, kc, plan.dvpad, ones);
      tiles.weighted_sum_f32(dpt_lo, ld, 1, qp, plan.dpad, rows, dk_acc + c_lo * plan.dpad,
                             plan.dpad, kc, plan.dpad, ones);
      tiles.weighted_sum_f32(dpt_lo, 1, ld, k_rows + c_lo * ldk, ldk, kc,
                             dq + row0 * s.group * plan.dpad, plan.dpad, rows, plan.dpad, ones);
    }

    for (i64 c = 0; c < cols; ++c) {
      float* dk_row = d_k + g.d_k.offset({b, col0 + c, kv_head, 0});
      float* dv_row = d_v + g.d_v.offset({b, col0 + c, kv_head, 0});
      for (i64 d = 0; d < s.head_dim; ++d)
        dk_row[d * g.d_k.strides[3]] = s.scale * dk_acc[c * plan.dpad + d];
      for (i64 e = 0; e < s.v_head_dim; ++e)
        dv_row[e * g.d_v.strides[3]] = dv_acc[c * plan.dvpad + e];
    }
  }
  return entries;
}

}  // namespace

AttentionBackwardStats attention_backward_streaming(Context& ctx, const AttentionParams& p,
                                                    const AttentionGrads& g) {
  const AttentionShape s = kernels::checked_backward_shape(p, g, /*need_forward=*/true, &ctx);
  const Plan plan(p, g, s, ctx.isa());
  const i64 tasks = plan.tasks();
  const std::size_t scratch_bytes = static_cast<std::size_t>(plan.words) * sizeof(float);
  // Scratch for every worker, borrowed before the parallel regions (any worker may take a
  // task, even when there are fewer tasks than workers), so nothing allocates inside them.
  const int workers = static_cast<int>(std::min<i64>(ctx.threads(), tasks));
  for (int w = 0; w < ctx.threads(); ++w) {
    float* ones = static_cast<float*>(ctx.scratch(w, scratch_bytes)) + plan.ones_off;
    std::fill(ones, ones + std::max(plan.rows_pad, plan.key_tile), 1.0f);
  }
  // Partials indexed [batch, kv head, chunk].
  auto* dq_all = static_cast<float*>(ctx.workspace(
      kSlotDq, static_cast<std::size_t>(s.batch * s.kv_heads * plan.chunks * plan.dq_floats) *
                   sizeof(float)));

  auto* terms = static_cast<float*>(ctx.workspace(
      kSlotRowTerms, static_cast<std::size_t>(2 * s.batch * s.heads * s.q_len) * sizeof(float)));
  float* rows_lse = terms;
  float* rows_delta = terms + s.batch * s.heads * s.q_len;
  row_terms(ctx, s, p, g, rows_lse, rows_delta);

  // d_bias starts at 0: every task adds into the elements it owns.
  if (!g.d_bias.empty()) {
    const TensorView& db = g.d_bias;
    ctx.parallel_for(db.shape[0] * db.shape[1] * db.shape[2], [&](i64 row, int /*worker*/) {
      float* dst =
          db.ptr<float>() + db.offset({row / (db.shape[1] * db.shape[2]),
                                       row / db.shape[2] % db.shape[1], row % db.shape[2], 0});
      for (i64 j = 0; j < db.shape[3]; ++j) dst[j * db.strides[3]] = 0.0f;
    });
  }

  std::vector<i64> entries(static_cast<std::size_t>(tasks), 0);
  ctx.parallel_for(tasks, [&](i64 task, int worker) {
    float* scratch = static_cast<float*>(ctx.scratch(worker, scratch_bytes));
    const i64 outer = task / plan.chunks, chunk = task % plan.chunks;
    const i64 b_first = plan.batch_inside ? 0 : outer / plan.outer_heads;
    const i64 b_end = plan.batch_inside ? s.batch : b_first + 1;
    const i64 h_first = plan.heads_inside ? 0 : outer % plan.outer_heads;
    const i64 h_end = plan.heads_inside ? s.kv_heads : h_first + 1;
    i64 done = 0;
    for (i64 b = b_first; b < b_end; ++b)
      for (i64 kv_head = h_first; kv_head < h_end; ++kv_head) {
        float* dq = dq_all + ((b * s.kv_heads + kv_head) * plan.chunks + chunk) * plan.dq_floats;
        done +=
            p.q.dtype == DType::bf16
                ? run_pair<bf16>(plan, p, g, rows_lse, rows_delta, b, kv_head, chunk, scratch, dq)
                : run_pair<float>(plan, p, g, rows_lse, rows_delta, b, kv_head, chunk, scratch, dq);
      }
    entries[static_cast<std::size_t>(task)] = done;
  });

  // dQ = scale · (partial_0 + partial_1 + ...), in chunk order.
  ctx.parallel_for(s.batch * s.q_len, [&](i64 task, int /*worker*/) {
    const i64 b = task / s.q_len, i = task % s.q_len;
    float* d_q = g.d_q.ptr<float>();
    for (i64 h = 0; h < s.heads; ++h) {
      const i64 kv_head = h / s.group, hg = h % s.group;
      const float* first = dq_all + (b * s.kv_heads + kv_head) * plan.chunks * plan.dq_floats +
                           (i * s.group + hg) * plan.dpad;
      float* dst = d_q + g.d_q.offset({b, i, h, 0});
      for (i64 d = 0; d < s.head_dim; ++d) {
        float sum = first[d];
        for (i64 c = 1; c < plan.chunks; ++c) sum += first[c * plan.dq_floats + d];
        dst[d * g.d_q.strides[3]] = s.scale * sum;
      }
    }
  });

  AttentionBackwardStats stats;
  for (i64 e : entries) stats.macs += e * (3 * s.head_dim + 2 * s.v_head_dim);
  stats.peak_score_entries = workers * 2 * plan.key_tile * plan.rows;
  return kernels::counted(stats, s);
}

}  // namespace headcount
