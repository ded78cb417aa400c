// MPI helpers shared by the splits: errors, agreement before work, the sum all-reduce.
#include "distributed/comm.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "headcount/error.h"

namespace headcount::distributed::detail {

using headcount::detail::concat;

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(concat("MPI ", what, ": ", std::string(text, static_cast<std::size_t>(length))));
}

int comm_rank(MPI_Comm comm) {
  int rank = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "Comm_rank");
  return rank;
}

int comm_size(MPI_Comm comm) {
  int size = 0;
  check_mpi(MPI_Comm_size(comm, &size), "Comm_size");
  return size;
}

void agree(MPI_Comm comm, const std::function<void()>& local_checks) {
  const int rank = comm_rank(comm), size = comm_size(comm);
  std::string message;
  try {
    local_checks();
  } catch (const Error& e) {
    message = e.what();
  }
  // The lowest failing rank (size: none), then its message, so every rank throws the same.
  int failing = message.empty() ? size : rank;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &failing, 1, MPI_INT, MPI_MIN, comm), "Allreduce");
  if (failing == size) return;
  int length = static_cast<int>(message.size());
  check_mpi(MPI_Bcast(&length, 1, MPI_INT, failing, comm), "Bcast");
  message.resize(static_cast<std::size_t>(length));
  check_mpi(MPI_Bcast(message.data(), length, MPI_CHAR, failing, comm), "Bcast");
  throw Error(rank == failing ? message : concat("rank ", failing, ": ", message));
}

void agree_values(MPI_Comm comm, std::span<const std::int64_t> values, const char* what) {
  // One all-reduce of (max v, max -v): every rank passed the same values iff max = -max(-v).
  std::vector<std::int64_t> both(values.size() * 2);
  for (std::size_t i = 0; i < values.size(); ++i) {
    both[i] = values[i];
    both[values.size() + i] = -values[i];
  }
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, both.data(), static_cast<int>(both.size()), MPI_INT64_T,
                          MPI_MAX, comm),
            "Allreduce");
  for (std::size_t i = 0; i < values.size(); ++i)
    if (both[i] != -both[values.size() + i])
      fail(what, concat("expected the same value on every rank, got ", -both[values.size() + i],
                        " to ", both[i], " (entry ", i, ")"));
}

void allreduce_sum(MPI_Comm comm, float* data, std::int64_t count, CommStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  // MPI counts are int: pieces of at most 2^30 floats.
  for (std::int64_t done = 0; done < count;) {
    const int n = static_cast<int>(std::min<std::int64_t>(count - done, std::int64_t{1} << 30));
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, data + done, n, MPI_FLOAT, MPI_SUM, comm), "Allreduce");
    done += n;
  }
  if (stats) {
    stats->bytes_sent += count * 4;
    stats->bytes_received += count * 4;
    stats->messages += 1;
    stats->wait_seconds += seconds_since(start);
  }
}

}  // namespace headcount::distributed::detail
