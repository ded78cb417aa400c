// The streaming (flash) forward kernel: exact attention that never holds more than one
// tile of scores per worker, whatever q_len, kv_len and heads are.
//
// Work is split into tasks of (batch, kv head, query tile). A task takes the tile's query
// positions for *every query head of the kv head's group* (rows = group x positions), so
// each K/V tile is read once for the whole group: that is where grouped-query attention
// saves memory traffic. A task
//   1. packs Q^T for its rows (depth x rows, zero-padded to the vector width);
//   2. walks the key tiles any of its positions can see: causal, window and padding masks
//      leave one interval of keys per query (kernels/masking.h), so tiles outside the
//      union of those intervals (above the causal diagonal, outside the window, in the
//      padding) are never computed;
//   3. per key tile of Tk keys:
//        S^T = scale · K · Q^T         K read in place (the caller's tensor, or the call's
//                                      packed copy of the head, see below): the
//                                      micro-kernel broadcasts K and loads Q^T vectors
//        mask the interval edges, add the bias (only tiles that need it)
//        online softmax down each column of S^T, i.e. per query, vectorised across
//        queries (simd::softmax_columns): running max m and sum l; the scores become
//        P = exp(S - m) and alpha = exp(m_old - m) rescales what was accumulated
//        acc = alpha · acc + P^T · V   V from the packed head, or copied per tile
//   4. finalises: O = acc / l, lse = m + log l; a row that saw no key gets zeros and
//      lse = -inf.
// The online softmax: for scores seen block by block, keep m = max so far and l = sum of
// exp(s - m). A block with maximum m_b moves m to m' = max(m, m_b) and rescales l and the
// accumulator by exp(m - m'); at the end softmax(s)·V = acc / l and lse = m + log l.
//
// Memory per worker: Q^T, one S^T tile and the accumulator, ~150 KiB at head_dim 64
// (tuning.h), borrowed from the context and allocated once. Traffic per task: Q once, each
// visible K/V tile once, O once. fp32 calls with >= 512 keys first copy each head's K and V
// into contiguous rows (at most 16 MiB of heads at a time, a context workspace):
// pack_head_rows says why, tuning.h has the limits. Each output row is produced by one task with a
// fixed order of operations, so results are bitwise the same for any number of threads.
//
// bf16 inputs: on amx_bf16 the tasks run on AMX tiles (streaming_amx.cpp); on avx512_bf16
// both products use vdpbf16ps (bf16 products, fp32 sums) and P
// is rounded to bf16 before P·V, as FlashAttention does; the softmax stays fp32. On other
// ISAs bf16 inputs are widened to fp32 as they are packed.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "headcount/attention.h"
#include "headcount/error.h"
#include "kernels/count_work.h"
#include "kernels/masking.h"
#include "kernels/streaming_amx.h"
#include "kernels/task_rows.h"
#include "kernels/validate.h"
#include "simd/tiles.h"
#include "simd/tuning.h"

namespace headcount {

using kernels::KeyRange;
using kernels::MaskSpec;
using i64 = std::int64_t;

namespace {

i64 round_up(i64 x, i64 multiple) { return (x + multiple - 1) / multiple * multiple; }
inline float to_f32(float x) { return x; }
inline float to_f32(bf16 x) { return to_float(x); }

// The sizes of one call, and where each buffer sits in a worker's scratch (4-byte words).
struct Plan {
  AttentionShape s;
  MaskSpec mask;
  const simd::TileKernels* tiles = nullptr;
  bool bf16_math = false;     // bf16 inputs on an ISA with a bf16 dot product
  bool direct_k = false;      // K rows read in place
  bool direct_v = false;      // V rows read in place
  bool packed_heads = false;  // fp32 K and V copied per head into [kv_len, head_dim | width]
  i64 positions = 0, rows = 0, rows_pad = 0, key_tile = 0;
  i64 ld = 0;     // leading dimension of Q^T, S^T and the bf16 P pairs (see below)
  i64 depth = 0;  // head_dim, or its bf16 pairs
  i64 width = 0;  // v_head_dim rounded up to the vector width
  i64 v_ld = 0;   // row stride of fp32 V copies (per tile or packed heads), see below
  i64 qt_off = 0, k_off = 0, s_off = 0, pp_off = 0, v_off = 0, vstage_off = 0, acc_off = 0,
      max_off = 0, sum_off = 0, alpha_off = 0, tile_max_off = 0, keys_off = 0, lo_off = 0,
      hi_off = 0, words = 0;

