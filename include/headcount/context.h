// The explicit runtime context: a thread pool and reusable scratch memory. Nothing in
// headcount keeps global state; every kernel and layer call takes a Context.
//
// Why scratch lives here: on the machines we target a freshly faulted 4 KiB page costs
// ~11 us, so kernels borrow memory that earlier calls already touched instead of
// allocating per call.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "headcount/isa.h"

namespace headcount {

struct ContextOptions {
  int threads = 1;      // workers including the calling thread; >= 1
  Isa isa = Isa::best;  // instruction set of the kernels; an unsupported one is an Error
};

// A non-owning reference to a callable: parallel_for takes one so that calling it never
// allocates (a std::function holding a large lambda would, on every call).
template <typename Signature>
class FunctionRef;
template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT: implicit by design, like std::function
      : object_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

class Context {
 public:
  explicit Context(ContextOptions options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int threads() const { return threads_; }
  Isa isa() const { return isa_; }

  // Calls fn(task, worker) for every task in [0, count), spread over the workers, and
  // returns when all are done. `worker` is in [0, min(threads(), count)) and indexes
  // scratch(), so reserving scratch for that many workers beforehand means nothing grows
  // inside the region.
  // Which worker runs a task never changes what the task computes.
  // An exception thrown by a task (an Error, std::bad_alloc from growing scratch) stops the
  // handing out of further tasks; parallel_for waits for the tasks already running, then
  // rethrows the first exception on the calling thread. The pool stays usable.
  void parallel_for(std::int64_t count, FunctionRef<void(std::int64_t, int)> fn);
  // As parallel_for, but [0, count) is cut into threads() contiguous ranges of (nearly)
  // equal length, and worker w takes the tasks of range w first, in order, before it helps
  // with the others' (from their fronts). So when every worker is at hand, two calls with
  // the same count give task t to the same worker: steps that cut their rows alike (the
  // GEMM's row groups, LayerNorm, the attention's batch-major tasks) then find the rows the
  // last step wrote in their own core's cache instead of fetching them from the other core.
  // On two cores of the Intel host that was worth 2-7% of a k = 384 projection's rate
  // (layers/packed_gemm.cpp has the figures); a late or busy worker costs no more than with
  // parallel_for, as the others take its range.
  void parallel_for_ranges(std::int64_t count, FunctionRef<void(std::int64_t, int)> fn);

  // Worker-private scratch of at least `bytes`, 64-byte aligned. Grows, never shrinks;
  // valid until the next scratch() call by the same worker.
  void* scratch(int worker, std::size_t bytes);

  // Named workspace shared by one call on the calling thread (a layer's QKV and concat
  // buffers). Same growth rule as scratch().
  void* workspace(int slot, std::size_t bytes);

  // Bytes currently reserved by scratch and workspace buffers.
  std::size_t reserved_bytes() const;
  // How many times scratch or workspace memory was (re)allocated: constant once warm.
  std::int64_t allocations() const { return allocations_.load(std::memory_order_relaxed); }

 private:
  struct Buffer {
    std::byte* data = nullptr;
    std::size_t bytes = 0;
  };
  void* grow(Buffer& buffer, std::size_t bytes);
  void worker_loop(int worker);
  void run_region(std::int64_t count, bool ranged, FunctionRef<void(std::int64_t, int)> fn);
  // The next task for `worker`, or -1 when every task is handed out.
  std::int64_t claim(int worker);
  void stop_handing_out();
  void run_task(const FunctionRef<void(std::int64_t, int)>& fn, std::int64_t task, int worker);

  int threads_ = 1;
  Isa isa_ = Isa::generic;
  std::atomic<std::int64_t> allocations_{0};  // workers may grow their own scratch at once
  std::vector<Buffer> scratch_;
  std::vector<Buffer> workspace_;
  std::vector<std::thread> pool_;

  // The region's hand-off, one 64-bit word (region_): the region's number (bits 33 and
  // up), a closed bit (32) and how many workers have joined it (bits 0-31). The caller
  // publishes job_, job_count_ and the schedule (ranged_ and, for parallel_for_ranges, each
  // range's start and end), then opens a new region (release; under mutex_ so that a
  // sleeping worker cannot miss it). A worker that sees it open joins with a compare-and-swap
  // (acquire), claims tasks with one fetch_add each (on next_task_, or on a range's counter:
  // claim()) and leaves (release). When the tasks are
  // handed out the caller closes the region and waits only for the workers that joined: one
  // that was not running at the time (a busy host) skips the region instead of holding it
  // up. Between regions workers spin on region_ for a short while before they sleep on
  // wake_; a futex wake-up costs more than a small GEMM (see context.cpp).
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const FunctionRef<void(std::int64_t, int)>* job_ = nullptr;
  std::int64_t job_count_ = 0;
  // On cache lines of their own: workers spin on region_ while tasks are claimed.
  alignas(64) std::atomic<std::int64_t> next_task_{0};
  // parallel_for_ranges' regions: one claim counter per worker's range, each on its own line.
  struct alignas(64) Range {
    std::atomic<std::int64_t> next{0};
    std::int64_t end = 0;
  };
  std::unique_ptr<Range[]> ranges_;
  bool ranged_ = false;  // whether the open region hands out tasks by range
  alignas(64) std::atomic<std::uint64_t> region_{0};
  std::exception_ptr error_;  // the region's first exception, under mutex_
  alignas(64) std::atomic<bool> stopping_{false};
  bool spin_ = false;  // workers spin between regions only when each has a core of its own
};

}  // namespace headcount
