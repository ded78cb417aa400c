// The few MPI helpers the splits share: MPI return codes as Errors, the ranks agreeing on
// whether every one of them may start (so a bad input on one rank stops all of them before
// any message of the computation), shape agreement.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "headcount/distributed.h"

namespace headcount::distributed::detail {

// Throws Error("MPI <what>: <MPI's message>") unless rc is MPI_SUCCESS. Only reached when the
// communicator's error handler returns (MPI_ERRORS_RETURN); the default aborts the job.
void check_mpi(int rc, const char* what);

int comm_rank(MPI_Comm comm);
int comm_size(MPI_Comm comm);

// Runs `local_checks` on every rank, then agrees: if it threw an Error on any rank, every rank
// throws one (the lowest failing rank's message, prefixed with "rank k: " on the others). The
// messages wait under the watchdog.
void agree(MPI_Comm comm, const std::function<void()>& local_checks, const Watchdog& watchdog = {});

// Throws Error naming `what` unless every rank passed the same values.
void agree_values(MPI_Comm comm, std::span<const std::int64_t> values, const char* what,
                  const Watchdog& watchdog = {});

// FNV-1a over every parameter's bytes: equal on two ranks iff (barring a collision) the
// parameters are bitwise equal. Kept off INT64_MIN (agree_values negates).
std::int64_t parameter_hash(const std::vector<train::Parameter>& params);

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace headcount::distributed::detail