  Plan(const AttentionParams& p, const AttentionShape& shape, Isa isa) : s(shape) {
    mask = MaskSpec::from(p, s);
    tiles = &simd::tile_kernels(isa);
    const i64 w = tiles->vector_floats;
    bf16_math = p.q.dtype == DType::bf16 && tiles->scores_bf16 != nullptr;
    positions = std::min(tuning::streaming_query_tile(s.group), s.q_len);
    rows = positions * s.group;
    rows_pad = round_up(rows, w);
    // Q^T and S^T rows are walked down a column (a micro-kernel reads one column block of
    // every row of the tile). With 128 columns a row is 512 bytes, 8 cache lines, so those
    // reads fell into 8 of a 64-set L1's sets: the 96 rows of an S^T tile filled the 12 ways
    // of those sets exactly and every other access evicted one. An odd number of lines per
    // row spreads them over every set.
    ld = round_up(rows_pad, 16);
    if ((ld / 16) % 2 == 0) ld += 16;
    key_tile = tuning::streaming_key_tile();
    depth = bf16_math ? (s.head_dim + 1) / 2 : s.head_dim;
    width = round_up(s.v_head_dim, w);
    // The weighted sum reads V one column block (64 floats) of every key row at a time. Rows
    // wider than a block at a power-of-two stride (1 KiB at head_dim 256, 2 KiB at 512) put
    // those reads into a few of the L1's sets, and the 96 rows of a tile thrashed them: the
    // sum ran at 72% of the score product's rate at head_dim 512. Copies of V rows wider than
    // a block therefore take an odd number of cache lines, like Q^T and S^T; narrower rows
    // stay contiguous (a block is the whole row).
    v_ld = width;
    if (width > 64) {
      v_ld = round_up(width, 16);
      if ((v_ld / 16) % 2 == 0) v_ld += 16;
    }
    const bool in_f32 = p.q.dtype == DType::f32;
    if (bf16_math) {
      direct_k = p.k.strides[3] == 1 && s.head_dim % 2 == 0 && p.k.strides[1] % 2 == 0 &&
                 p.k.strides[0] % 2 == 0 && p.k.strides[2] % 2 == 0 &&
                 reinterpret_cast<std::uintptr_t>(p.k.data) % 4 == 0;
      direct_v = p.v.strides[3] == 1 && s.v_head_dim % w == 0;
    } else {
      // fp32 K is read in place (a block broadcasts 6 of its rows; packing them per tile cost
      // 3-4%). V is copied per tile into [keys, width] unless its rows are already contiguous
      // (a head-major layout) at a set-friendly stride (v_ld above) or the heads are packed: rows
      // heads·dim apart read in place were 12% slower at n 1024 (and 7-8% at n 128-384, head_dim
      // 64) than the copy.
      direct_k = in_f32 && p.k.strides[3] == 1;
      direct_v =
          in_f32 && p.v.strides[3] == 1 && p.v.strides[1] == s.v_head_dim && s.v_head_dim == v_ld;
      // Long sequences: each head's K and V are copied once per call into contiguous rows
      // (pack_heads()), and every tile reads them in place from there.
      // A head whose copy alone would exceed the budget (n > 32768 at head_dim 64) is read in
      // place: the copy never holds more than the budget, and never fails for lack of memory
      // where the kernel itself would not.
      packed_heads =
          in_f32 && s.kv_len >= tuning::streaming_pack_heads_min_keys() &&
          s.kv_len * (s.head_dim + v_ld) * 4 <= tuning::streaming_pack_heads_budget_bytes() &&
          !(p.k.strides[3] == 1 && p.k.strides[1] == s.head_dim && p.v.strides[3] == 1 &&
            p.v.strides[1] == s.v_head_dim && s.v_head_dim == v_ld);
      if (packed_heads) direct_k = direct_v = true;
    }
    const i64 k_words = direct_k ? 0 : key_tile * depth;
    const i64 v_words = bf16_math ? key_tile / 2 * width : (direct_v ? 0 : key_tile * v_ld);
    const i64 vstage_words = bf16_math && !direct_v ? key_tile * width / 2 : 0;
    auto next = [](i64 offset, i64 words) { return offset + round_up(words, 16); };
    qt_off = 0;
    k_off = next(qt_off, depth * ld);
    s_off = next(k_off, k_words);
    pp_off = next(s_off, key_tile * ld);
    v_off = next(pp_off, bf16_math ? key_tile / 2 * ld : 0);
    vstage_off = next(v_off, v_words);
    acc_off = next(vstage_off, vstage_words);
    max_off = next(acc_off, rows_pad * width);
    sum_off = next(max_off, rows_pad);
    alpha_off = next(sum_off, rows_pad);
    tile_max_off = next(alpha_off, rows_pad);
    keys_off = next(tile_max_off, rows_pad);
    lo_off = next(keys_off, positions * 4);  // KeyRange = two int64
    hi_off = next(lo_off, rows_pad);
    words = hi_off + rows_pad;
  }

