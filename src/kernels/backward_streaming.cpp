// The streaming backward: in progress on this branch; until it lands the call validates
// its input and says so, instead of computing anything.
#include "headcount/attention_backward.h"
#include "headcount/error.h"
#include "kernels/backward_checks.h"

namespace headcount {

AttentionBackwardStats attention_backward_streaming(Context& /*ctx*/, const AttentionParams& p,
                                                    const AttentionGrads& g) {
  kernels::checked_backward_shape(p, g, /*need_forward=*/true);
  fail("kernel", "expected reference for the backward: the streaming backward is not built yet");
}

}  // namespace headcount
