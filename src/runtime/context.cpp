#include "headcount/context.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "headcount/error.h"

namespace headcount {

Context::Context(ContextOptions options) {
  check(options.threads >= 1 && options.threads <= 1024, "threads", "1 to 1024", options.threads);
  threads_ = options.threads;
  isa_ = options.isa == Isa::best ? best_isa() : options.isa;
  check(isa_supported(isa_), "isa", "an instruction set this CPU supports (best is " + std::string(isa_name(best_isa())) + ")",
        isa_name(isa_));
  scratch_.resize(static_cast<std::size_t>(threads_));
  for (int w = 1; w < threads_; ++w) pool_.emplace_back([this, w] { worker_loop(w); });
}

Context::~Context() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
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
  if (slot >= static_cast<int>(workspace_.size())) workspace_.resize(static_cast<std::size_t>(slot) + 1);
  return grow(workspace_[static_cast<std::size_t>(slot)], bytes);
}

std::size_t Context::reserved_bytes() const {
  std::size_t total = 0;
  for (const Buffer& b : scratch_) total += b.bytes;
  for (const Buffer& b : workspace_) total += b.bytes;
  return total;
}

void Context::parallel_for(std::int64_t count, FunctionRef<void(std::int64_t, int)> fn) {
  if (count <= 0) return;
  if (threads_ == 1 || count == 1) {
    for (std::int64_t t = 0; t < count; ++t) fn(t, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_count_ = count;
    next_task_ = 0;
    busy_workers_ = threads_ - 1;
    ++generation_;
  }
  wake_.notify_all();
  // The caller is worker 0 and takes tasks like everyone else.
  for (;;) {
    std::int64_t task;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (next_task_ >= job_count_) break;
      task = next_task_++;
    }
    run_task(fn, task, 0);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return busy_workers_ == 0; });
  job_ = nullptr;
  if (error_) {
    std::exception_ptr error = std::exchange(error_, nullptr);
    std::rethrow_exception(error);
  }
}

void Context::run_task(const FunctionRef<void(std::int64_t, int)>& fn, std::int64_t task, int worker) {
  // Caught here, not let through: on a pool thread an exception would end the process
  // (std::terminate), and on the caller it would unwind `fn` while the others still run it.
  try {
    fn(task, worker);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::current_exception();
    next_task_ = job_count_;
  }
}

void Context::worker_loop(int worker) {
  std::uint64_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    // Only workers below the task count take tasks: callers reserve scratch for
    // min(threads, count) workers before the region, and a worker above that would
    // otherwise grow its scratch (allocate, count) inside it, racing the others.
    while (worker < job_count_ && next_task_ < job_count_) {
      std::int64_t task = next_task_++;
      const auto* job = job_;
      lock.unlock();
      run_task(*job, task, worker);
      lock.lock();
    }
    if (--busy_workers_ == 0) done_.notify_all();
  }
}

}  // namespace headcount
