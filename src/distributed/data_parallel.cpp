// Data over ranks: the row split, data-parallel training (a Trainer replica whose gradients are
// summed in buckets) and the sentence split of `embed` (embed.cpp).
//
// Data-parallel step on rank r of P (Trainer::train_step with the replica installed here):
//   global batch (every rank makes it: a pure function of seed and step) → rows shard_rows(r)
//   → forward_backward with loss normaliser S = the global batch's scored positions
//   → grads and loss summed over the ranks (buckets, MPI_Iallreduce) → clip, AdamW (alike).
// Why a replica's rows compute bitwise what one process computes for them: every layer acts on
// a row (position) alone or on one sequence alone (the packed GEMM's output row depends only on
// its input row, attention only on its sequence, LayerNorm, GELU and the cross-entropy only on
// the row), and with the global S each row's dlogits, so every activation gradient, are the
// same bits. What changes is the grouping of the sums over rows: each parameter gradient (a GEMM
// over rows, or a column sum) and the loss are summed per rank, then across ranks
// (docs/distributed.md derives the bound).
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "distributed/comm.h"
#include "distributed/watchdog.h"
#include "headcount/distributed.h"
#include "headcount/error.h"

namespace headcount::distributed {

using headcount::detail::concat;
using i64 = std::int64_t;

RowShard shard_rows(i64 rows, int ranks, int rank) {
  HEADCOUNT_CHECK(rows >= 0, "rows", ">= 0", rows);
  HEADCOUNT_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "rank", concat("0 to ", ranks - 1),
                  rank);
  // The first rows % ranks ranks take one row more.
  const i64 base = rows / ranks, extra = rows % ranks;
  const i64 begin = rank * base + std::min<i64>(rank, extra);
  return {.begin = begin, .end = begin + base + (rank < extra ? 1 : 0)};
}

void allreduce_gradients(MPI_Comm comm, std::vector<train::Parameter>& params, double* loss,
                         const std::string& what, const DataParallelOptions& options,
                         CommStats* comm_stats, std::vector<float>* scratch) {
  HEADCOUNT_CHECK(options.bucket_bytes >= 4, "bucket_bytes", ">= 4", options.bucket_bytes);
  const auto start = std::chrono::steady_clock::now();
  // One flat buffer holds every gradient, packed in parameter order; the buckets are ranges of
  // it: consecutive parameters until a bucket holds bucket_bytes.
  std::vector<float> local;
  std::vector<float>& flat = scratch ? *scratch : local;
  i64 total = 0;
  for (const train::Parameter& p : params) total += p.grad.numel();
  flat.resize(static_cast<std::size_t>(total));
  std::vector<detail::SumBuffer> sums;
  const i64 bucket_floats = options.bucket_bytes / 4;
  i64 at = 0, bucket_begin = 0;
  for (const train::Parameter& p : params) {
    std::memcpy(flat.data() + at, p.grad.data<const float>(),
                static_cast<std::size_t>(p.grad.numel()) * 4);
    at += p.grad.numel();
    if (at - bucket_begin >= bucket_floats || at == total) {
      sums.push_back(
          {.data = flat.data() + bucket_begin, .count = at - bucket_begin, .type = MPI_FLOAT});
      bucket_begin = at;
    }
  }
  if (loss) sums.push_back({.data = loss, .count = 1, .type = MPI_DOUBLE});
  detail::allreduce_sum_watched(comm, sums, options.watchdog, what, comm_stats);
  at = 0;
  for (train::Parameter& p : params) {
    std::memcpy(p.grad.data<float>(), flat.data() + at,
                static_cast<std::size_t>(p.grad.numel()) * 4);
    at += p.grad.numel();
  }
  if (comm_stats) comm_stats->total_seconds += detail::seconds_since(start);
}

void make_data_parallel(MPI_Comm comm, train::Trainer& trainer, const DataParallelOptions& options,
                        CommStats* comm_stats) {
  const int rank = detail::comm_rank(comm), size = detail::comm_size(comm);
  const i64 batch = trainer.config().batch;
  detail::agree(
      comm,
      [&] {
        HEADCOUNT_CHECK(size <= batch, "ranks",
                        concat("at most batch = ", batch, " (each rank trains on >= 1 row)"), size);
        HEADCOUNT_CHECK(options.bucket_bytes >= 4, "bucket_bytes", ">= 4", options.bucket_bytes);
        HEADCOUNT_CHECK(options.watchdog.timeout_seconds >= 0, "timeout", ">= 0 seconds",
                        options.watchdog.timeout_seconds);
      },
      options.watchdog);
  const i64 shape[] = {batch, trainer.step(), trainer.config().steps,
                       static_cast<i64>(trainer.model().parameters().size()),
                       detail::parameter_hash(trainer.model().parameters())};
  detail::agree_values(comm, shape, "data parallel (batch, step, steps, parameters, their hash)",
                       options.watchdog);
  const RowShard rows = shard_rows(batch, size, rank);
  trainer.set_replica({.row_begin = rows.begin,
                       .row_end = rows.end,
                       .reduce =
                           [comm, options, comm_stats, &trainer](
                               std::vector<train::Parameter>& params, double& loss) {
                             allreduce_gradients(
                                 comm, params, &loss,
                                 concat("the gradient all-reduce of step ", trainer.step()),
                                 options, comm_stats);
                           },
                       .writer = rank == 0});
}

}  // namespace headcount::distributed
