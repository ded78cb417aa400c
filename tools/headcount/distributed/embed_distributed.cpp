// `headcount embed --distributed` under mpirun. Messages, in order:
//   1. agree: rank 0's options and input (read there only: mpirun gives stdin to rank 0);
//   2. the sentences broadcast from rank 0 (their lengths, then their bytes);
//   3. agree: every rank loaded the encoder (each from the same model directory);
//   4. embed_sentences: each rank embeds its contiguous shard, rank 0 gathers the rows in
//      input order (waits under the watchdog);
//   5. rank 0 writes the output as the one-process command does.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <optional>

#include "distributed/comm.h"
#include "distributed/mpi_cli.h"
#include "distributed_cli.h"
#include "headcount/distributed.h"
#include "headcount/error.h"

namespace headcount::cli {
namespace {

using i64 = std::int64_t;

void bcast_bytes(char* data, i64 count) {
  for (i64 done = 0; done < count;) {
    const int n = static_cast<int>(std::min<i64>(count - done, i64{1} << 30));
    distributed::detail::check_mpi(MPI_Bcast(data + done, n, MPI_CHAR, 0, MPI_COMM_WORLD), "Bcast");
    done += n;
  }
}

// Rank 0's sentences on every rank.
void bcast_sentences(std::vector<std::string>& sentences, int rank) {
  i64 count = static_cast<i64>(sentences.size());
  distributed::detail::check_mpi(MPI_Bcast(&count, 1, MPI_INT64_T, 0, MPI_COMM_WORLD), "Bcast");
  std::vector<i64> lengths(static_cast<std::size_t>(count));
  std::string bytes;
  if (rank == 0)
    for (i64 i = 0; i < count; ++i) {
      lengths[static_cast<std::size_t>(i)] = static_cast<i64>(sentences[i].size());
      bytes += sentences[static_cast<std::size_t>(i)];
    }
  for (i64 done = 0; done < count;) {
    const int n = static_cast<int>(std::min<i64>(count - done, i64{1} << 30));
    distributed::detail::check_mpi(
        MPI_Bcast(lengths.data() + done, n, MPI_INT64_T, 0, MPI_COMM_WORLD), "Bcast");
    done += n;
  }
  i64 total = 0;
  for (i64 l : lengths) total += l;
  bytes.resize(static_cast<std::size_t>(total));
  bcast_bytes(bytes.data(), total);
  if (rank == 0) return;
  sentences.resize(static_cast<std::size_t>(count));
  i64 at = 0;
  for (i64 i = 0; i < count; ++i) {
    const i64 l = lengths[static_cast<std::size_t>(i)];
    sentences[static_cast<std::size_t>(i)] =
        bytes.substr(static_cast<std::size_t>(at), static_cast<std::size_t>(l));
    at += l;
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
    distributed::detail::agree(MPI_COMM_WORLD, [&] {
      if (rank == 0) sentences = job.read();
    });
    bcast_sentences(sentences, rank);
    distributed::detail::agree(MPI_COMM_WORLD, [&] { encoder.emplace(job.load()); });
    Context ctx({.threads = job.threads});
    EmbedOptions options = job.options;
    if (rank != 0) options.progress = nullptr;
    embeddings = distributed::embed_sentences(MPI_COMM_WORLD, ctx, *encoder, sentences, options,
                                              {.timeout_seconds = job.timeout_seconds}, &comm);
  } catch (const Error& e) {
    // Every error up to here is every rank's (the agreements, embed_sentences' own checks).
    exit_on_collective_error(e.what());
  }
  if (rank != 0) return;
  job.write(sentences, embeddings);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr,
               "embed: %lld sentences over %d rank%s (rank 0: %lld), rank 0 received %lld bytes, "
               "%.3f s\n",
               static_cast<long long>(sentences.size()), P, P == 1 ? "" : "s",
               static_cast<long long>(
                   distributed::shard_rows(static_cast<i64>(sentences.size()), P, 0).size()),
               static_cast<long long>(comm.bytes_received), seconds);
}

}  // namespace headcount::cli
