// The watchdog's waits (headcount/distributed.h, Watchdog): requests polled against a deadline;
// at the deadline the ranks that did not arrive are named in one line and the job is aborted.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "headcount/distributed.h"

namespace headcount::distributed::detail {

// Waits for every request; request i's operation is with rank peers[i] (a receive from it, a
// send to it). At the deadline, the ranks of the requests not done are the ones named (they
// did not reach `what`). Counts the time waited in stats->wait_seconds.
void wait_watched(MPI_Comm comm, std::span<MPI_Request> requests, std::span<const int> peers,
                  const Watchdog& watchdog, const std::string& what, CommStats* stats);

// One buffer of an all-reduce (sum): `count` elements of `type` (MPI_FLOAT or MPI_DOUBLE).
struct SumBuffer {
  void* data = nullptr;
  std::int64_t count = 0;
  MPI_Datatype type = MPI_FLOAT;
};

// Sums every buffer over the ranks, in place, collective: the arrival notices (one int to and
// from every other rank), then one MPI_Iallreduce per buffer (in pieces of at most 2^30
// elements), all in flight together, waited for with wait_watched. Every rank ends with the
// same values (Open MPI computes each element's sum once, or in the same order on every rank;
// the data-parallel test checks that the parameters stay bitwise equal across ranks).
void allreduce_sum_watched(MPI_Comm comm, std::span<const SumBuffer> buffers,
                           const Watchdog& watchdog, const std::string& what, CommStats* stats);

// A collective watched: the arrival notices, then `post` appends the collective's own requests
// (non-blocking: MPI_Iallreduce, MPI_Ibcast, ...), then wait_watched on all of them.
void collective_watched(MPI_Comm comm, const Watchdog& watchdog, const std::string& what,
                        CommStats* stats,
                        const std::function<void(std::vector<MPI_Request>&)>& post);

// MPI_Bcast from `root`, watched (MPI_Ibcast in pieces of at most 2^30 elements).
void bcast_watched(MPI_Comm comm, void* data, std::int64_t count, MPI_Datatype type, int root,
                   const Watchdog& watchdog, const std::string& what, CommStats* stats);

}  // namespace headcount::distributed::detail
