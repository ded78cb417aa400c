// Ring attention forward (sequence over ranks). Each rank holds its zig-zag rows of Q, K, V
// (distributed.h: chunks r and 2P-1-r of 2P). Data path on rank r, P steps:
//   step 0: its own block (the caller's K and V, no copy), causal under a causal mask;
//   step t = 1 .. P-1: the block of rank s = r - t (mod P), in S pieces of its rows
//   (RingLayout::pieces): while the streaming kernel runs this rank's queries against piece j,
//   piece j + 1 comes in from rank s (MPI_Irecv) and this rank's own piece j + 1 goes out to
//   rank r + t (MPI_Isend, from the caller's K and V in place when they are contiguous and
//   B = 1); each partial (O, lse) is merged into the running state (m, l, acc) by log-sum-exp
//   (kernels/lse_merge.h, the decode kernel's merge).
// Why pieces, sent straight to the rank that needs them, rather than whole blocks forwarded
// round the ring: a rank then holds two pieces (the one in hand and the one arriving) besides
// its own rows, not two whole blocks, so its memory is its quarter of Q, K, V and out plus 2/S
// of a block (a ring in pieces would have to keep each forwarded block whole until the next
// step). The bytes per rank are the ring's: P-1 blocks sent, P-1 received. Every rank runs the
// same sequence of exchanges, each a shift by t, so a wait never waits on a rank that waits on
// it (all ranks post exchange k before any waits for it).
// Which queries meet which keys under a causal mask, for q chunks (r, 2P-1-r) and kv chunks
// (s, 2P-1-s): step 0 (s = r) is the local block's own causal attention (the local order of
// the rows is the global order); s < r: both q chunks see all of kv chunk s and none of
// 2P-1-s; s > r: q chunk 2P-1-r sees both kv chunks, q chunk r sees neither. So every step
// past the first is 2 chunk x chunk blocks of scores on every rank: no rank idles.
// Key padding: global key lengths; the keys of a block that pass them are a prefix of the
// block (its first chunk precedes its second), given to the kernel as a local key length (and
// a piece's, shifted to its first row).
// Progress: the kernel is called on slices of the queries, with MPI_Testall between them, so
// the transfer advances while the kernel runs (Open MPI moves large messages only inside
// MPI calls). Slicing changes no row's result (rows are independent); step 0's causal slices
// see a prefix of the keys (bottom-right aligned). Each slice's (O, lse) is merged before the
// next slice runs, so one slice's worth is held. Partials merged per row: 1 + (P-1) * S at
// most, in a fixed order (step, piece), so the result is the same on every run.
#include <algorithm>
#include <cstring>
#include <functional>
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
  const i64 S = lay.pieces();
  // A piece: rows [piece_begin(j), piece_begin(j + 1)) of a block, K then V, each [B, rows,
  // Hkv, *] contiguous. Two receive slots (the piece in hand, the one arriving) and, unless the
  // caller's K and V rows can be sent in place, two send slots.
  auto piece_begin = [&](i64 j) { return L2 * j / S; };
  const i64 max_piece_rows = (L2 + S - 1) / S;
  const i64 slot_floats = B * max_piece_rows * Hkv * (D + Dv);
  HEADCOUNT_CHECK(slot_floats <= INT32_MAX, "k, v",
                  "at most 2^31 - 1 floats of K and V per piece of a rank's block", slot_floats);
  const bool send_in_place = B == 1 && params.k.is_contiguous() && params.v.is_contiguous();
  std::vector<float> recv_slots[2], send_slots[2];
  if (P > 1)
    for (int i = 0; i < 2; ++i) {
      recv_slots[i].resize(static_cast<std::size_t>(slot_floats));
      if (!send_in_place) send_slots[i].resize(static_cast<std::size_t>(slot_floats));
    }

  // The running state (m, l, acc) of every local query row, and one slice's (O, lse).
  const i64 rows = B * L2 * H;  // row index (b, t, h) = (b * L2 + t) * H + h
  std::vector<float> m(static_cast<std::size_t>(rows)), l(static_cast<std::size_t>(rows));
  // acc lives in `out` itself when out is contiguous (the same [B, 2*chunk, heads, Dv] order):
  // one local output's worth of memory less; the last pass scales it in place.
  const bool acc_in_out = params.out.is_contiguous();
  std::vector<float> acc_storage(acc_in_out ? 0 : static_cast<std::size_t>(rows * Dv));
  float* const acc = acc_in_out ? params.out.ptr<float>() : acc_storage.data();
  const i64 slice_rows = P == 1 ? L2 : (L2 + kProgressSlices - 1) / kProgressSlices;
  std::vector<float> step_o(static_cast<std::size_t>(B * slice_rows * H * Dv));
  std::vector<float> step_lse(static_cast<std::size_t>(B * H * slice_rows));
  const float minus_inf = -std::numeric_limits<float>::infinity();
  bool started = false;  // the first partial of every row starts its state

  // Runs queries [q_begin, q_end) against keys `k`, `v` (rows [0, kv) of a block, the
  // block's key lengths `kl` already capped at kv), in slices of the queries with `progress`
  // between them, merging each slice's (O, lse) into the running state.
  AttentionStats stats;
  auto attend = [&](i64 q_begin, i64 q_end, const TensorView& k, const TensorView& v, bool causal,
                    const std::vector<i64>& kl, const std::function<void()>& progress) {
    const i64 kv_rows = k.shape[1];
    const i64 slices = P == 1 ? 1 : std::min<i64>(kProgressSlices, q_end - q_begin);
    for (i64 sl = 0; sl < slices; ++sl) {
      const i64 a = q_begin + (q_end - q_begin) * sl / slices,
                e = q_begin + (q_end - q_begin) * (sl + 1) / slices;
      if (a == e) continue;
      const i64 pr = e - a;
      // Under step 0's causal mask rows [a, e) see keys [0, e) at most: the kernel's
      // bottom-right alignment (query i sees j <= i + kv_len - q_len) then places them right.
      const i64 kv = causal ? e : kv_rows;
      std::vector<i64> kl_piece(kl);
      for (i64& x : kl_piece) x = std::min(x, kv);
      AttentionParams piece = base;
      piece.q = slice(params.q, 1, a, pr);
      piece.k = slice(k, 1, 0, kv);
      piece.v = slice(v, 1, 0, kv);
      piece.out = TensorView::contiguous(step_o.data(), DType::f32, {B, pr, H, Dv});
      piece.lse = TensorView::contiguous(step_lse.data(), DType::f32, {B, H, pr});
      piece.causal = causal;
      piece.key_lengths = kl_piece;
      const AttentionStats st = attention_streaming(ctx, piece);
      stats.score_macs += st.score_macs;
      stats.weighted_sum_macs += st.weighted_sum_macs;
      stats.peak_score_entries = std::max(stats.peak_score_entries, st.peak_score_entries);
      if (progress) progress();
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
          if (!started) {
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
  };

  // Exchange k = (t - 1) * S + j, piece j of step t: this rank's own piece j to rank r + t,
  // rank r - t's piece j into receive slot k % 2 (the other slot holds the piece in hand).
  // Tags (k, K or V) keep the messages apart.
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  auto slot_of = [&](int t, i64 j) { return static_cast<std::size_t>(((t - 1) * S + j) % 2); };
  auto post_piece = [&](int t, i64 j) {
    const int to = (rank + t) % P, from = (rank - t + P) % P;
    const i64 a = piece_begin(j), pr = piece_begin(j + 1) - a;
    const i64 kf = B * pr * Hkv * D, vf = B * pr * Hkv * Dv;
    float* in = recv_slots[slot_of(t, j)].data();
    const int tag = static_cast<int>(((t - 1) * S + j) * 2);
    requests.resize(requests.size() + 4);
    MPI_Request* rq = requests.data() + requests.size() - 4;
    detail::check_mpi(MPI_Irecv(in, static_cast<int>(kf), MPI_FLOAT, from, tag, comm, &rq[0]),
                      "Irecv");
    detail::check_mpi(
        MPI_Irecv(in + kf, static_cast<int>(vf), MPI_FLOAT, from, tag + 1, comm, &rq[1]), "Irecv");
    const float* k_out;
    const float* v_out;
    if (send_in_place) {  // B = 1: rows [a, a + pr) of K and of V are contiguous
      k_out = params.k.ptr<const float>() + a * Hkv * D;
      v_out = params.v.ptr<const float>() + a * Hkv * Dv;
    } else {
      float* out = send_slots[slot_of(t, j)].data();
      detail::pack(slice(params.k, 1, a, pr), out);
      detail::pack(slice(params.v, 1, a, pr), out + kf);
      k_out = out;
      v_out = out + kf;
    }
    detail::check_mpi(MPI_Isend(k_out, static_cast<int>(kf), MPI_FLOAT, to, tag, comm, &rq[2]),
                      "Isend");
    detail::check_mpi(MPI_Isend(v_out, static_cast<int>(vf), MPI_FLOAT, to, tag + 1, comm, &rq[3]),
                      "Isend");
    peers.insert(peers.end(), {from, from, to, to});
    if (comm_stats) {
      comm_stats->bytes_sent += (kf + vf) * 4;
      comm_stats->bytes_received += (kf + vf) * 4;
      comm_stats->messages += 2;
    }
  };
  auto test_all = [&] {
    if (requests.empty()) return;
    int done = 0;
    detail::check_mpi(
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
        "Testall");
  };
  // Waits for the first four requests (a piece's exchange) and drops them.
  auto wait_piece = [&](int t, i64 j) {
    detail::wait_watched(comm, {requests.data(), 4}, {peers.data(), 4}, watchdog,
                         concat("the K/V pieces of ring step ", t, " (piece ", j, ")"), comm_stats);
    requests.erase(requests.begin(), requests.begin() + 4);
    peers.erase(peers.begin(), peers.begin() + 4);
  };

  // Step 0: this rank's own block, causal under a causal mask, on the caller's K and V (no
  // copy); the first piece of step 1 is already on its way.
  std::vector<i64> key_lengths(static_cast<std::size_t>(B));
  if (P > 1) post_piece(1, 0);
  {
    const detail::RingStep st = detail::ring_step(lay, 0, rank, params.causal);
    detail::block_key_lengths(lay, rank, params.key_lengths, B, st.kv_rows, key_lengths);
    attend(st.q_begin, st.q_end, params.k, params.v, st.causal, key_lengths, test_all);
    started = true;
  }
  // Steps 1 .. P-1: the block of rank r - t, piece by piece; while piece j is attended to,
  // piece j + 1 (or the next step's first) is in flight. Every rank runs the same sequence of
  // exchanges, each a shift by t, so no rank waits on one that waits on it.
  for (int t = 1; t < P; ++t) {
    const int source = (rank - t + P) % P;
    const detail::RingStep st = detail::ring_step(lay, t, source, params.causal);
    detail::block_key_lengths(lay, source, params.key_lengths, B, st.kv_rows, key_lengths);
    for (i64 j = 0; j < S; ++j) {
      wait_piece(t, j);  // piece j is here, and the slot it was sent from is free again
      if (j + 1 < S)
        post_piece(t, j + 1);
      else if (t + 1 < P)
        post_piece(t + 1, 0);
      const i64 a = piece_begin(j), pr = piece_begin(j + 1) - a;
      const i64 kv = std::min(pr, std::max<i64>(0, st.kv_rows - a));  // the step's key prefix
      if (kv == 0) continue;
      const float* in = recv_slots[slot_of(t, j)].data();
      const TensorView k =
          TensorView::contiguous(const_cast<float*>(in), DType::f32, {B, pr, Hkv, D});
      const TensorView v = TensorView::contiguous(const_cast<float*>(in) + B * pr * Hkv * D,
                                                  DType::f32, {B, pr, Hkv, Dv});
      // The piece's key lengths: the block's, shifted to the piece's first row.
      std::vector<i64> kl(key_lengths);
      for (i64& x : kl) x = std::clamp<i64>(x - a, 0, kv);
      attend(st.q_begin, st.q_end, slice(k, 1, 0, kv), slice(v, 1, 0, kv), false, kl, test_all);
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
