// Work the kernels did, counted while a WorkCounting scope is alive: the multiply-adds of every
// dense matrix product (layers::gemm, packed_gemm: m·n·k per call), of every attention kernel
// call (forward, backward with its recomputation, decode: the kernels' own AttentionStats), and
// the softmax exponentials (one per score entry a kernel computed, recomputations included).
// Counted per call, never per element, so a scope costs nothing measurable; outside a scope the
// kernels test one relaxed atomic flag. This is the measured side of the cost model (the claims
// protocol's E-H: "the split is free" from counts, not from the formula that predicts them).
#pragma once

#include <cstdint>

namespace headcount {

struct WorkCounts {
  std::int64_t gemm_macs = 0;       // projections, feed-forward, output head (forward + backward)
  std::int64_t attention_macs = 0;  // Q·K^T and P·V (and the backward's five products)
  std::int64_t exponentials = 0;    // softmax exponentials (score entries computed)
  std::int64_t gemm_calls = 0, attention_calls = 0;
  std::int64_t macs() const { return gemm_macs + attention_macs; }
};

// Resets the counts and turns counting on for its lifetime; one scope at a time in a process
// (a second one while the first lives: Error). Counts from every thread.
class WorkCounting {
 public:
  WorkCounting();
  ~WorkCounting();
  WorkCounting(const WorkCounting&) = delete;
  WorkCounting& operator=(const WorkCounting&) = delete;
  WorkCounts counts() const;  // so far
};

namespace work_counters {
// What the kernels call (cheap when no scope is alive).
bool enabled();
void add_gemm(std::int64_t m, std::int64_t n, std::int64_t k);
void add_attention(std::int64_t macs, std::int64_t exponentials);
}  // namespace work_counters

}  // namespace headcount