  // Floats of one packed head: K [kv_len, head_dim], then V [kv_len, width] (zero-padded),
  // rows v_ld apart.
  i64 packed_head_floats() const { return s.kv_len * (s.head_dim + v_ld); }
};

// Where one (batch, kv head)'s K and V rows are read: the caller's tensors (rows strides[1]
// apart) or the call's packed copy (contiguous rows).
template <typename T>
struct KvRows {
  const T* k = nullptr;
  i64 k_stride = 0;
  const T* v = nullptr;
  i64 v_stride = 0;
};

template <typename T>
KvRows<T> caller_rows(const AttentionParams& p, i64 b, i64 kv_head) {
  return {p.k.ptr<const T>() + p.k.offset({b, 0, kv_head, 0}), p.k.strides[1],
          p.v.ptr<const T>() + p.v.offset({b, 0, kv_head, 0}), p.v.strides[1]};
}

// Copies K and V rows [row0, row0 + rows) of (batch, kv head) `pair` into its packed head.
// In the caller's [batch, seq, heads, dim] tensors one head's rows sit heads·dim floats apart:
// a power-of-two stride (2 KiB for 8 heads of 64) that maps the 4 lines of every row into
// 1/8 of the L2's sets, so a head's K and V (1 MiB at n 2048) thrashed a 2 MiB L2 and every
// tile came from L3 at a stride the prefetchers do not follow. Contiguous, they stream.
void pack_head_rows(const Plan& plan, const AttentionParams& p, i64 pair, i64 row0, i64 rows,
                    float* head) {
  const AttentionShape& s = plan.s;
  const KvRows<float> src = caller_rows<float>(p, pair / s.kv_heads, pair % s.kv_heads);
  float* k = head + row0 * s.head_dim;
  float* v = head + s.kv_len * s.head_dim + row0 * plan.v_ld;
  const auto k_bytes = static_cast<std::size_t>(s.head_dim) * sizeof(float);
  const auto v_bytes = static_cast<std::size_t>(s.v_head_dim) * sizeof(float);
  const auto pad_bytes = static_cast<std::size_t>(plan.width - s.v_head_dim) * sizeof(float);
  for (i64 r = 0; r < rows; ++r) {
    std::memcpy(k + r * s.head_dim, src.k + (row0 + r) * src.k_stride, k_bytes);
    std::memcpy(v + r * plan.v_ld, src.v + (row0 + r) * src.v_stride, v_bytes);
    if (pad_bytes) std::memset(v + r * plan.v_ld + s.v_head_dim, 0, pad_bytes);
  }
}

// Q^T of one task: column r = hg * n + i holds query (row0 + i) of head (kv_head * group +
// hg); f32 [depth, rows_pad] or bf16 pairs of d [depth, rows_pad]. Padding columns are 0.
// Columns are filled 16 at a time, depth by depth, so the writes run along a row of Q^T: a
// column at a time would write one float per cache line of a 512-byte stride, and those lines
// fall into a few L1 sets (this pack once took 3% of a long-sequence call). fp32 rows of unit
// stride go through the ISA's transpose (16 x 16 blocks in registers on AVX-512).
template <typename T>
void pack_q_transposed(const Plan& plan, const TensorView& q, i64 b, i64 kv_head, i64 row0, i64 n,
                       std::uint32_t* dst) {
  std::memset(dst, 0, static_cast<std::size_t>(plan.depth * plan.ld) * 4);
  const T* src = q.ptr<const T>();
  const i64 ld = plan.ld, step = q.strides[3], rows = n * plan.s.group;
  constexpr i64 kBlock = 16;
  const T* row_of[kBlock];
  for (i64 r0 = 0; r0 < rows; r0 += kBlock) {
    const i64 m = std::min(kBlock, rows - r0);
    for (i64 j = 0; j < m; ++j) {
      const i64 hg = (r0 + j) / n, i = (r0 + j) % n;
      row_of[j] = src + q.offset({b, row0 + i, kv_head * plan.s.group + hg, 0});
    }
    if constexpr (std::is_same_v<T, bf16>) {
      if (plan.bf16_math) {
        for (i64 d = 0; d < plan.s.head_dim; ++d) {
          std::uint32_t* out = dst + (d / 2) * ld + r0;
          const int shift = 16 * static_cast<int>(d % 2);
          for (i64 j = 0; j < m; ++j)
            out[j] |= static_cast<std::uint32_t>(row_of[j][d * step].bits) << shift;
        }
        continue;
      }
    }
    if constexpr (std::is_same_v<T, float>) {
      if (step == 1) {
        plan.tiles->transpose_rows_f32(row_of, m, plan.s.head_dim,
                                       reinterpret_cast<float*>(dst) + r0, ld);
        continue;
      }
    }
    for (i64 d = 0; d < plan.s.head_dim; ++d) {
      float* out = reinterpret_cast<float*>(dst) + d * ld + r0;
      for (i64 j = 0; j < m; ++j) out[j] = to_f32(row_of[j][d * step]);
    }
  }
}

// K rows of one tile when they cannot be read in place: f32 [cols, head_dim] or bf16 pairs.
template <typename T>
void pack_k(const Plan& plan, const TensorView& k, i64 b, i64 kv_head, i64 col0, i64 cols,
            std::uint32_t* dst) {
  const T* src = k.ptr<const T>();
  for (i64 c = 0; c < cols; ++c) {
    const T* row = src + k.offset({b, col0 + c, kv_head, 0});
    if constexpr (std::is_same_v<T, bf16>) {
      if (plan.bf16_math) {
        std::uint32_t* out = dst + c * plan.depth;
        std::memset(out, 0, static_cast<std::size_t>(plan.depth) * 4);
        for (i64 d = 0; d < plan.s.head_dim; ++d)
          out[d / 2] |= static_cast<std::uint32_t>(row[d * k.strides[3]].bits) << (16 * (d % 2));
        continue;
      }
    }
    float* out = reinterpret_cast<float*>(dst) + c * plan.depth;
    for (i64 d = 0; d < plan.s.head_dim; ++d) out[d] = to_f32(row[d * k.strides[3]]);
  }
}

// V rows of one tile, [cols, width] zero-padded, as f32 rows plan.v_ld apart (or as bf16
// rows plan.width apart for the pairing step).
template <typename T, typename Out>
void pack_v(const Plan& plan, const TensorView& v, i64 b, i64 kv_head, i64 col0, i64 cols,
            Out* dst) {
  const T* src = v.ptr<const T>();
  const i64 ld = std::is_same_v<Out, float> ? plan.v_ld : plan.width;
  if constexpr (std::is_same_v<T, float> && std::is_same_v<Out, float>) {
    if (v.strides[3] == 1 && plan.s.v_head_dim == plan.width) {
      for (i64 c = 0; c < cols; ++c)
        std::memcpy(dst + c * ld, src + v.offset({b, col0 + c, kv_head, 0}),
                    static_cast<std::size_t>(plan.width) * sizeof(float));
      return;
    }
  }
  std::memset(dst, 0, static_cast<std::size_t>(cols * ld) * sizeof(Out));
  for (i64 c = 0; c < cols; ++c) {
    const T* row = src + v.offset({b, col0 + c, kv_head, 0});
    for (i64 e = 0; e < plan.s.v_head_dim; ++e) {
      if constexpr (std::is_same_v<Out, std::uint16_t>) {
        if constexpr (std::is_same_v<T, bf16>) dst[c * ld + e] = row[e * v.strides[3]].bits;
      } else {
        dst[c * ld + e] = to_f32(row[e * v.strides[3]]);
      }
    }
  }
}

using kernels::TaskResult;

constexpr int kSlotPackedHeads = 11;  // the context workspace holding the packed K and V heads

// Asks for `rows` rows of `row_bytes` each, `stride` bytes apart, to be brought into L2. The
// next K/V tile is requested while the current one is computed: K and V rows of one head sit
// H·d floats apart in the caller's [batch, seq, heads, dim] tensors, a stride the hardware
// prefetchers do not follow across a tile; once a head's K/V outgrow the L2 (n·d·8 bytes:
// 2 MiB at n 4096, d 64) a tile's rows come from L3 on demand. Measured: ~7% at n 8192, one
// thread; inside the noise at n <= 4096 (bench/results/2026-12-02d-attention-prefetch.txt).
// Since fp32 calls of >= 512 keys read a packed copy of each head (contiguous rows, which the
// hardware prefetchers follow), this serves the shorter fp32 calls and the bf16 ones.
void prefetch_rows(const void* first, i64 rows, i64 stride, i64 row_bytes) {
  const char* row = static_cast<const char*>(first);
  for (i64 r = 0; r < rows; ++r, row += stride)
    for (i64 line = 0; line < row_bytes; line += 64) __builtin_prefetch(row + line, 0, 2);
}

template <typename T>
TaskResult run_task(const Plan& plan, const AttentionParams& p, i64 task, std::uint32_t* scratch,
                    const float* packed) {
  const AttentionShape& s = plan.s;
  const simd::TileKernels& tiles = *plan.tiles;
  const i64 q_tiles = (s.q_len + plan.positions - 1) / plan.positions;
  const i64 b = task / (s.kv_heads * q_tiles);
  const i64 kv_head = (task / q_tiles) % s.kv_heads;
  const i64 row0 = (task % q_tiles) * plan.positions;
  const i64 n = std::min(plan.positions, s.q_len - row0);  // positions in this tile
  const i64 rows = n * s.group;
  const i64 ld = plan.ld, cols_q = plan.rows_pad;  // leading dimension, query columns
  const i64 key_length = kernels::key_length_of(p, s, b);
  const float minus_inf = -std::numeric_limits<float>::infinity();

  std::uint32_t* qt = scratch + plan.qt_off;
  std::uint32_t* k_pack = scratch + plan.k_off;
  float* st = reinterpret_cast<float*>(scratch + plan.s_off);
  std::uint32_t* p_pairs = scratch + plan.pp_off;
  std::uint32_t* v_pack = scratch + plan.v_off;
  auto* v_stage = reinterpret_cast<std::uint16_t*>(scratch + plan.vstage_off);
  float* acc = reinterpret_cast<float*>(scratch + plan.acc_off);
  float* max = reinterpret_cast<float*>(scratch + plan.max_off);
  float* sum = reinterpret_cast<float*>(scratch + plan.sum_off);
  float* alpha = reinterpret_cast<float*>(scratch + plan.alpha_off);
  float* tile_max = reinterpret_cast<float*>(scratch + plan.tile_max_off);
  auto* keys_of = reinterpret_cast<KeyRange*>(scratch + plan.keys_off);
  // Each score column's visible keys in the current tile; padding columns see the whole tile.
  auto* col_lo = reinterpret_cast<std::int32_t*>(scratch + plan.lo_off);
  auto* col_hi = reinterpret_cast<std::int32_t*>(scratch + plan.hi_off);
  std::fill(col_lo, col_lo + cols_q, 0);
  std::fill(col_hi, col_hi + cols_q, std::numeric_limits<std::int32_t>::max());

  const KeyRange union_keys = kernels::visible_keys(plan.mask, row0, n, key_length, keys_of);
  // Every query of the task sees every key (no causal or window mask, no padding): then no tile
  // is partial, and without a bias the per-tile interval loop below has nothing to say (it
  // was ~1% of a call at head_dim 64).
  bool every_key = true;
  for (i64 i = 0; i < n; ++i)
    every_key = every_key && keys_of[i].begin == 0 && keys_of[i].end == s.kv_len;
  std::fill(max, max + cols_q, minus_inf);
  std::fill(sum, sum + cols_q, 0.0f);
  std::memset(acc, 0, static_cast<std::size_t>(cols_q * plan.width) * sizeof(float));
  pack_q_transposed<T>(plan, p.q, b, kv_head, row0, n, qt);

  TaskResult result;
  KvRows<T> kv = caller_rows<T>(p, b, kv_head);
  if constexpr (std::is_same_v<T, float>) {
    if (packed != nullptr) kv = {packed, s.head_dim, packed + s.kv_len * s.head_dim, plan.v_ld};
  }
  const float* bias = p.bias.empty() ? nullptr : p.bias.ptr<const float>();
  const i64 tk = plan.key_tile;
  // Key tiles start at multiples of Tk, so every query tile sees the same tiling.
  const i64 first =
      union_keys.begin >= union_keys.end ? union_keys.end : union_keys.begin / tk * tk;
  for (i64 col0 = first; col0 < union_keys.end; col0 += tk) {
    const i64 cols = std::min(tk, s.kv_len - col0);
    result.entries += rows * cols;
    // Packed heads are contiguous rows, which the hardware prefetchers follow by themselves.
    if (packed == nullptr && col0 + tk < union_keys.end) {
      const i64 next_cols = std::min(tk, union_keys.end - (col0 + tk));
      if (plan.direct_k)
        prefetch_rows(kv.k + (col0 + tk) * kv.k_stride, next_cols,
                      kv.k_stride * static_cast<i64>(sizeof(T)),
                      s.head_dim * static_cast<i64>(sizeof(T)));
      if (plan.direct_v)
        prefetch_rows(kv.v + (col0 + tk) * kv.v_stride, next_cols,
                      kv.v_stride * static_cast<i64>(sizeof(T)),
                      s.v_head_dim * static_cast<i64>(sizeof(T)));
    }

    // Each query's visible keys in this tile. Where every query sees the whole tile and there
    // is no bias, the score product also returns each column's maximum (the softmax's first
    // pass over the tile, a fifth of it at head_dim 64); otherwise the mask and the bias
    // change the scores after it and the softmax finds the maximum itself.
    bool partial = false;
    for (i64 i = 0; i < n && !(every_key && bias == nullptr); ++i) {
      const i64 lo = std::clamp(keys_of[i].begin - col0, i64{0}, cols);
      const i64 hi = std::clamp(keys_of[i].end - col0, lo, cols);
      partial = partial || lo != 0 || hi != cols;
      for (i64 hg = 0; hg < s.group; ++hg) {
        col_lo[hg * n + i] = static_cast<std::int32_t>(lo);
        col_hi[hg * n + i] = static_cast<std::int32_t>(hi);
      }
    }
    float* fused_max = plan.bf16_math || partial || bias != nullptr
                           ? nullptr
                           : tile_max;  // (not the bf16 product)

    // S^T = scale · K · Q^T
    if (plan.bf16_math) {
      const std::uint32_t* k_rows = k_pack;
      i64 ldk = plan.depth;
      if (plan.direct_k) {
        k_rows = reinterpret_cast<const std::uint32_t*>(kv.k + col0 * kv.k_stride);
        ldk = kv.k_stride / 2;
      } else {
        pack_k<T>(plan, p.k, b, kv_head, col0, cols, k_pack);
      }
      tiles.scores_bf16(k_rows, ldk, qt, ld, plan.depth, st, ld, cols, cols_q, s.scale);
    } else {
      const float* k_rows = reinterpret_cast<const float*>(k_pack);
      i64 ldk = plan.depth;
      if (plan.direct_k) {
        k_rows = reinterpret_cast<const float*>(kv.k + col0 * kv.k_stride);
        ldk = kv.k_stride;
      } else {
        pack_k<T>(plan, p.k, b, kv_head, col0, cols, k_pack);
      }
      tiles.scores_f32(k_rows, ldk, reinterpret_cast<const float*>(qt), ld, plan.depth, st, ld,
                       cols, cols_q, s.scale, fused_max);
    }

    // The mask at the edges of each query's key interval (a vectorised pass over the tile when
    // any query sees less than the whole tile), and the bias.
    if (partial) tiles.mask_columns(st, ld, cols, cols_q, col_lo, col_hi);
    for (i64 i = 0; i < n && bias; ++i) {
      const i64 lo = col_lo[i], hi = col_hi[i];
      for (i64 hg = 0; hg < s.group; ++hg) {
        const i64 head = kv_head * s.group + hg;
        const float* bias_row =
            bias + p.bias.offset({p.bias.shape[0] == 1 ? 0 : b, p.bias.shape[1] == 1 ? 0 : head,
                                  row0 + i, col0});
        float* column = st + hg * n + i;
        for (i64 c = lo; c < hi; ++c) column[c * ld] += bias_row[c * p.bias.strides[3]];
      }
    }

    // P = exp(S - m), alpha, l: per query, across queries at once.
    tiles.softmax_columns(st, ld, cols, cols_q, max, sum, alpha, fused_max);

    // acc = alpha · acc + P^T · V
    if (plan.bf16_math) {
      tiles.pair_rows_f32(st, ld, cols, cols_q, p_pairs, ld);
      if (plan.direct_v) {
        const auto* v_rows = reinterpret_cast<const std::uint16_t*>(kv.v + col0 * kv.v_stride);
        tiles.pair_rows_bf16(v_rows, kv.v_stride, cols, plan.width, v_pack, plan.width);
      } else {
        pack_v<T>(plan, p.v, b, kv_head, col0, cols, v_stage);
        tiles.pair_rows_bf16(v_stage, plan.width, cols, plan.width, v_pack, plan.width);
      }
      tiles.weighted_sum_bf16(p_pairs, 1, ld, v_pack, plan.width, (cols + 1) / 2, acc, plan.width,
                              rows, plan.width, alpha);
    } else {
      const float* v_rows = reinterpret_cast<const float*>(v_pack);
      i64 ldv = plan.v_ld;
      if (plan.direct_v) {
        v_rows = reinterpret_cast<const float*>(kv.v + col0 * kv.v_stride);
        ldv = kv.v_stride;
      } else {
        pack_v<T>(plan, p.v, b, kv_head, col0, cols, reinterpret_cast<float*>(v_pack));
      }
      tiles.weighted_sum_f32(st, 1, ld, v_rows, ldv, cols, acc, plan.width, rows, plan.width,
                             alpha);
    }
  }

  if (kernels::write_rows(p, s, b, kv_head, row0, n, acc, plan.width, max, sum, tiles.scale_f32))
    result.overflow = true;
  return result;
}

}  // namespace

AttentionStats attention_streaming(Context& ctx, const AttentionParams& p) {
  check(p.probs_mode == ProbsMode::none, "probs_mode",
        "none on the streaming kernel (only the reference materialises probabilities)",
        p.probs_mode == ProbsMode::per_head ? "per_head" : "averaged");
  const AttentionShape s = kernels::validate_layout(p);
  kernels::check_finite_inputs(ctx, p);
  if (p.q.dtype == DType::bf16 && ctx.isa() == Isa::amx_bf16)
    return kernels::counted(kernels::streaming_amx(ctx, p, s), s);
  const Plan plan(p, s, ctx.isa());
  const i64 q_tiles = (s.q_len + plan.positions - 1) / plan.positions;
  const auto scratch_bytes = static_cast<std::size_t>(plan.words) * 4;
  const i64 tile_entries = plan.rows * plan.key_tile;
  if (!plan.packed_heads) {
    return kernels::counted(
        kernels::run_tasks(ctx, s, s.batch * s.kv_heads * q_tiles, scratch_bytes, tile_entries,
                           [&](i64 task, void* scratch) {
                             auto* words = static_cast<std::uint32_t*>(scratch);
                             return p.q.dtype == DType::bf16
                                        ? run_task<bf16>(plan, p, task, words, nullptr)
                                        : run_task<float>(plan, p, task, words, nullptr);
                           }),
        s);
  }

  // Packed heads: (batch, kv head) pairs in chunks whose packed K and V fit the budget; each
  // chunk is copied (one region), then its tasks run (a second region). A pair's tasks read
  // only its own packed rows, so the chunking never changes a result.
  const i64 pairs = s.batch * s.kv_heads;
  const i64 head_floats = plan.packed_head_floats();
  const i64 chunk =
      std::min(tuning::streaming_pack_heads_budget_bytes() / (head_floats * 4), pairs);  // >= 1
  auto* packed = static_cast<float*>(
      ctx.workspace(kSlotPackedHeads, static_cast<std::size_t>(chunk * head_floats) * 4));
  const i64 copy_rows = tuning::streaming_pack_heads_copy_rows();
  const i64 copies_per_pair = (s.kv_len + copy_rows - 1) / copy_rows;
  AttentionStats total;
  for (i64 g0 = 0; g0 < pairs; g0 += chunk) {
    const i64 g1 = std::min(pairs, g0 + chunk);
    ctx.parallel_for((g1 - g0) * copies_per_pair, [&](i64 t, int) {
      const i64 g = t / copies_per_pair, row0 = (t % copies_per_pair) * copy_rows;
      pack_head_rows(plan, p, g0 + g, row0, std::min(copy_rows, s.kv_len - row0),
                     packed + g * head_floats);
    });
    const AttentionStats stats = kernels::run_tasks(
        ctx, s, (g1 - g0) * q_tiles, scratch_bytes, tile_entries, [&](i64 task, void* scratch) {
          return run_task<float>(plan, p, g0 * q_tiles + task, static_cast<std::uint32_t*>(scratch),
                                 packed + (task / q_tiles) * head_floats);
        });
    total.score_macs += stats.score_macs;
    total.weighted_sum_macs += stats.weighted_sum_macs;
    total.peak_score_entries = std::max(total.peak_score_entries, stats.peak_score_entries);
  }
  return kernels::counted(total, s);
}

}  // namespace headcount
