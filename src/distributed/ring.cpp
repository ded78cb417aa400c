// Ring attention forward (sequence over ranks). Each rank holds its zig-zag rows of Q, K, V
// (distributed.h: chunks r and 2P-1-r of 2P). Data path on rank r, P steps:
//   step t: the K/V block in hand came from rank s = r - t (mod P); while the streaming kernel
//   runs this rank's queries against it, the block goes on to rank r+1 (MPI_Isend) and the
//   next one comes in from rank r-1 (MPI_Irecv) into the second buffer; the kernel's partial
//   (O, lse) is merged into the running state (m, l, acc) by log-sum-exp (kernels/lse_merge.h,
//   the decode kernel's merge); then the buffers swap.
// Which queries meet which keys under a causal mask, for q chunks (r, 2P-1-r) and kv chunks
// (s, 2P-1-s): step 0 (s = r) is the local block's own causal attention (the local order of
// the rows is the global order); s < r: both q chunks see all of kv chunk s and none of
// 2P-1-s; s > r: q chunk 2P-1-r sees both kv chunks, q chunk r sees neither. So every step
// past the first is 2 chunk x chunk blocks of scores on every rank: no rank idles.
// Key padding: global key lengths; the keys of a block that pass them are a prefix of the
// block (its first chunk precedes its second), given to the kernel as a local key length.
// Progress: the kernel is called on slices of the queries, with MPI_Testall between them, so
// the transfer advances while the kernel runs (Open MPI moves large messages only inside
// MPI calls). Slicing changes no row's result when the K/V block is the whole block (rows
// are independent); step 0's causal slices see a prefix of the keys (bottom-right aligned).
// Each slice's (O, lse) is merged before the next slice runs, so one slice's worth is held.
// Memory per rank beyond its inputs and output: two K/V blocks (the one in hand and the one
// arriving), the running (m, l) and one slice's (O, lse); the running acc is `out` itself.
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "distributed/comm.h"
#include "distributed/ring_plan.h"
#include "distributed/watchdog.h"
#include "headcount/distributed.h"
#include "headcount/error.h"
#include "kernels/lse_merge.h"

namespace headcount::distributed {

using headcount::detail::concat;
using i64 = std::int64_t;

RingLayout ring_layout(i64 seq_len, int ranks, int rank) {
  HEADCOUNT_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "rank", concat("0 to ", ranks - 1),
                  rank);
  HEADCOUNT_CHECK(
      seq_len >= 1 && seq_len % (2 * ranks) == 0, "seq_len",
      concat("a multiple of 2 x ranks = ", 2 * ranks, " (two equal chunks per rank, zig-zag)"),
      seq_len);
  RingLayout l;
  l.ranks = ranks;
  l.rank = rank;
  l.seq_len = seq_len;
  l.chunk = seq_len / (2 * ranks);
  l.first = rank * l.chunk;
  l.second = (2 * ranks - 1 - rank) * l.chunk;
  return l;
}

namespace {

// Query slices per kernel call while messages are in flight: enough MPI_Testall calls to
// keep the transfer moving, few enough that each slice is still a large kernel call.
constexpr i64 kProgressSlices = 8;

}  // namespace

