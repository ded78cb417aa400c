// The watchdog (headcount/distributed.h): waits that poll against a deadline, and the one line
// that names the ranks which never arrived.
#include "distributed/watchdog.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "distributed/comm.h"
#include "headcount/error.h"

namespace headcount::distributed::detail {

using headcount::detail::concat;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kArrivalTag = 0x4864;

// The time this rank has waited, not counting the time it did not run: a gap of over a second
// between two readings (it was itself stopped, or starved) moves the start on. The deadline is
// for the others, and a rank continued after a stop (mpirun sends SIGCONT before it ends a job)
// must not blame them. One reading per poll serves both the gap and the deadline: with two, a
// stop landing between them counted as waiting (CI saw the continued rank name rank 0).
class WaitClock {
 public:
  explicit WaitClock(Clock::time_point start) : start_(start), last_(start) {}
  double waited() {
    const auto now = Clock::now();
    if (now - last_ > std::chrono::seconds(1)) start_ += now - last_;
    last_ = now;
    return std::chrono::duration<double>(now - start_).count();
  }

 private:
  Clock::time_point start_, last_;
};

// Polls until every request is done (true) or this rank has waited `seconds` (false). Spins a
// while first (a collective of a balanced step ends soon), then sleeps between tests (50 µs,
// after 10^4 tests 1 ms) so that a long wait leaves the core to the ranks still working.
bool poll_until(std::span<MPI_Request> requests, WaitClock& clock, double seconds) {
  for (long spins = 0;; ++spins) {
    int done = 0;
    check_mpi(
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
        "Testall");
    if (done) return true;
    if (clock.waited() > seconds) return false;
    if (spins > 1000)
      std::this_thread::sleep_for(std::chrono::microseconds(spins > 10000 ? 1000 : 50));
  }
}

// The ranks of the requests not done (MPI_Testall sets the done ones to MPI_REQUEST_NULL).
std::vector<int> missing_ranks(std::span<const MPI_Request> requests, std::span<const int> peers) {
  std::vector<int> out;
  for (std::size_t i = 0; i < requests.size(); ++i)
    if (requests[i] != MPI_REQUEST_NULL && peers[i] >= 0) out.push_back(peers[i]);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

[[noreturn]] void end_job(MPI_Comm comm, const std::vector<int>& missing, double timeout,
                          const std::string& what) {
  std::string line;
  if (missing.empty()) {
    line = concat(what, " did not finish within ", timeout,
                  " s though every rank reached it (a rank stopped inside it?); ending the job");
  } else {
    std::string names = missing.size() == 1 ? "rank " : "ranks ";
    for (std::size_t i = 0; i < missing.size(); ++i) names += concat(i ? ", " : "", missing[i]);
    line = concat(names, " did not reach ", what, " within ", timeout,
                  " s (stopped or hung without dying?); ending the job");
  }
  std::fprintf(stderr, "headcount: error: %s\n", line.c_str());
  std::fflush(stderr);
  MPI_Abort(comm, 2);
  std::abort();  // MPI_Abort does not return; if it did, this process must not go on
}

}  // namespace

void wait_watched(MPI_Comm comm, std::span<MPI_Request> requests, std::span<const int> peers,
                  const Watchdog& watchdog, const std::string& what, CommStats* stats) {
  const auto begin = Clock::now();
  WaitClock clock(begin);
  const double timeout = watchdog.timeout_seconds;
  if (timeout <= 0) {
    check_mpi(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
              "Waitall");
  } else if (!poll_until(requests, clock, timeout)) {
    // The lowest rank that arrived reports; the others give it a grace period to end the job
    // (and go on if the wait ends meanwhile: a slow rank, not a stopped one).
    std::vector<int> missing = missing_ranks(requests, peers);
    int reporter = 0;
    while (std::find(missing.begin(), missing.end(), reporter) != missing.end()) ++reporter;
    if (reporter != comm_rank(comm)) {
      const double grace = std::max(2.0, 0.2 * timeout);
      if (!poll_until(requests, clock, timeout + grace))
        end_job(comm, missing_ranks(requests, peers), timeout, what);
    } else {
      end_job(comm, missing, timeout, what);
    }
  }
  if (stats) stats->wait_seconds += seconds_since(begin);
}

void collective_watched(MPI_Comm comm, const Watchdog& watchdog, const std::string& what,
                        CommStats* stats,
                        const std::function<void(std::vector<MPI_Request>&)>& post) {
  const int rank = comm_rank(comm), size = comm_size(comm);
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  // Arrival notices: a receive from every other rank (done: it reached this wait) and a send.
  const int sent = rank;
  std::vector<int> arrived(static_cast<std::size_t>(size));
  if (watchdog.timeout_seconds > 0) {
    for (int q = 0; q < size; ++q) {
      if (q == rank) continue;
      requests.emplace_back();
      peers.push_back(q);
      check_mpi(MPI_Irecv(&arrived[static_cast<std::size_t>(q)], 1, MPI_INT, q, kArrivalTag, comm,
                          &requests.back()),
                "Irecv");
      requests.emplace_back();
      peers.push_back(-1);
      check_mpi(MPI_Isend(&sent, 1, MPI_INT, q, kArrivalTag, comm, &requests.back()), "Isend");
    }
  }
  std::vector<MPI_Request> posted;
  post(posted);
  requests.insert(requests.end(), posted.begin(), posted.end());
  peers.resize(requests.size(), -1);
  wait_watched(comm, requests, peers, watchdog, what, stats);
}

void allreduce_sum_watched(MPI_Comm comm, std::span<const SumBuffer> buffers,
                           const Watchdog& watchdog, const std::string& what, CommStats* stats) {
  collective_watched(comm, watchdog, what, stats, [&](std::vector<MPI_Request>& requests) {
    for (const SumBuffer& b : buffers) {
      int type_size = 0;
      check_mpi(MPI_Type_size(b.type, &type_size), "Type_size");
      char* data = static_cast<char*>(b.data);
      for (std::int64_t done = 0; done < b.count;) {
        const int n =
            static_cast<int>(std::min<std::int64_t>(b.count - done, std::int64_t{1} << 30));
        requests.emplace_back();
        check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data + done * type_size, n, b.type, MPI_SUM, comm,
                                 &requests.back()),
                  "Iallreduce");
        done += n;
      }
      if (stats) {
        stats->bytes_sent += b.count * type_size;
        stats->bytes_received += b.count * type_size;
        stats->messages += 1;
      }
    }
  });
}

void bcast_watched(MPI_Comm comm, void* data, std::int64_t count, MPI_Datatype type, int root,
                   const Watchdog& watchdog, const std::string& what, CommStats* stats) {
  collective_watched(comm, watchdog, what, stats, [&](std::vector<MPI_Request>& requests) {
    int type_size = 0;
    check_mpi(MPI_Type_size(type, &type_size), "Type_size");
    char* bytes = static_cast<char*>(data);
    for (std::int64_t done = 0; done < count;) {
      const int n = static_cast<int>(std::min<std::int64_t>(count - done, std::int64_t{1} << 30));
      requests.emplace_back();
      check_mpi(MPI_Ibcast(bytes + done * type_size, n, type, root, comm, &requests.back()),
                "Ibcast");
      done += n;
    }
  });
}

}  // namespace headcount::distributed::detail
