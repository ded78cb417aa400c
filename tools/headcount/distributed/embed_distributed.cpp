// `headcount embed --distributed [--split sentences|heads]` under mpirun. Messages, in order:
//   1. agree: rank 0's options and input (read there only: mpirun gives stdin to rank 0);
//   2. the sentences broadcast from rank 0 (their lengths, then their bytes);
// every wait under the watchdog (--timeout).
//   3. agree: every rank loaded the encoder (each from the same model directory);
//   4. sentences: embed_sentences: each rank embeds its contiguous shard, rank 0 gathers the
//      rows in input order (waits under the watchdog);
//      heads: every rank embeds every sentence with its slice of the encoder
//      (heads_parallel_encoder), two all-reduces a layer and forward;
//   5. rank 0 writes the output as the one-process command does.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <optional>

#include "distributed/comm.h"
#include "distributed/mpi_cli.h"
#include "distributed/watchdog.h"
#include "distributed_cli.h"
#include "headcount/distributed.h"
#include "headcount/error.h"

namespace headcount::cli {
namespace {

using i64 = std::int64_t;

// Rank 0's sentences on every rank: their count, lengths, then bytes.
void bcast_sentences(std::vector<std::string>& sentences, int rank,
                     const distributed::Watchdog& watchdog) {
  const char* what = "the broadcast of the sentences";
  i64 count = static_cast<i64>(sentences.size());
  distributed::detail::bcast_watched(MPI_COMM_WORLD, &count, 1, MPI_INT64_T, 0, watchdog, what,
                                     nullptr);
  std::vector<i64> lengths(static_cast<std::size_t>(count));
  std::string bytes;
  if (rank == 0)
    for (std::size_t i = 0; i < sentences.size(); ++i) {
      lengths[i] = static_cast<i64>(sentences[i].size());
      bytes += sentences[i];
    }
  distributed::detail::bcast_watched(MPI_COMM_WORLD, lengths.data(), count, MPI_INT64_T, 0,
                                     watchdog, what, nullptr);
  i64 total = 0;
  for (i64 l : lengths) total += l;
  bytes.resize(static_cast<std::size_t>(total));
  distributed::detail::bcast_watched(MPI_COMM_WORLD, bytes.data(), total, MPI_CHAR, 0, watchdog,
                                     what, nullptr);
  if (rank == 0) return;
  sentences.resize(static_cast<std::size_t>(count));
  std::size_t at = 0;
  for (std::size_t i = 0; i < sentences.size(); ++i) {
    sentences[i] = bytes.substr(at, static_cast<std::size_t>(lengths[i]));
    at += static_cast<std::size_t>(lengths[i]);
  }
}

}  // namespace

void run_distributed_embed(const DistributedEmbedJob& job) {
  MpiSession session;
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  std::vector<std::string> sentences;
  std::optional<BertEncoder> encoder;
  Tensor embeddings;
  distributed::CommStats comm;
  const auto start = std::chrono::steady_clock::now();
  try {
    const distributed::Watchdog watchdog{.timeout_seconds = job.timeout_seconds};
    distributed::detail::agree(
        MPI_COMM_WORLD,
        [&] {
          if (rank == 0) sentences = job.read();
        },
        watchdog);
    bcast_sentences(sentences, rank, watchdog);
    const bool heads = job.split == "heads";
    std::optional<EncoderWeights> weights;
    distributed::detail::agree(
        MPI_COMM_WORLD,
        [&] {
          check(job.split == "sentences" || heads, "--split", "sentences or heads", job.split);
          if (heads)
            weights.emplace(job.load_weights());
          else
            encoder.emplace(job.load());
        },
        watchdog);
    if (heads) {
      encoder.emplace(
          distributed::heads_parallel_encoder(MPI_COMM_WORLD, *weights, watchdog, &comm));
      weights.reset();  // the whole weights: only the slice is kept
    }
    Context ctx({.threads = job.threads});
    EmbedOptions options = job.options;
    if (rank != 0) options.progress = nullptr;
    if (heads) {
      Tensor all = encoder->embed(ctx, sentences, options);
      if (rank == 0) embeddings = std::move(all);
    } else {
      embeddings = distributed::embed_sentences(MPI_COMM_WORLD, ctx, *encoder, sentences, options,
                                                watchdog, &comm);
    }
  } catch (const Error& e) {
    // Every error up to here is every rank's (the agreements, embed_sentences' own checks).
    exit_on_collective_error(e.what());
  }
  if (rank != 0) return;
  job.write(sentences, embeddings);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (job.split == "heads") {
    std::fprintf(stderr,
                 "embed: %lld sentences, heads over %d rank%s (rank 0 holds %lld heads of each "
                 "layer, FFN width %lld), rank 0 all-reduced %lld bytes, %.3f s\n",
                 static_cast<long long>(sentences.size()), P, P == 1 ? "" : "s",
                 static_cast<long long>(encoder->config().layer_heads(0)),
                 static_cast<long long>(encoder->config().intermediate_size),
                 static_cast<long long>(comm.bytes_sent), seconds);
    return;
  }
  std::fprintf(stderr,
               "embed: %lld sentences over %d rank%s (rank 0: %lld), rank 0 received %lld bytes, "
               "%.3f s\n",
               static_cast<long long>(sentences.size()), P, P == 1 ? "" : "s",
               static_cast<long long>(
                   distributed::shard_rows(static_cast<i64>(sentences.size()), P, 0).size()),
               static_cast<long long>(comm.bytes_received), seconds);
}

}  // namespace headcount::cli
