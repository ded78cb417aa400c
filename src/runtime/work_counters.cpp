// work_counters.h: process-wide relaxed atomics behind one flag.
#include "headcount/work_counters.h"

#include <atomic>

#include "headcount/error.h"

namespace headcount {
namespace {

std::atomic<bool> counting{false};
std::atomic<std::int64_t> gemm_macs{0}, attention_macs{0}, exponentials{0}, gemm_calls{0},
    attention_calls{0};

}  // namespace

WorkCounting::WorkCounting() {
  bool expected = false;
  HEADCOUNT_CHECK(counting.compare_exchange_strong(expected, true), "WorkCounting",
                  "one scope at a time", "a second scope while one is alive");
  for (auto* c : {&gemm_macs, &attention_macs, &exponentials, &gemm_calls, &attention_calls})
    c->store(0, std::memory_order_relaxed);
}

WorkCounting::~WorkCounting() { counting.store(false); }

WorkCounts WorkCounting::counts() const {
  return {.gemm_macs = gemm_macs.load(),
          .attention_macs = attention_macs.load(),
          .exponentials = exponentials.load(),
          .gemm_calls = gemm_calls.load(),
          .attention_calls = attention_calls.load()};
}

namespace work_counters {

bool enabled() { return counting.load(std::memory_order_relaxed); }

void add_gemm(std::int64_t m, std::int64_t n, std::int64_t k) {
  if (!enabled()) return;
  gemm_macs.fetch_add(m * n * k, std::memory_order_relaxed);
  gemm_calls.fetch_add(1, std::memory_order_relaxed);
}

void add_attention(std::int64_t macs, std::int64_t exps) {
  if (!enabled()) return;
  attention_macs.fetch_add(macs, std::memory_order_relaxed);
  exponentials.fetch_add(exps, std::memory_order_relaxed);
  attention_calls.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace work_counters
}  // namespace headcount
