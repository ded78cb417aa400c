// Ring attention backward (FlashAttention-2's backward per block, attention_backward.h).
// Each rank holds its zig-zag rows of Q, K, V, of the forward's out and lse, and of dO. With
// the final lse of every query row, a block's P_ij = exp(s_ij - lse_i) are already the
// global probabilities, so each (queries, block) pair's gradients are exact parts of the sums:
//   dQ_i = sum over blocks (local: accumulated in place, in block order),
//   dK_j, dV_j = sum over the ranks' queries: they travel with their K/V block.
// Data path on rank r, step t = 0 .. P-1, holding the block of rank s = r - t (mod P):
//   K/V of the block go on to rank r+1 (MPI_Isend) and the next come in (MPI_Irecv) while the
//   backward kernel runs on the queries that meet the block (the forward's schedule,
//   ring_plan.h); the block's dK/dV accumulators then get this rank's part and follow the
//   K/V (sent after the kernel: they are what it changed). After the last step one more send
//   of dK/dV to rank r+1 brings each block's gradients home.
// First contributions are copied, later ones added, so with one rank the gradients are
// bitwise the streaming backward's.
#include <algorithm>
#include <vector>

#include "distributed/comm.h"
#include "distributed/ring_plan.h"
#include "distributed/watchdog.h"
#include "headcount/attention_backward.h"
#include "headcount/distributed.h"
#include "headcount/error.h"

