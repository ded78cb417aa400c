// The sentences of `embed` over ranks: rank r embeds shard_rows(count, P, r) and sends its rows
// to rank 0, which receives every rank's rows straight into their place in the output.
//
// Why the result is bitwise one process's: BertEncoder::embed computes each sentence's
// embedding independently of the other sentences in its batch, of the padding and of the
// thread count (tests/test_encoder_invariance.cpp): the projections run on the packed GEMM,
// whose output row is its input row times the packed weights with the K-loop order fixed by
// the packing (not by the number of rows, nor by the rows' split over threads); attention,
// LayerNorm, GELU and the pooling act on one sentence, the padded keys masked to weight 0.
// So embedding a shard computes the same bits for each of its sentences as embedding the whole
// list, and the gather only moves them (same instruction set on every rank: the ISA decides the
// kernels).
#include <algorithm>
#include <climits>
#include <vector>

#include "distributed/comm.h"
#include "distributed/watchdog.h"
#include "headcount/distributed.h"
#include "headcount/error.h"

namespace headcount::distributed {

using headcount::detail::concat;
using i64 = std::int64_t;

Tensor embed_sentences(MPI_Comm comm, Context& ctx, const BertEncoder& encoder,
                       const std::vector<std::string>& texts, const EmbedOptions& options,
                       const Watchdog& watchdog, CommStats* comm_stats) {
  const int rank = detail::comm_rank(comm), size = detail::comm_size(comm);
  const i64 count = static_cast<i64>(texts.size()), d = encoder.dim();
  const auto start = std::chrono::steady_clock::now();
  detail::agree(
      comm,
      [&] {
        check(count >= 1, "texts", "at least one sentence", "none");
        check(options.batch_size >= 1, "batch size", ">= 1", options.batch_size);
        check(watchdog.timeout_seconds >= 0, "timeout", ">= 0 seconds", watchdog.timeout_seconds);
      },
      watchdog);
  const i64 shape[] = {count, d};
  detail::agree_values(comm, shape, "sentences and embedding dim", watchdog);

  const RowShard mine = shard_rows(count, size, rank);
  Tensor local;
  if (mine.size() > 0) {
    const std::vector<std::string> shard(texts.begin() + mine.begin, texts.begin() + mine.end);
    local = encoder.embed(ctx, shard, options);
  }

  // Rows to rank 0, in pieces of at most 2^30 floats (MPI counts are int).
  constexpr i64 kPiece = i64{1} << 30;
  constexpr int kTag = 0x4865;
  Tensor out;
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  auto post = [&](float* data, i64 floats, int peer, bool receive) {
    for (i64 done = 0; done < floats; done += kPiece) {
      const int n = static_cast<int>(std::min(floats - done, kPiece));
      requests.emplace_back();
      peers.push_back(peer);
      if (receive)
        detail::check_mpi(MPI_Irecv(data + done, n, MPI_FLOAT, peer, kTag, comm, &requests.back()),
                          "Irecv");
      else
        detail::check_mpi(MPI_Isend(data + done, n, MPI_FLOAT, peer, kTag, comm, &requests.back()),
                          "Isend");
      if (comm_stats) {
        (receive ? comm_stats->bytes_received : comm_stats->bytes_sent) += i64{n} * 4;
        comm_stats->messages += receive ? 0 : 1;
      }
    }
  };
  if (rank == 0) {
    out = Tensor(DType::f32, {count, d});
    if (mine.size() > 0)
      std::copy_n(local.data<const float>(), local.numel(), out.data<float>() + mine.begin * d);
    for (int r = 1; r < size; ++r) {
      const RowShard theirs = shard_rows(count, size, r);
      post(out.data<float>() + theirs.begin * d, theirs.size() * d, r, true);
    }
  } else if (mine.size() > 0) {
    post(local.data<float>(), local.numel(), 0, false);
  }
  detail::wait_watched(comm, requests, peers, watchdog,
                       rank == 0 ? "the gathering of the embeddings on rank 0"
                                 : "the gathering of the embeddings (rank 0 receiving)",
                       comm_stats);
  // A send small enough to go eagerly completes without its receiver: one more (watched) meeting,
  // so that no rank leaves for MPI_Finalize, which would wait without a deadline, while rank 0
  // may still be stopped before its receives.
  int one = 1;
  const detail::SumBuffer end[] = {{.data = &one, .count = 1, .type = MPI_INT}};
  detail::allreduce_sum_watched(comm, end, watchdog, "the end of the embedding", nullptr);
  if (comm_stats) comm_stats->total_seconds += detail::seconds_since(start);
  return out;
}

}  // namespace headcount::distributed
