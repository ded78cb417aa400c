// `headcount train --parallel data|heads` under mpirun: every rank builds the same run (config,
// preset or checkpoint), the ranks agree that each could, then
//  - data: make_data_parallel makes each a replica (its rows of every global batch, gradients
//    all-reduced in buckets under the watchdog); rank 0 runs the command's own loop and report
//    (validation, checkpoints, the summary) while the others only train;
//  - heads: make_heads_parallel makes each a slice of the model (its heads, its FFN columns);
//    every rank runs the loop (validation and the checkpoint gather are collective), rank 0
//    reports and writes.
#include <mpi.h>

#include <cstdio>
#include <memory>

#include "distributed/comm.h"
#include "distributed/mpi_cli.h"
#include "distributed_cli.h"
#include "headcount/distributed.h"
#include "headcount/error.h"

namespace headcount::cli {

void run_distributed_train(const DistributedTrainJob& job) {
  MpiSession session;
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  Context ctx({.threads = job.threads});
  std::unique_ptr<train::Trainer> trainer;
  distributed::CommStats comm;
  try {
    distributed::detail::agree(MPI_COMM_WORLD,
                               [&] {
                                 check(job.parallel == "data" || job.parallel == "heads",
                                       "--parallel", "data or heads", job.parallel);
                                 check(job.timeout_seconds >= 0, "--timeout", ">= 0 seconds",
                                       job.timeout_seconds);
                                 trainer = job.make(ctx);
                               },
                               {.timeout_seconds = job.timeout_seconds});
    if (job.parallel == "heads")
      distributed::make_heads_parallel(MPI_COMM_WORLD, *trainer,
                                       {.timeout_seconds = job.timeout_seconds}, &comm);
    else
      distributed::make_data_parallel(
          MPI_COMM_WORLD, *trainer,
          {.bucket_bytes = job.bucket_bytes, .watchdog = {.timeout_seconds = job.timeout_seconds}},
          &comm);
  } catch (const Error& e) {
    exit_on_collective_error(e.what());
  }
  try {
    if (job.parallel == "heads") {
      if (rank == 0) {
        job.run_writer(*trainer);
        std::fprintf(stderr,
                     "heads parallel: %d rank%s, rank 0 holds %lld of %lld parameters; it "
                     "all-reduced %lld bytes in %lld calls, waiting %.3f s of %.3f s\n",
                     P, P == 1 ? "" : "s",
                     static_cast<long long>(trainer->model().parameter_count()),
                     static_cast<long long>(trainer->parameter_count()),
                     static_cast<long long>(comm.bytes_sent), static_cast<long long>(comm.messages),
                     comm.wait_seconds, comm.total_seconds);
      } else {
        trainer->run(job.out);
      }
    } else if (rank == 0) {
      job.run_writer(*trainer);
      std::fprintf(
          stderr,
          "data parallel: %d rank%s, rows %lld of each batch of %lld on rank 0; rank 0 "
          "all-reduced %lld bytes in %lld calls, waiting %.3f s of %.3f s\n",
          P, P == 1 ? "" : "s",
          static_cast<long long>(trainer->replica()->row_end - trainer->replica()->row_begin),
          static_cast<long long>(trainer->config().batch), static_cast<long long>(comm.bytes_sent),
          static_cast<long long>(comm.messages), comm.wait_seconds, comm.total_seconds);
    } else {
      trainer->run("");
    }
  } catch (const Error& e) {
    // A diverged loss is every rank's (the loss is summed before the check), anything else
    // this rank's own: either way the others cannot go on without it.
    abort_on_local_error(e.what());
  }
}

}  // namespace headcount::cli
