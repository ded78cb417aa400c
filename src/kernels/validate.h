// validate() in two halves, for kernels that check the values of q, k and v on the pool: the
// serial pass over the inputs ran on one thread before the parallel region (validate was 2.3%
// of a one-thread streaming call at n 2048 in a perf profile); on the pool, n 1024, 8 x 64,
// two threads, alternating: 8.47-8.62 -> 8.37-8.48 ms median (build/attention_time).
#pragma once

#include "headcount/attention.h"
#include "headcount/context.h"

namespace headcount::kernels {

// Every check of validate() except the finiteness of q, k and v.
AttentionShape validate_layout(const AttentionParams& p);

// The finiteness of q, k and v, rows dealt out over the context's workers; throws the same
// Error as validate() (naming the first bad element) whatever the thread count.
void check_finite_inputs(Context& ctx, const AttentionParams& p);

}  // namespace headcount::kernels