namespace detail {

TensorView slice(const TensorView& t, int dim, i64 begin, i64 count) {
  TensorView s = t;
  s.data = static_cast<std::byte*>(t.data) +
           begin * t.strides[dim] * static_cast<i64>(dtype_size(t.dtype));
  s.shape[dim] = count;
  return s;
}

void pack(const TensorView& t, float* dst) {
  for (i64 b = 0; b < t.shape[0]; ++b)
    for (i64 r = 0; r < t.shape[1]; ++r)
      for (i64 h = 0; h < t.shape[2]; ++h)
        for (i64 d = 0; d < t.shape[3]; ++d) *dst++ = t.ptr<const float>()[t.offset({b, r, h, d})];
}

void unpack(const float* src, const TensorView& t) {
  for (i64 b = 0; b < t.shape[0]; ++b)
    for (i64 r = 0; r < t.shape[1]; ++r)
      for (i64 h = 0; h < t.shape[2]; ++h)
        for (i64 d = 0; d < t.shape[3]; ++d) t.ptr<float>()[t.offset({b, r, h, d})] = *src++;
}

RingCall check_ring_call(MPI_Comm comm, const AttentionParams& params, bool need_lse,
                         const Watchdog& watchdog) {
  const int rank = comm_rank(comm), P = comm_size(comm);
  RingCall call;
  call.base = params;
  call.base.key_lengths = {};
  AttentionShape& s = call.shape;
  agree(
      comm,
      [&] {
        HEADCOUNT_CHECK(params.window_left < 0 && params.window_right < 0, "window",
                        "unbounded on both sides (ring attention has no sliding window)",
                        concat(params.window_left, ", ", params.window_right));
        HEADCOUNT_CHECK(params.bias.empty(), "bias", "none (ring attention takes no additive bias)",
                        params.bias.shape_string());
        HEADCOUNT_CHECK(params.probs_mode == ProbsMode::none, "probs_mode",
                        "none (ring attention never forms the whole probability matrix)",
                        "per_head or averaged");
        if (need_lse)
          HEADCOUNT_CHECK(!params.lse.empty(), "lse", "the forward's lse (the backward reads it)",
                          "none");
        s = validate(call.base);
        HEADCOUNT_CHECK(s.q_len == s.kv_len, "kv_len",
                        concat("q_len = ", s.q_len, " (ring attention is self-attention)"),
                        s.kv_len);
        HEADCOUNT_CHECK(s.q_len % 2 == 0, "q_len",
                        "an even number of local rows (two zig-zag chunks)", s.q_len);
        call.layout = ring_layout(s.q_len * P, P, rank);
        if (!params.key_lengths.empty()) {
          HEADCOUNT_CHECK(static_cast<i64>(params.key_lengths.size()) == s.batch, "key_lengths",
                          concat(s.batch, " entries (one per batch element)"),
                          params.key_lengths.size());
          for (std::size_t b = 0; b < params.key_lengths.size(); ++b)
            HEADCOUNT_CHECK(
                params.key_lengths[b] >= 0 && params.key_lengths[b] <= call.layout.seq_len,
                concat("key_lengths[", b, "]"), concat("0 to seq_len = ", call.layout.seq_len),
                params.key_lengths[b]);
        }
      },
      watchdog);
  std::vector<i64> same{s.batch,    s.q_len,      s.heads,       s.kv_heads,
                        s.head_dim, s.v_head_dim, params.causal, !params.lse.empty()};
  for (i64 kl : params.key_lengths) same.push_back(kl);
  agree(
      comm,
      [&] { agree_values(comm, same, "ring attention shapes, masks and key_lengths", watchdog); },
      watchdog);
  return call;
}

RingStep ring_step(const RingLayout& lay, int t, int source, bool causal) {
  RingStep st{
      .q_begin = 0, .q_end = lay.local_rows(), .kv_rows = lay.local_rows(), .causal = false};
  if (t == 0)
    st.causal = causal;
  else if (causal && source < lay.rank)
    st.kv_rows = lay.chunk;
  else if (causal)
    st.q_begin = lay.chunk;
  return st;
}

void block_key_lengths(const RingLayout& lay, int source, std::span<const i64> key_lengths,
                       i64 batch, i64 kv_rows, std::vector<i64>& out) {
  const i64 chunk = lay.chunk, first = source * chunk,
            second = (2 * i64{lay.ranks} - 1 - source) * chunk;
  out.resize(static_cast<std::size_t>(batch));
  for (i64 b = 0; b < batch; ++b) {
    const i64 kl = key_lengths.empty() ? lay.seq_len : key_lengths[static_cast<std::size_t>(b)];
    out[static_cast<std::size_t>(b)] = std::min(
        kv_rows, std::clamp<i64>(kl - first, 0, chunk) + std::clamp<i64>(kl - second, 0, chunk));
  }
}

}  // namespace detail

using detail::slice;

