// The decode kernel (flash-decoding): q_len = 1..16 new tokens per sequence against a KV
// cache, exact, bound by memory rather than arithmetic.
//
// Memory traffic is the whole story: one step reads every cached K and V row once, sum_b
// lengths[b] * kv_heads * (head_dim + v_head_dim) * element bytes (+ 8 bytes of scales per
// row for int8), and does ~2 * group * q_len multiply-adds per element read. So:
//   - grouped-query attention: a task takes all group x q_len query rows of one kv head and
//     reads each K/V block once for all of them (simd/decode.h); kv_heads 8 instead of 32
//     reads a quarter of the bytes;
//   - the cache length is split across workers, or one long sequence would run on one core.
//
// The split. Each (sequence b, kv head h) cache of L_b rows is cut into chunks of
// decode_chunk_keys() rows at fixed boundaries (multiples of the chunk length, independent of
// the thread count). Tasks = (b, h, chunk), taken by the context's workers in any order. A
// task packs its query rows (zero-padded to the vector width), runs the micro-kernel over its
// chunk and leaves a partial state per row (m, l, acc: simd/decode.h) in a workspace buffer.
// The task that finishes the last chunk of (b, h) (an atomic count) merges that head's
// partials in chunk order by log-sum-exp (kernels/lse_merge.h, which ring attention shares):
//   M = max_c m_c,  L = sum_c l_c e^(m_c - M),  O = (sum_c acc_c e^(m_c - M)) / L,
//   lse = M + log L
// which is exactly the online softmax over the whole row. Chunk boundaries and merge order are
// fixed, and rows never interact, so results are bitwise the same for any thread count, and a
// grouped-query head gives bitwise what multi-head attention gives with K/V heads repeated.
// A row with no visible key: zeros and lse = -inf.
//
// Memory: per worker one scratch block (packed Q, two 16-row blocks of K and V, 16 weights),
// and one workspace buffer for the partials of every chunk (rows x (v_head_dim + 2) floats
// each; at 32 heads, head_dim 128, 32k cache, batch 8: 8 MiB next to the 8 GiB of cache it
// summarises). Both are borrowed from the context before the parallel region: nothing is
// allocated once warm.
#include "headcount/decode.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>

#include "headcount/error.h"
#include "kernels/count_work.h"
#include "kernels/lse_merge.h"
#include "simd/decode.h"

