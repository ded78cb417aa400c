// Cross-entropy over logits [rows, vocab] with ignored targets.
//   lse_r  = m_r + log Σ_v exp(logit_rv - m_r),  m_r = max_v logit_rv   (safe log-softmax)
//   loss   = (1 / S) Σ_{scored r} (lse_r - logit_r,target_r),   S = number of scored rows
//   dlogit = (softmax_r - onehot(target_r)) / S for scored rows, 0 for ignored ones
// Row work is parallel; the row losses are summed in row order in double (deterministic).
#pragma once

#include <cstdint>

#include "headcount/context.h"

namespace headcount::train {

struct CrossEntropyResult {
  double loss = 0;  // 0 when nothing is scored
  std::int64_t scored = 0;
};

// targets in [0, vocab) or -1 (ignored), already checked. row_loss: `rows` doubles of
// scratch. dlogits may be null (no gradient) and may alias logits. normalizer > 0 replaces S
// (the loss is then the sum over these rows divided by it, and so is the gradient): a
// data-parallel replica passes the global batch's scored count, so that its rows' dlogits are
// bitwise those of the same rows in one process's global batch.
CrossEntropyResult cross_entropy(Context& ctx, const float* logits, const std::int32_t* targets,
                                 std::int64_t rows, std::int64_t vocab, double* row_loss,
                                 float* dlogits, std::int64_t normalizer = 0);

// Distillation: per scored row, KL(p_teacher ‖ p_model) = Σ_v p_t (log p_t - log p_model), with
// teacher logits [rows, vocab]; dlogit = (softmax(logits) - softmax(teacher)) / S. targets only
// say which rows are scored (>= 0) or ignored (-1). Otherwise as cross_entropy.
CrossEntropyResult distillation_loss(Context& ctx, const float* logits, const float* teacher,
                                     const std::int32_t* targets, std::int64_t rows,
                                     std::int64_t vocab, double* row_loss, float* dlogits,
                                     std::int64_t normalizer = 0);

}  // namespace headcount::train
