#include "headcount/context.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "headcount/error.h"

namespace headcount {

namespace {

// How long a worker waits for the next region, and the caller for the last workers, by
// spinning before it sleeps. The encoder at batch 1 opens ~50 regions per sentence, each a
// few tens of microseconds of work, with a little serial work between them; waking a
// sleeping worker through the futex took longer than that (on the 2-core AMD EPYC host,
// `embed --batch 1` ran no faster on 2 threads than on 1, with 0.8-1.3 s of system time
// per 1,000 sentences). Long enough to bridge the gaps between regions, short enough that
// a caller busy elsewhere does not keep a core spinning for long.
constexpr std::chrono::microseconds kSpin{200};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Past this much spinning the spinner yields between checks: a core shared with another
// process (two test binaries on two cores, each with a 2-thread pool) then goes to whoever
// has work instead of to the spin.
constexpr std::chrono::microseconds kSpinBeforeYield{20};

// Spins until done() or kSpin has passed; true if done() came true.
template <typename Done>
bool spin_until(Done done) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    const auto spun = std::chrono::steady_clock::now() - start;
    if (spun >= kSpin) return false;
    if (spun >= kSpinBeforeYield) std::this_thread::yield();
  }
}

}  // namespace

Context::Context(ContextOptions options) {
  check(options.threads >= 1 && options.threads <= 1024, "threads", "1 to 1024", options.threads);
  threads_ = options.threads;
  isa_ = options.isa == Isa::best ? best_isa() : options.isa;
  check(isa_supported(isa_), "isa",
        "an instruction set this CPU supports (best is " + std::string(isa_name(best_isa())) + ")",
        isa_name(isa_));
  scratch_.resize(static_cast<std::size_t>(threads_));
  // Spinning helps only where every worker has a core: oversubscribed, it takes the core
  // from the thread that has the work.
  const unsigned cores = std::thread::hardware_concurrency();
  spin_ = cores != 0 && static_cast<unsigned>(threads_) <= cores;
  for (int w = 1; w < threads_; ++w) pool_.emplace_back([this, w] { worker_loop(w); });
}

Context::~Context() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : pool_) t.join();
  for (Buffer& b : scratch_) std::free(b.data);
  for (Buffer& b : workspace_) std::free(b.data);
}

void* Context::grow(Buffer& buffer, std::size_t bytes) {
  if (bytes <= buffer.bytes && buffer.data) return buffer.data;
  constexpr std::size_t kAlign = 64;
  std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (rounded == 0) rounded = kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (!p) throw std::bad_alloc();
  allocations_.fetch_add(1, std::memory_order_relaxed);
  std::free(buffer.data);
  buffer.data = static_cast<std::byte*>(p);
  buffer.bytes = rounded;
  return p;
}

void* Context::scratch(int worker, std::size_t bytes) {
  return grow(scratch_.at(static_cast<std::size_t>(worker)), bytes);
}

void* Context::workspace(int slot, std::size_t bytes) {
  if (slot >= static_cast<int>(workspace_.size()))
    workspace_.resize(static_cast<std::size_t>(slot) + 1);
  return grow(workspace_[static_cast<std::size_t>(slot)], bytes);
}

std::size_t Context::reserved_bytes() const {
  std::size_t total = 0;
  for (const Buffer& b : scratch_) total += b.bytes;
  for (const Buffer& b : workspace_) total += b.bytes;
  return total;
}

namespace {

constexpr std::uint64_t kClosed = std::uint64_t{1} << 32;
constexpr std::uint64_t kJoinedMask = kClosed - 1;
constexpr int kNumberShift = 33;

}  // namespace

void Context::parallel_for(std::int64_t count, FunctionRef<void(std::int64_t, int)> fn) {
  run_region(count, false, fn);
}

void Context::parallel_for_ranges(std::int64_t count, FunctionRef<void(std::int64_t, int)> fn) {
  run_region(count, true, fn);
}

std::int64_t Context::claim(int worker) {
  if (!ranged_) {
    const std::int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    return task < job_count_ ? task : -1;
  }
  // Its own range first, then the next ones round the ring. The load skips a spent range
  // without a locked instruction; a fetch_add that overshoots a range's end is harmless.
  for (int i = 0; i < threads_; ++i) {
    Range& range = ranges_[static_cast<std::size_t>((worker + i) % threads_)];
    if (range.next.load(std::memory_order_relaxed) >= range.end) continue;
    const std::int64_t task = range.next.fetch_add(1, std::memory_order_relaxed);
    if (task < range.end) return task;
  }
  return -1;
}

