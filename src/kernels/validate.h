// validate() in two halves, for kernels that check the values of q, k and v on the pool: a
// serial pass over the inputs was ~5% of a two-thread streaming call at n 1024 (three 2-4 MB
// reads by one thread before the parallel region).
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
