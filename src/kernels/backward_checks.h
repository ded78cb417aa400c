// The backward's validation, shared by both backward kernels: validate_backward's checks,
// returning the sizes it read off the params (so a kernel validates once).
#pragma once

#include "headcount/attention_backward.h"
#include "headcount/context.h"

namespace headcount::kernels {

// Everything validate_backward checks; `need_forward` also requires params.out and
// params.lse (the streaming kernel reads them instead of recomputing). With a context, the
// finiteness of q, k and v is scanned on its pool (validate.h's check_finite_inputs: the same
// error, whatever the thread count), not serially: a training step calls the backward once per
// layer on the q, k, v its forward already produced.
AttentionShape checked_backward_shape(const AttentionParams& params, const AttentionGrads& grads,
                                      bool need_forward, Context* ctx = nullptr);

}  // namespace headcount::kernels