AttentionStats ring_attention(MPI_Comm comm, Context& ctx, const AttentionParams& params,
                              CommStats* comm_stats, const Watchdog& watchdog) {
  const auto start = std::chrono::steady_clock::now();
  const int rank = detail::comm_rank(comm), P = detail::comm_size(comm);
  const detail::RingCall call = detail::check_ring_call(comm, params, false, watchdog);
  const AttentionShape& s = call.shape;
  const RingLayout& lay = call.layout;
  const AttentionParams& base = call.base;

  const i64 B = s.batch, L2 = lay.local_rows(), H = s.heads, Hkv = s.kv_heads;
  const i64 D = s.head_dim, Dv = s.v_head_dim;
  const i64 k_floats = B * L2 * Hkv * D, block_floats = k_floats + B * L2 * Hkv * Dv;
  HEADCOUNT_CHECK(block_floats <= INT32_MAX, "k, v", "at most 2^31 - 1 floats of K and V per rank",
                  block_floats);
  std::vector<float> blocks[2] = {std::vector<float>(static_cast<std::size_t>(block_floats)),
                                  std::vector<float>(static_cast<std::size_t>(block_floats))};
  detail::pack(params.k, blocks[0].data());
  detail::pack(params.v, blocks[0].data() + k_floats);

  // The running state (m, l, acc) of every local query row, and one step's (O, lse).
  const i64 rows = B * L2 * H;  // row index (b, t, h) = (b * L2 + t) * H + h
  std::vector<float> m(static_cast<std::size_t>(rows)), l(static_cast<std::size_t>(rows));
  // acc lives in `out` itself when out is contiguous (the same [B, 2*chunk, heads, Dv] order):
  // one local output's worth of memory less; the last pass scales it in place.
  const bool acc_in_out = params.out.is_contiguous();
  std::vector<float> acc_storage(acc_in_out ? 0 : static_cast<std::size_t>(rows * Dv));
  float* const acc = acc_in_out ? params.out.ptr<float>() : acc_storage.data();
  // One slice's (O, lse), merged before the next slice runs: 1/kProgressSlices of a local
  // output rather than a whole one (the slices are rows [a, e) of the step's queries).
  const i64 piece_rows = P == 1 ? L2 : (L2 + kProgressSlices - 1) / kProgressSlices;
  std::vector<float> step_o(static_cast<std::size_t>(B * piece_rows * H * Dv));
  std::vector<float> step_lse(static_cast<std::size_t>(B * H * piece_rows));
  const float minus_inf = -std::numeric_limits<float>::infinity();

  AttentionStats stats;
  const int right = (rank + 1) % P, left = (rank + P - 1) % P;
  std::vector<i64> key_lengths(static_cast<std::size_t>(B));
  for (int t = 0; t < P; ++t) {
    const int source = (rank - t + P) % P;  // whose K/V block is in hand
    float* cur = blocks[t % 2].data();
    MPI_Request requests[2];
    int posted = 0;
    if (t + 1 < P) {
      float* next = blocks[(t + 1) % 2].data();
      detail::check_mpi(
          MPI_Irecv(next, static_cast<int>(block_floats), MPI_FLOAT, left, t, comm, &requests[0]),
          "Irecv");
      detail::check_mpi(
          MPI_Isend(cur, static_cast<int>(block_floats), MPI_FLOAT, right, t, comm, &requests[1]),
          "Isend");
      posted = 2;
      if (comm_stats) {
        comm_stats->bytes_sent += block_floats * 4;
        comm_stats->bytes_received += block_floats * 4;
        comm_stats->messages += 1;
      }
    }

    // Which local queries meet which prefix of the block (header comment).
    const detail::RingStep step = detail::ring_step(lay, t, source, params.causal);
    const i64 q_begin = step.q_begin, q_end = step.q_end, kv_rows = step.kv_rows;
    const bool causal = step.causal;
    detail::block_key_lengths(lay, source, params.key_lengths, B, kv_rows, key_lengths);

    const TensorView k_block = TensorView::contiguous(cur, DType::f32, {B, L2, Hkv, D});
    const TensorView v_block = TensorView::contiguous(cur + k_floats, DType::f32, {B, L2, Hkv, Dv});
    // With P > 1 every step's query range is cut into kProgressSlices slices (at most
    // piece_rows rows each); with one rank it is one call over all rows (bitwise the kernel).
    const i64 slices = P == 1 ? 1 : std::min<i64>(kProgressSlices, q_end - q_begin);
    for (i64 sl = 0; sl < slices; ++sl) {
      const i64 a = q_begin + (q_end - q_begin) * sl / slices,
                e = q_begin + (q_end - q_begin) * (sl + 1) / slices;
      if (a == e) continue;
      const i64 pr = e - a;
      // Under step 0's causal mask rows [a, e) see keys [0, e) at most: the kernel's
      // bottom-right alignment (query i sees j <= i + kv_len - q_len) then places them right.
      const i64 kv = causal ? e : kv_rows;
      std::vector<i64> kl_piece(key_lengths);
      for (i64& x : kl_piece) x = std::min(x, kv);
      AttentionParams piece = base;
      piece.q = slice(params.q, 1, a, pr);
      piece.k = slice(k_block, 1, 0, kv);
      piece.v = slice(v_block, 1, 0, kv);
      piece.out = TensorView::contiguous(step_o.data(), DType::f32, {B, pr, H, Dv});
      piece.lse = TensorView::contiguous(step_lse.data(), DType::f32, {B, H, pr});
      piece.causal = causal;
      piece.key_lengths = kl_piece;
      const AttentionStats st = attention_streaming(ctx, piece);
      stats.score_macs += st.score_macs;
      stats.weighted_sum_macs += st.weighted_sum_macs;
      stats.peak_score_entries = std::max(stats.peak_score_entries, st.peak_score_entries);
      if (posted) {
        int done = 0;
        detail::check_mpi(MPI_Testall(posted, requests, &done, MPI_STATUSES_IGNORE), "Testall");
      }

      // Merge the slice's rows of every (b, h): the first block starts the state.
      ctx.parallel_for(B * pr, [&](i64 task, int) {
        const i64 b = task / pr, tp = task % pr, tq = a + tp;
        float merged[512];
        std::vector<float> heap;
        float* tmp = merged;
        if (Dv > 512) {
          heap.resize(static_cast<std::size_t>(Dv));
          tmp = heap.data();
        }
        for (i64 h = 0; h < H; ++h) {
          const i64 row = (b * L2 + tq) * H + h;
          const float lse_step = step_lse[static_cast<std::size_t>((b * H + h) * pr + tp)];
          float* acc_row = acc + row * Dv;
          const float* o = step_o.data() + ((b * pr + tp) * H + h) * Dv;
          if (t == 0) {
            m[static_cast<std::size_t>(row)] = lse_step;
            l[static_cast<std::size_t>(row)] = lse_step == minus_inf ? 0.0f : 1.0f;
            std::copy_n(o, Dv, acc_row);
            continue;
          }
          const kernels::LsePartial parts[2] = {
              {m[static_cast<std::size_t>(row)], l[static_cast<std::size_t>(row)], acc_row},
              {lse_step, 1.0f, o}};
          const kernels::LseMerged r = kernels::lse_merge(
              2, [&](i64 c) { return parts[c]; }, Dv, tmp);
          m[static_cast<std::size_t>(row)] = r.m;
          l[static_cast<std::size_t>(row)] = r.l;
          std::copy_n(tmp, Dv, acc_row);
        }
      });
    }

    if (posted) {
      const int peers[2] = {left, right};
      detail::wait_watched(comm, {requests, 2}, peers, watchdog,
                           concat("the K/V blocks of ring step ", t), comm_stats);
    }
  }

  // out = acc / L, lse = M + log L, row by row.
  ctx.parallel_for(B * L2, [&](i64 task, int) {
    const i64 b = task / L2, tq = task % L2;
    for (i64 h = 0; h < H; ++h) {
      const i64 row = (b * L2 + tq) * H + h;
      const kernels::LseMerged r{m[static_cast<std::size_t>(row)],
                                 l[static_cast<std::size_t>(row)]};
      const float inverse = kernels::lse_inverse(r);
      const float* a = acc + row * Dv;
      float* out = params.out.ptr<float>();
      for (i64 e = 0; e < Dv; ++e) out[params.out.offset({b, tq, h, e})] = a[e] * inverse;
      if (!params.lse.empty())
        params.lse.ptr<float>()[params.lse.offset({b, h, tq})] = kernels::lse_finish(r);
    }
  });
  if (comm_stats) comm_stats->total_seconds += detail::seconds_since(start);
  return stats;
}

}  // namespace headcount::distributed
