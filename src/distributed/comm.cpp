// MPI helpers shared by the splits: errors, agreement before work, the sum all-reduce.
#include "distributed/comm.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "distributed/watchdog.h"
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

void agree(MPI_Comm comm, const std::function<void()>& local_checks, const Watchdog& watchdog) {
  const int rank = comm_rank(comm), size = comm_size(comm);
  std::string message;
  try {
    local_checks();
  } catch (const Error& e) {
    message = e.what();
  }
  // The lowest failing rank (size: none), then its message, so every rank throws the same.
  int failing = message.empty() ? size : rank;
  const char* what = "the agreement before the work";
  collective_watched(comm, watchdog, what, nullptr, [&](std::vector<MPI_Request>& requests) {
    requests.emplace_back();
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, &failing, 1, MPI_INT, MPI_MIN, comm, &requests.back()),
              "Iallreduce");
  });
  if (failing == size) return;
  int length = static_cast<int>(message.size());
  bcast_watched(comm, &length, 1, MPI_INT, failing, watchdog, what, nullptr);
  message.resize(static_cast<std::size_t>(length));
  bcast_watched(comm, message.data(), length, MPI_CHAR, failing, watchdog, what, nullptr);
  throw Error(rank == failing ? message : concat("rank ", failing, ": ", message));
}

void agree_values(MPI_Comm comm, std::span<const std::int64_t> values, const char* what,
                  const Watchdog& watchdog) {
  // One all-reduce of (max v, max -v): every rank passed the same values iff max = -max(-v).
  std::vector<std::int64_t> both(values.size() * 2);
  for (std::size_t i = 0; i < values.size(); ++i) {
    both[i] = values[i];
    both[values.size() + i] = -values[i];
  }
  collective_watched(comm, watchdog, concat("the agreement on the ", what), nullptr,
                     [&](std::vector<MPI_Request>& requests) {
                       requests.emplace_back();
                       check_mpi(
                           MPI_Iallreduce(MPI_IN_PLACE, both.data(), static_cast<int>(both.size()),
                                          MPI_INT64_T, MPI_MAX, comm, &requests.back()),
                           "Iallreduce");
                     });
  for (std::size_t i = 0; i < values.size(); ++i)
    if (both[i] != -both[values.size() + i])
      fail(what, concat("expected the same value on every rank, got ", -both[values.size() + i],
                        " to ", both[i], " (entry ", i, ")"));
}

std::int64_t parameter_hash(const std::vector<train::Parameter>& params) {
  std::uint64_t h = 1469598103934665603ull;
  for (const train::Parameter& p : params) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(p.value.data<const float>());
    for (std::int64_t i = 0; i < p.value.numel() * 4; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return static_cast<std::int64_t>(h >> 1);
}

}  // namespace headcount::distributed::detail