namespace headcount {

using detail::concat;
using i64 = std::int64_t;

namespace {

// Keys per chunk of the split. Long enough that a task's fixed costs (packing Q, the partial
// written and merged: rows x (v_head_dim + 2) floats) are small next to the chunk it reads
// (512 rows x 128 dims x 2 x 4 bytes = 512 KiB of f32 K/V); short enough that one sequence
// of 1024 tokens already gives both cores a chunk per kv head, and a 16k cache 32 chunks.
constexpr i64 decode_chunk_keys() { return 512; }

// The context workspace slot that holds the partials (the layer uses slots 0-4).
constexpr int kPartialsSlot = 7;

i64 round_up(i64 x, i64 multiple) { return (x + multiple - 1) / multiple * multiple; }

void check_view_4d(const TensorView& t, const char* name, const char* dims) {
  HEADCOUNT_CHECK(!t.empty(), name, concat("a tensor ", dims), "no data");
  HEADCOUNT_CHECK(t.rank == 4, concat(name, " rank"), concat("4 dims ", dims),
                  concat(t.rank, " dims ", t.shape_string()));
  HEADCOUNT_CHECK(t.dtype == DType::f32, concat(name, " dtype"), "f32", dtype_name(t.dtype));
  for (int d = 0; d < 4; ++d) {
    HEADCOUNT_CHECK(t.shape[d] >= 1, concat(name, " shape"), concat("every size >= 1 ", dims),
                    t.shape_string());
    HEADCOUNT_CHECK(t.strides[d] >= 0, concat(name, " strides"), "non-negative strides",
                    t.strides_string());
  }
}

void check_writable(const TensorView& t, const char* name) {
  for (int d = 0; d < t.rank; ++d)
    HEADCOUNT_CHECK(t.shape[d] == 1 || t.strides[d] > 0, concat(name, " strides"),
                    "non-zero strides on every dimension of size > 1 (an output)",
                    t.strides_string());
}

// The sizes of one call and where each buffer sits (in floats) in a worker's scratch and in
// one task's partial.
struct Plan {
  AttentionShape s;
  const simd::DecodeKernels* kernels = nullptr;
  i64 rows = 0;  // group x q_len, row r = hg * q_len + t
  i64 dp = 0, vp = 0;
  i64 q_off = 0, end_off = 0, k_off = 0, v_off = 0, p_off = 0, o_off = 0, scratch_floats = 0;
  i64 partial_floats = 0;  // m [rows], l [rows], acc [rows, vp]
};

i64 chunks_of(i64 length) { return (length + decode_chunk_keys() - 1) / decode_chunk_keys(); }

}  // namespace

AttentionShape validate(const DecodeParams& p) {
  check_view_4d(p.q, "q", "[batch, q_len, heads, head_dim]");
  check_view_4d(p.out, "out", "[batch, q_len, heads, v_head_dim]");
  check_writable(p.out, "out");
  const KvView& kv = p.kv;
  AttentionShape s;
  s.batch = p.q.shape[0];
  s.q_len = p.q.shape[1];
  s.heads = p.q.shape[2];
  s.head_dim = p.q.shape[3];
  HEADCOUNT_CHECK(s.q_len <= kMaxDecodeTokens, "q_len",
                  concat("1 to ", kMaxDecodeTokens, " new tokens per call"), s.q_len);
  HEADCOUNT_CHECK(kv.k != nullptr && kv.v != nullptr, "kv cache",
                  "a view with K and V data (KvCache::view)", "no data");
  HEADCOUNT_CHECK(
      kv.dtype == CacheDType::f32 || kv.dtype == CacheDType::bf16 || kv.dtype == CacheDType::int8,
      "kv cache dtype", "f32, bf16 or int8", static_cast<int>(kv.dtype));
  if (kv.dtype == CacheDType::int8)
    HEADCOUNT_CHECK(kv.k_scale != nullptr && kv.v_scale != nullptr, "kv cache scales",
                    "one k and one v scale per (token, kv head) for an int8 cache", "none");
  HEADCOUNT_CHECK(kv.batch == s.batch, "kv cache batch", concat(s.batch, " (the batch of q)"),
                  kv.batch);
  HEADCOUNT_CHECK(kv.head_dim == s.head_dim, "kv cache head_dim",
                  concat(s.head_dim, " (the head_dim of q)"), kv.head_dim);
  HEADCOUNT_CHECK(kv.kv_heads >= 1 && s.heads % kv.kv_heads == 0, "kv cache kv_heads",
                  concat("a divisor of heads = ", s.heads), kv.kv_heads);
  HEADCOUNT_CHECK(kv.v_head_dim >= 1, "kv cache v_head_dim", ">= 1", kv.v_head_dim);
  HEADCOUNT_CHECK(kv.capacity >= 1, "kv cache capacity", ">= 1", kv.capacity);
  s.kv_heads = kv.kv_heads;
  s.group = s.heads / s.kv_heads;
  s.v_head_dim = kv.v_head_dim;
  HEADCOUNT_CHECK(static_cast<i64>(kv.lengths.size()) == s.batch, "kv cache lengths",
                  concat(s.batch, " entries (one per sequence)"), kv.lengths.size());
  i64 longest = 0;
  for (std::size_t b = 0; b < kv.lengths.size(); ++b) {
    HEADCOUNT_CHECK(kv.lengths[b] >= 0 && kv.lengths[b] <= kv.capacity,
                    concat("kv cache lengths[", b, "]"), concat("0 to capacity = ", kv.capacity),
                    kv.lengths[b]);
    longest = std::max(longest, kv.lengths[b]);
  }
  s.kv_len = longest;
  const bool out_ok = p.out.shape[0] == s.batch && p.out.shape[1] == s.q_len &&
                      p.out.shape[2] == s.heads && p.out.shape[3] == s.v_head_dim;
  HEADCOUNT_CHECK(out_ok, "out shape",
                  concat("[", s.batch, ", ", s.q_len, ", ", s.heads, ", ", s.v_head_dim,
                         "] [batch, q_len, heads, v_head_dim]"),
                  p.out.shape_string());
  if (!p.lse.empty()) {
    HEADCOUNT_CHECK(p.lse.rank == 3 && p.lse.dtype == DType::f32, "lse",
                    "an f32 tensor [batch, heads, q_len]",
                    concat(dtype_name(p.lse.dtype), ' ', p.lse.shape_string()));
    HEADCOUNT_CHECK(
        p.lse.shape[0] == s.batch && p.lse.shape[1] == s.heads && p.lse.shape[2] == s.q_len,
        "lse shape", concat("[", s.batch, ", ", s.heads, ", ", s.q_len, "]"), p.lse.shape_string());
    check_writable(p.lse, "lse");
  }
  s.scale =
      p.scale ? *p.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  HEADCOUNT_CHECK(std::isfinite(s.scale), "scale", "a finite number", s.scale);
  const float* q = p.q.ptr<const float>();
  for (i64 b = 0; b < s.batch; ++b)
    for (i64 t = 0; t < s.q_len; ++t)
      for (i64 h = 0; h < s.heads; ++h)
        for (i64 d = 0; d < s.head_dim; ++d) {
          const float x = q[p.q.offset({b, t, h, d})];
          if (!std::isfinite(x))
            fail("q", concat("expected finite values, got ", x, " at [", b, ", ", t, ", ", h, ", ",
                             d, "]"));
        }
  return s;
}

AttentionStats attention_decode(Context& ctx, const DecodeParams& p) {
  const AttentionShape s = validate(p);
  const KvView& kv = p.kv;
  Plan plan;
  plan.s = s;
  plan.kernels = &simd::decode_kernels(ctx.isa());
  const i64 w = plan.kernels->vector_floats;
  plan.rows = s.group * s.q_len;
  plan.dp = round_up(s.head_dim, w);
  plan.vp = round_up(s.v_head_dim, w);
  auto next = [](i64 offset, i64 floats) { return offset + round_up(floats, 16); };
  const i64 kb = simd::kDecodeKeyBlock;
  plan.q_off = 0;
  plan.end_off = next(plan.q_off, plan.rows * plan.dp);
  plan.k_off = next(plan.end_off, plan.rows * 2);  // int64 row ends
  plan.v_off = next(plan.k_off, kb * plan.dp);
  plan.p_off = next(plan.v_off, kb * plan.vp);
  plan.o_off = next(plan.p_off, kb);
  plan.scratch_floats = next(plan.o_off, plan.vp);
  plan.partial_floats = 2 * plan.rows + plan.rows * plan.vp;

  // Tasks: for each sequence, kv_heads x chunks_of(length), chunk fastest, so that the
  // partials of one (b, h) are contiguous and in chunk order.
  i64 tasks = 0;
  for (i64 b = 0; b < s.batch; ++b)
    tasks += s.kv_heads * chunks_of(kv.lengths[static_cast<std::size_t>(b)]);
  const std::size_t partial_bytes = static_cast<std::size_t>(tasks * plan.partial_floats) * 4;
  const std::size_t counter_bytes =
      static_cast<std::size_t>(s.batch * s.kv_heads) * sizeof(std::atomic<std::int32_t>);
  auto* workspace =
      static_cast<std::byte*>(ctx.workspace(kPartialsSlot, partial_bytes + counter_bytes + 64));
  float* partials = reinterpret_cast<float*>(workspace);
  auto* done = reinterpret_cast<std::atomic<std::int32_t>*>(
      workspace + round_up(static_cast<i64>(partial_bytes), 64));
  for (i64 i = 0; i < s.batch * s.kv_heads; ++i) new (done + i) std::atomic<std::int32_t>(0);

  const int workers = static_cast<int>(std::min<i64>(ctx.threads(), std::max<i64>(tasks, 1)));
  const std::size_t scratch_bytes = static_cast<std::size_t>(plan.scratch_floats) * 4;
  for (int wk = 0; wk < workers; ++wk) ctx.scratch(wk, scratch_bytes);

  const float minus_inf = -std::numeric_limits<float>::infinity();
  float* out = p.out.ptr<float>();
  float* lse = p.lse.empty() ? nullptr : p.lse.ptr<float>();
  const i64 element = cache_element_bytes(kv.dtype);
  std::atomic<bool> overflow{false};

  // Rows of sequences with nothing cached see no key.
  for (i64 b = 0; b < s.batch; ++b) {
    if (kv.lengths[static_cast<std::size_t>(b)] > 0) continue;
    for (i64 t = 0; t < s.q_len; ++t)
      for (i64 h = 0; h < s.heads; ++h) {
        for (i64 e = 0; e < s.v_head_dim; ++e) out[p.out.offset({b, t, h, e})] = 0.0f;
        if (lse) lse[p.lse.offset({b, h, t})] = minus_inf;
      }
  }

  // Merges the partials of (b, h) in chunk order (kernels/lse_merge.h) and writes its rows of
  // out and lse.
  auto merge = [&](i64 b, i64 h, i64 chunks, const float* first, float* o) {
    for (i64 r = 0; r < plan.rows; ++r) {
      const i64 hg = r / s.q_len, t = r % s.q_len;
      const i64 head = h * s.group + hg;
      const kernels::LseMerged merged = kernels::lse_merge(
          chunks,
          [&](i64 c) {
            const float* part = first + c * plan.partial_floats;
            return kernels::LsePartial{part[r], part[plan.rows + r],
                                       part + 2 * plan.rows + r * plan.vp};
          },
          s.v_head_dim, o);
      if (!(merged.m < std::numeric_limits<float>::infinity()) || !std::isfinite(merged.l))
        overflow.store(true, std::memory_order_relaxed);
      const float inverse = kernels::lse_inverse(merged);
      for (i64 e = 0; e < s.v_head_dim; ++e) out[p.out.offset({b, t, head, e})] = o[e] * inverse;
      if (lse) lse[p.lse.offset({b, head, t})] = kernels::lse_finish(merged);
    }
  };

  ctx.parallel_for(tasks, [&](i64 task, int worker) {
    // Which (b, h, chunk) this is.
    i64 b = 0, first_task = 0;
    for (;; ++b) {
      const i64 n = s.kv_heads * chunks_of(kv.lengths[static_cast<std::size_t>(b)]);
      if (task < first_task + n) break;
      first_task += n;
    }
    const i64 length = kv.lengths[static_cast<std::size_t>(b)];
    const i64 chunks = chunks_of(length);
    const i64 h = (task - first_task) / chunks;
    const i64 chunk = (task - first_task) % chunks;

    float* scratch = static_cast<float*>(ctx.scratch(worker, scratch_bytes));
    float* q = scratch + plan.q_off;
    auto* row_end = reinterpret_cast<i64*>(scratch + plan.end_off);
    std::memset(q, 0, static_cast<std::size_t>(plan.rows * plan.dp) * 4);
    const float* q_src = p.q.ptr<const float>();
    for (i64 hg = 0; hg < s.group; ++hg)
      for (i64 t = 0; t < s.q_len; ++t) {
        const i64 r = hg * s.q_len + t;
        const float* src = q_src + p.q.offset({b, t, h * s.group + hg, 0});
        for (i64 d = 0; d < s.head_dim; ++d) q[r * plan.dp + d] = src[d * p.q.strides[3]];
        row_end[r] = length - s.q_len + t + 1;  // new token t sees positions <= L - q_len + t
      }

    float* part = partials + task * plan.partial_floats;
    const i64 row0 = (b * s.kv_heads + h) * kv.capacity;
    simd::DecodeChunk ch{
        .dtype = kv.dtype,
        .head_dim = s.head_dim,
        .v_head_dim = s.v_head_dim,
        .head_dim_pad = plan.dp,
        .v_head_dim_pad = plan.vp,
        .k = static_cast<const std::byte*>(kv.k) + row0 * s.head_dim * element,
        .v = static_cast<const std::byte*>(kv.v) + row0 * s.v_head_dim * element,
        .k_scale = kv.k_scale ? kv.k_scale + row0 : nullptr,
        .v_scale = kv.v_scale ? kv.v_scale + row0 : nullptr,
        .key_begin = chunk * decode_chunk_keys(),
        .key_end = std::min(length, (chunk + 1) * decode_chunk_keys()),
        .q = q,
        .row_end = row_end,
        .rows = plan.rows,
        .scale = s.scale,
        .k_block = scratch + plan.k_off,
        .v_block = scratch + plan.v_off,
        .p = scratch + plan.p_off,
        .m = part,
        .l = part + plan.rows,
        .acc = part + 2 * plan.rows,
    };
    plan.kernels->chunk(ch);

    // The last chunk of (b, h) to finish merges them all (acq_rel: it sees their partials).
    if (done[b * s.kv_heads + h].fetch_add(1, std::memory_order_acq_rel) + 1 == chunks)
      merge(b, h, chunks, partials + (first_task + h * chunks) * plan.partial_floats,
            scratch + plan.o_off);
  });
  check(!overflow.load(), "scores", "finite fp32 values of scale * q·k",
        "an overflow (|score| > 3.4e38): scale q or k down");

  AttentionStats stats;
  for (i64 b = 0; b < s.batch; ++b) {
    const i64 length = kv.lengths[static_cast<std::size_t>(b)];
    for (i64 t = 0; t < s.q_len; ++t) {
      const i64 visible = std::clamp<i64>(length - s.q_len + t + 1, 0, length);
      stats.score_macs += s.heads * visible * s.head_dim;
      stats.weighted_sum_macs += s.heads * visible * s.v_head_dim;
    }
  }
  stats.peak_score_entries = workers * simd::kDecodeKeyBlock;
  return kernels::counted(stats, s);
}

}  // namespace headcount
