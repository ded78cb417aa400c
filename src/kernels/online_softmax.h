// The online softmax, written once.
//
// For scores s_1..s_n seen in blocks, keep m = max seen so far and l = sum exp(s_j - m).
// A new block with maximum m_b gives m' = max(m, m_b) and
//     l' = l * exp(m - m') + sum_block exp(s_j - m'),
// and every accumulated output sum_j exp(s_j - m) v_j must be multiplied by the same
// factor alpha = exp(m - m'). At the end  softmax(s)·V = acc / l  and  lse = m + log l.
// Masked keys carry s = -inf: a block of only -inf leaves m, l and acc unchanged, and a
// row that never saw a finite score ends with l = 0, which finalises to zeros, lse = -inf.
#pragma once

#include <cmath>
#include <limits>

namespace headcount::kernels {

struct OnlineSoftmax {
  float max = -std::numeric_limits<float>::infinity();
  float sum = 0.0f;

  // Takes a block maximum; returns alpha, the factor to rescale sum-weighted outputs by,
  // and moves `max`. The caller then adds exp(s_j - max) to `sum` and to its outputs.
  float rescale_to(float block_max) {
    if (!(block_max > max)) return 1.0f;  // also true for block_max = -inf
    const float alpha = std::exp(max - block_max);  // exp(-inf) = 0 on the first block
    sum *= alpha;
    max = block_max;
    return alpha;
  }

  bool saw_any() const { return sum > 0.0f; }
  float inverse_sum() const { return saw_any() ? 1.0f / sum : 0.0f; }
  float log_sum_exp() const {
    return saw_any() ? max + std::log(sum) : -std::numeric_limits<float>::infinity();
  }
};

}  // namespace headcount::kernels
