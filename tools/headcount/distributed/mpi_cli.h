// What the commands under mpirun share (built with -DHEADCOUNT_MPI=ON): MPI for the command's
// lifetime, and the way out of an error every rank knows of.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace headcount::cli {

// MPI_Init unless done, MPI_Finalize on every way out unless done.
struct MpiSession {
  MpiSession() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) MPI_Init(nullptr, nullptr);
  }
  ~MpiSession() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

// An error every rank threw (an agreement failed): rank 0 prints headcount's one line, then all
// meet in a barrier (no rank's exit, which mpirun answers by ending the job, cuts rank 0 off
// before its line is out), leave MPI and exit 2.
[[noreturn]] inline void exit_on_collective_error(const std::string& message) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    std::fprintf(stderr, "headcount: error: %s\n", message.c_str());
    std::fflush(stderr);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  std::exit(2);
}

// An error on this rank alone, once the ranks work together (the others would wait for it):
// one line naming the rank, then MPI_Abort ends the job (exit 2 from mpirun).
[[noreturn]] inline void abort_on_local_error(const std::string& message) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "headcount: error: rank %d: %s\n", rank, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

}  // namespace headcount::cli