namespace headcount::distributed {

using headcount::detail::concat;
using i64 = std::int64_t;
using detail::slice;

AttentionBackwardStats ring_attention_backward(MPI_Comm comm, Context& ctx,
                                               const AttentionParams& params,
                                               const AttentionGrads& grads, CommStats* comm_stats,
                                               const Watchdog& watchdog) {
  const auto start = std::chrono::steady_clock::now();
  const int rank = detail::comm_rank(comm), P = detail::comm_size(comm);
  const detail::RingCall call = detail::check_ring_call(comm, params, true, watchdog);
  detail::agree(
      comm,
      [&] {
        HEADCOUNT_CHECK(grads.d_bias.empty(), "d_bias", "none (ring attention takes no bias)",
                        grads.d_bias.shape_string());
        validate_backward(call.base, grads);
      },
      watchdog);
  const AttentionShape& s = call.shape;
  const RingLayout& lay = call.layout;
  const i64 B = s.batch, L2 = lay.local_rows(), H = s.heads, Hkv = s.kv_heads, D = s.head_dim,
            Dv = s.v_head_dim;
  const i64 k_floats = B * L2 * Hkv * D, block_floats = k_floats + B * L2 * Hkv * Dv;
  HEADCOUNT_CHECK(block_floats <= INT32_MAX, "k, v", "at most 2^31 - 1 floats of K and V per rank",
                  block_floats);
  auto buffer = [](i64 n) { return std::vector<float>(static_cast<std::size_t>(n)); };
  std::vector<float> kv[2] = {buffer(block_floats), buffer(block_floats)};  // K | V
  std::vector<float> g[2] = {buffer(block_floats), buffer(block_floats)};   // dK | dV
  detail::pack(params.k, kv[0].data());
  detail::pack(params.v, kv[0].data() + k_floats);
  std::vector<float> dq = buffer(B * L2 * H * D), dq_step = buffer(B * L2 * H * D);
  std::vector<float> dkv_step = buffer(block_floats);
  const TensorView dq_view = TensorView::contiguous(dq_step.data(), DType::f32, {B, L2, H, D});

  AttentionBackwardStats stats;
  const int right = (rank + 1) % P, left = (rank + P - 1) % P;
  std::vector<i64> key_lengths;
  auto exchange = [&](float* send, float* receive, int tag, MPI_Request* requests) {
    detail::check_mpi(MPI_Irecv(receive, static_cast<int>(block_floats), MPI_FLOAT, left, tag, comm,
                                &requests[0]),
                      "Irecv");
    detail::check_mpi(
        MPI_Isend(send, static_cast<int>(block_floats), MPI_FLOAT, right, tag, comm, &requests[1]),
        "Isend");
    if (comm_stats) {
      comm_stats->bytes_sent += block_floats * 4;
      comm_stats->bytes_received += block_floats * 4;
      comm_stats->messages += 1;
    }
  };
  auto wait = [&](MPI_Request* requests) {
    const int peers[2] = {left, right};
    detail::wait_watched(comm, {requests, 2}, peers, watchdog, "a block of the ring backward",
                         comm_stats);
  };

  for (int t = 0; t < P; ++t) {
    const int source = (rank - t + P) % P;
    float* cur_kv = kv[t % 2].data();
    float* cur_g = g[t % 2].data();
    MPI_Request kv_requests[2];
    const bool more = t + 1 < P;
    if (more) exchange(cur_kv, kv[(t + 1) % 2].data(), 1000 + 2 * t, kv_requests);

    const detail::RingStep step = detail::ring_step(lay, t, source, params.causal);
    detail::block_key_lengths(lay, source, params.key_lengths, B, step.kv_rows, key_lengths);
    const i64 rows = step.q_end - step.q_begin;
    AttentionParams piece = call.base;
    piece.q = slice(params.q, 1, step.q_begin, rows);
    piece.out = slice(params.out, 1, step.q_begin, rows);
    piece.lse = slice(params.lse, 2, step.q_begin, rows);
    piece.k = TensorView::contiguous(cur_kv, DType::f32, {B, L2, Hkv, D});
    piece.v = TensorView::contiguous(cur_kv + k_floats, DType::f32, {B, L2, Hkv, Dv});
    piece.k = slice(piece.k, 1, 0, step.kv_rows);
    piece.v = slice(piece.v, 1, 0, step.kv_rows);
    piece.causal = step.causal;
    piece.key_lengths = key_lengths;
    const TensorView dk_view = TensorView::contiguous(dkv_step.data(), DType::f32, {B, L2, Hkv, D});
    const TensorView dv_view =
        TensorView::contiguous(dkv_step.data() + k_floats, DType::f32, {B, L2, Hkv, Dv});
    AttentionGrads pg{.d_out = slice(grads.d_out, 1, step.q_begin, rows),
                      .d_q = slice(dq_view, 1, step.q_begin, rows),
                      .d_k = slice(dk_view, 1, 0, step.kv_rows),
                      .d_v = slice(dv_view, 1, 0, step.kv_rows)};
    const AttentionBackwardStats st = attention_backward_streaming(ctx, piece, pg);
    stats.macs += st.macs;
    stats.peak_score_entries = std::max(stats.peak_score_entries, st.peak_score_entries);

    // dQ rows of the queries that met the block; the block's dK/dV rows of the keys they met.
    for (i64 b = 0; b < B; ++b) {
      const i64 first = (b * L2 + step.q_begin) * H * D, count = rows * H * D;
      float* dst = dq.data() + first;
      const float* src = dq_step.data() + first;
      if (t == 0)
        std::copy_n(src, count, dst);
      else
        for (i64 i = 0; i < count; ++i) dst[i] += src[i];
      for (const auto& [offset, width] : {std::pair{i64{0}, D}, std::pair{k_floats, Dv}}) {
        const i64 kfirst = offset + b * L2 * Hkv * width, kcount = step.kv_rows * Hkv * width;
        float* kd = cur_g + kfirst;
        const float* ks = dkv_step.data() + kfirst;
        if (t == 0)
          std::copy_n(ks, L2 * Hkv * width, kd);  // step 0 meets the whole block
        else
          for (i64 i = 0; i < kcount; ++i) kd[i] += ks[i];
      }
    }
    if (more) wait(kv_requests);
    if (P > 1) {  // the block's gradients follow it; after the last step they go home
      MPI_Request g_requests[2];
      exchange(cur_g, g[(t + 1) % 2].data(), 1001 + 2 * t, g_requests);
      wait(g_requests);
    }
  }
  const float* home = g[P == 1 ? 0 : P % 2].data();  // this rank's own block's dK | dV
  detail::unpack(dq.data(), grads.d_q);
  detail::unpack(home, grads.d_k);
  detail::unpack(home + k_floats, grads.d_v);
  if (comm_stats) comm_stats->total_seconds += detail::seconds_since(start);
  return stats;
}

}  // namespace headcount::distributed