void Context::stop_handing_out() {
  next_task_.store(job_count_, std::memory_order_relaxed);
  if (ranged_)
    for (int w = 0; w < threads_; ++w)
      ranges_[static_cast<std::size_t>(w)].next.store(ranges_[static_cast<std::size_t>(w)].end,
                                                      std::memory_order_relaxed);
}

void Context::run_region(std::int64_t count, bool ranged, FunctionRef<void(std::int64_t, int)> fn) {
  if (count <= 0) return;
  if (threads_ == 1 || count == 1) {
    for (std::int64_t t = 0; t < count; ++t) fn(t, 0);
    return;
  }
  // No worker reads job_, job_count_ or the ranges now: a worker reads them only inside a
  // region it joined, and the last region ended closed with every joined worker gone
  // (acquire below).
  job_ = &fn;
  job_count_ = count;
  next_task_.store(0, std::memory_order_relaxed);
  ranged_ = ranged;
  if (ranged) {
    if (!ranges_) ranges_ = std::make_unique<Range[]>(static_cast<std::size_t>(threads_));
    for (int w = 0; w < threads_; ++w) {
      Range& range = ranges_[static_cast<std::size_t>(w)];
      range.next.store(count * w / threads_, std::memory_order_relaxed);
      range.end = count * (w + 1) / threads_;
    }
  }
  std::uint64_t region;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    region = ((region_.load(std::memory_order_relaxed) >> kNumberShift) + 1) << kNumberShift;
    region_.store(region, std::memory_order_release);
  }
  wake_.notify_all();  // without sleepers (they spin) no system call
  // The caller is worker 0 and takes tasks like everyone else.
  for (std::int64_t task; (task = claim(0)) >= 0;) run_task(fn, task, 0);
  region_.fetch_or(kClosed, std::memory_order_acq_rel);
  const auto all_left = [this] {
    return (region_.load(std::memory_order_acquire) & kJoinedMask) == 0;
  };
  if (!(spin_ && spin_until(all_left))) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, all_left);
  }
  job_ = nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) {
    std::exception_ptr error = std::exchange(error_, nullptr);
    std::rethrow_exception(error);
  }
}

void Context::run_task(const FunctionRef<void(std::int64_t, int)>& fn, std::int64_t task,
                       int worker) {
  // Caught here, not let through: on a pool thread an exception would end the process
  // (std::terminate), and on the caller it would unwind `fn` while the others still run it.
  try {
    fn(task, worker);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::current_exception();
    stop_handing_out();
  }
}

void Context::worker_loop(int worker) {
  std::uint64_t seen = 0;  // the number of the last region this worker looked at
  const auto woken = [&] {
    return stopping_.load(std::memory_order_acquire) ||
           (region_.load(std::memory_order_acquire) >> kNumberShift) != seen;
  };
  for (;;) {
    if (!(spin_ && spin_until(woken))) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, woken);
    }
    if (stopping_.load(std::memory_order_acquire)) return;
    // Join the region if it is still open; a closed one (its tasks all handed out) is skipped.
    std::uint64_t state = region_.load(std::memory_order_acquire);
    bool joined = false;
    while ((state & kClosed) == 0 &&
           !(joined = region_.compare_exchange_weak(state, state + 1, std::memory_order_acquire,
                                                    std::memory_order_acquire))) {
    }
    seen = state >> kNumberShift;
    if (!joined) continue;
    // Only workers below the task count take tasks: callers reserve scratch for
    // min(threads, count) workers before the region, and a worker above that would
    // otherwise grow its scratch (allocate, count) inside it, racing the others.
    const std::int64_t count = job_count_;
    const auto* job = job_;
    if (worker < count)
      for (std::int64_t task; (task = claim(worker)) >= 0;) run_task(*job, task, worker);
    const std::uint64_t before = region_.fetch_sub(1, std::memory_order_release);
    if ((before & kClosed) != 0 && (before & kJoinedMask) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);  // the caller may be between its check and its wait
      done_.notify_all();
    }
  }
}

}  // namespace headcount
