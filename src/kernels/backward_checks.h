// The backward's validation, shared by both backward kernels: validate_backward's checks,
// returning the sizes it read off the params (so a kernel validates once).
#pragma once

#include "headcount/attention_backward.h"

namespace headcount::kernels {

// Everything validate_backward checks; `need_forward` also requires params.out and
// params.lse (the streaming kernel reads them instead of recomputing).
AttentionShape checked_backward_shape(const AttentionParams& params, const AttentionGrads& grads,
                                      bool need_forward);

}  // namespace headcount::kernels
