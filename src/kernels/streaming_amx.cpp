// The streaming kernel for bf16 inputs on AMX tiles: the same tasks, masks and online softmax
// as streaming.cpp, with both products on TDPBF16PS (simd/amx.h).
//
// The layout follows the tiles instead of the vector registers: scores are S = Q·K^T (rows
// = the group's queries, 16 per tile), the softmax runs along rows, P is written in bf16 and
// multiplies V pairs straight into the fp32 accumulator tiles. AMX's B operand wants pairs
// of the shared dimension side by side (K^T as pairs of head_dim, V as pairs of keys), so K
// and V of each (batch, kv head) are repacked once per call into that layout, in parallel,
// before the tasks start: 2·kv_len·head_dim bf16 per kv head, the size of K and V themselves,
// where the tasks then read each tile many times.
#include "kernels/streaming_amx.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "headcount/error.h"
#include "kernels/masking.h"
#include "kernels/task_rows.h"
#include "simd/amx.h"
#include "simd/tiles.h"
#include "simd/tuning.h"

namespace headcount::kernels {
namespace {

using i64 = std::int64_t;
i64 round_up(i64 x, i64 m) { return (x + m - 1) / m * m; }

// Context workspace slots for the repacked K and V (the layer uses 0-4, decode 7).
constexpr int kSlotKt = 9, kSlotV = 10;

struct AmxPlan {
  AttentionShape s;
  MaskSpec mask;
  i64 positions = 0, rows = 0, rows_pad = 0, key_tile = 0, depth = 0, width = 0, keys_pad = 0;
  // per-worker scratch, in bytes
  i64 q_off = 0, s_off = 0, p_off = 0, acc_off = 0, max_off = 0, sum_off = 0, lo_off = 0,
      hi_off = 0, keys_off = 0, bytes = 0;

  // The write-out's y = x * s (only AMX machines get here, and they have AVX-512).
  void (*scale)(const float*, float, float*, std::int64_t) = nullptr;

  AmxPlan(const AttentionParams& p, const AttentionShape& shape) : s(shape) {
    mask = MaskSpec::from(p, s);
    scale = simd::tile_kernels(Isa::amx_bf16).scale_f32;
    positions = std::min(tuning::streaming_query_tile(s.group), s.q_len);
    rows = positions * s.group;
    rows_pad = round_up(rows, 16);
    key_tile = tuning::streaming_key_tile();  // a multiple of 32: whole AMX steps
    depth = round_up(s.head_dim, 32);
    width = round_up(s.v_head_dim, 16);
    keys_pad = round_up(s.kv_len, key_tile);
    auto next = [](i64 offset, i64 size) { return offset + round_up(size, 64); };
    q_off = 0;
    s_off = next(q_off, rows_pad * depth * 2);
    p_off = next(s_off, rows_pad * key_tile * 4);
    acc_off = next(p_off, rows_pad * key_tile * 2);
    max_off = next(acc_off, rows_pad * width * 4);
    sum_off = next(max_off, rows_pad * 4);
    lo_off = next(sum_off, rows_pad * 4);
    hi_off = next(lo_off, rows_pad * 4);
    keys_off = next(hi_off, rows_pad * 4);
    bytes = next(keys_off, positions * static_cast<i64>(sizeof(KeyRange)));
  }
  i64 kt_words() const { return depth / 2 * keys_pad; }  // per (batch, kv head)
  i64 v_words() const { return keys_pad / 2 * width; }   // per (batch, kv head)
};

// K^T pairs [depth/2, keys_pad] and V pairs [keys_pad/2, width] of one (batch, kv head).
void repack(const AmxPlan& plan, const AttentionParams& p, i64 b, i64 g, std::uint32_t* kt,
            std::uint32_t* v) {
  const AttentionShape& s = plan.s;
  std::memset(kt, 0, static_cast<std::size_t>(plan.kt_words()) * 4);
  std::memset(v, 0, static_cast<std::size_t>(plan.v_words()) * 4);
  const bf16* k_base = p.k.ptr<const bf16>();
  const bf16* v_base = p.v.ptr<const bf16>();
  for (i64 c = 0; c < s.kv_len; ++c) {
    const bf16* k_row = k_base + p.k.offset({b, c, g, 0});
    for (i64 d = 0; d < s.head_dim; ++d)
      kt[(d / 2) * plan.keys_pad + c] |= static_cast<std::uint32_t>(k_row[d * p.k.strides[3]].bits)
                                         << (16 * (d % 2));
    const bf16* v_row = v_base + p.v.offset({b, c, g, 0});
    std::uint32_t* v_out = v + (c / 2) * plan.width;
    for (i64 e = 0; e < s.v_head_dim; ++e)
      v_out[e] |= static_cast<std::uint32_t>(v_row[e * p.v.strides[3]].bits) << (16 * (c % 2));
  }
}

TaskResult run_task(const AmxPlan& plan, const AttentionParams& p, i64 task, std::byte* scratch,
                    const std::uint32_t* kt_all, const std::uint32_t* v_all) {
  const AttentionShape& s = plan.s;
  const i64 q_tiles = (s.q_len + plan.positions - 1) / plan.positions;
  const i64 b = task / (s.kv_heads * q_tiles);
  const i64 g = (task / q_tiles) % s.kv_heads;
  const i64 row0 = (task % q_tiles) * plan.positions;
  const i64 n = std::min(plan.positions, s.q_len - row0);
  const i64 rows = n * s.group;
  const i64 tk = plan.key_tile;
  const float minus_inf = -std::numeric_limits<float>::infinity();

  auto* q = reinterpret_cast<std::uint16_t*>(scratch + plan.q_off);
  auto* st = reinterpret_cast<float*>(scratch + plan.s_off);
  auto* pb = reinterpret_cast<std::uint16_t*>(scratch + plan.p_off);
  auto* acc = reinterpret_cast<float*>(scratch + plan.acc_off);
  auto* max = reinterpret_cast<float*>(scratch + plan.max_off);
  auto* sum = reinterpret_cast<float*>(scratch + plan.sum_off);
  auto* lo = reinterpret_cast<std::int32_t*>(scratch + plan.lo_off);
  auto* hi = reinterpret_cast<std::int32_t*>(scratch + plan.hi_off);
  auto* keys_of = reinterpret_cast<KeyRange*>(scratch + plan.keys_off);
  const std::uint32_t* kt = kt_all + (b * s.kv_heads + g) * plan.kt_words();
  const std::uint32_t* v = v_all + (b * s.kv_heads + g) * plan.v_words();

  // Q rows (row r = h_in_group * n + i), zero-padded to whole tiles.
  std::memset(q, 0, static_cast<std::size_t>(plan.rows_pad * plan.depth) * 2);
  const bf16* q_base = p.q.ptr<const bf16>();
  for (i64 hg = 0; hg < s.group; ++hg)
    for (i64 i = 0; i < n; ++i) {
      const bf16* src = q_base + p.q.offset({b, row0 + i, g * s.group + hg, 0});
      std::uint16_t* dst = q + (hg * n + i) * plan.depth;
      for (i64 d = 0; d < s.head_dim; ++d) dst[d] = src[d * p.q.strides[3]].bits;
    }
  std::fill(max, max + plan.rows_pad, minus_inf);
  std::fill(sum, sum + plan.rows_pad, 0.0f);
  std::memset(acc, 0, static_cast<std::size_t>(plan.rows_pad * plan.width) * 4);

  const i64 key_length = key_length_of(p, s, b);
  const KeyRange union_keys = visible_keys(plan.mask, row0, n, key_length, keys_of);

  TaskResult result;
  const float* bias = p.bias.empty() ? nullptr : p.bias.ptr<const float>();
  const i64 first =
      union_keys.begin >= union_keys.end ? union_keys.end : union_keys.begin / tk * tk;
  for (i64 col0 = first; col0 < union_keys.end; col0 += tk) {
    const i64 cols = std::min(tk, s.kv_len - col0);
    const i64 keys = round_up(cols, 32);
    result.entries += rows * cols;
    simd::amx::scores(q, plan.depth, kt + col0, plan.keys_pad, plan.depth, st, tk, plan.rows_pad,
                      keys);
    for (i64 r = 0; r < plan.rows_pad; ++r) {
      if (r >= rows) {
        lo[r] = hi[r] = 0;
        continue;
      }
      const KeyRange k = keys_of[r % n];
      lo[r] = static_cast<std::int32_t>(std::clamp(k.begin - col0, i64{0}, cols));
      hi[r] = static_cast<std::int32_t>(std::clamp(k.end - col0, i64{lo[r]}, cols));
      if (bias) {  // scale first, then the bias: the softmax below then runs with scale 1
        const i64 head = g * s.group + r / n;
        const float* bias_row =
            bias + p.bias.offset({p.bias.shape[0] == 1 ? 0 : b, p.bias.shape[1] == 1 ? 0 : head,
                                  row0 + r % n, col0});
        float* row = st + r * tk;
        for (i64 c = lo[r]; c < hi[r]; ++c)
          row[c] = s.scale * row[c] + bias_row[c * p.bias.strides[3]];
      }
    }
    simd::amx::softmax_rows(st, tk, plan.rows_pad, keys, bias ? 1.0f : s.scale, lo, hi, max, sum,
                            pb, tk, acc, plan.width, plan.width);
    simd::amx::weighted_sum(pb, tk, v + (col0 / 2) * plan.width, plan.width, keys, acc, plan.width,
                            plan.rows_pad, plan.width);
  }

  if (write_rows(p, s, b, g, row0, n, acc, plan.width, max, sum, plan.scale))
    result.overflow = true;
  return result;
}

}  // namespace

AttentionStats streaming_amx(Context& ctx, const AttentionParams& p, const AttentionShape& s) {
  const AmxPlan plan(p, s);
  const i64 heads = s.batch * s.kv_heads;
  auto* kt_all = static_cast<std::uint32_t*>(
      ctx.workspace(kSlotKt, static_cast<std::size_t>(heads * plan.kt_words()) * 4));
  auto* v_all = static_cast<std::uint32_t*>(
      ctx.workspace(kSlotV, static_cast<std::size_t>(heads * plan.v_words()) * 4));
  ctx.parallel_for(heads, [&](i64 bg, int) {
    repack(plan, p, bg / s.kv_heads, bg % s.kv_heads, kt_all + bg * plan.kt_words(),
           v_all + bg * plan.v_words());
  });

  const i64 q_tiles = (s.q_len + plan.positions - 1) / plan.positions;
  const i64 tasks = s.batch * s.kv_heads * q_tiles;
  return run_tasks(ctx, s, tasks, static_cast<std::size_t>(plan.bytes), plan.rows * plan.key_tile,
                   [&](i64 task, void* scratch) {
                     return run_task(plan, p, task, static_cast<std::byte*>(scratch), kt_all,
                                     v_all);
                   });
}

}  // namespace headcount::kernels
