// Cross-entropy forward and its gradient in one pass per row (see cross_entropy.h).
#include "train/cross_entropy.h"

#include <algorithm>
#include <cmath>

namespace headcount::train {

CrossEntropyResult cross_entropy(Context& ctx, const float* logits, const std::int32_t* targets,
                                 std::int64_t rows, std::int64_t vocab, double* row_loss,
                                 float* dlogits, std::int64_t normalizer) {
  CrossEntropyResult result;
  for (std::int64_t r = 0; r < rows; ++r) result.scored += targets[r] >= 0 ? 1 : 0;
  const std::int64_t divisor = normalizer > 0 ? normalizer : result.scored;
  const double inv_scored = divisor > 0 ? 1.0 / static_cast<double>(divisor) : 0.0;
  constexpr std::int64_t kRowsPerTask = 16;
  ctx.parallel_for((rows + kRowsPerTask - 1) / kRowsPerTask, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(rows, (task + 1) * kRowsPerTask);
    for (std::int64_t r = task * kRowsPerTask; r < end; ++r) {
      const float* z = logits + r * vocab;
      const std::int32_t target = targets[r];
      if (target < 0) {
        row_loss[r] = 0;
        if (dlogits != nullptr) std::fill(dlogits + r * vocab, dlogits + (r + 1) * vocab, 0.0f);
        continue;
      }
      const double m = *std::max_element(z, z + vocab);
      double sum = 0;
      for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(z[v] - m);
      const double lse = m + std::log(sum);
      row_loss[r] = lse - z[target];
      if (dlogits != nullptr) {
        float* d = dlogits + r * vocab;
        for (std::int64_t v = 0; v < vocab; ++v) {
          const double p = std::exp(z[v] - lse);
          d[v] = static_cast<float>(((v == target ? p - 1.0 : p)) * inv_scored);
        }
      }
    }
  });
  double total = 0;
  for (std::int64_t r = 0; r < rows; ++r) total += row_loss[r];
  result.loss = total * inv_scored;
  return result;
}

CrossEntropyResult distillation_loss(Context& ctx, const float* logits, const float* teacher,
                                     const std::int32_t* targets, std::int64_t rows,
                                     std::int64_t vocab, double* row_loss, float* dlogits,
                                     std::int64_t normalizer) {
  CrossEntropyResult result;
  for (std::int64_t r = 0; r < rows; ++r) result.scored += targets[r] >= 0 ? 1 : 0;
  const std::int64_t divisor = normalizer > 0 ? normalizer : result.scored;
  const double inv_scored = divisor > 0 ? 1.0 / static_cast<double>(divisor) : 0.0;
  auto log_sum_exp = [vocab](const float* z) {
    const double m = *std::max_element(z, z + vocab);
    double sum = 0;
    for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(z[v] - m);
    return m + std::log(sum);
  };
  constexpr std::int64_t kRowsPerTask = 16;
  ctx.parallel_for((rows + kRowsPerTask - 1) / kRowsPerTask, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(rows, (task + 1) * kRowsPerTask);
    for (std::int64_t r = task * kRowsPerTask; r < end; ++r) {
      const float* z = logits + r * vocab;
      const float* t = teacher + r * vocab;
      if (targets[r] < 0) {
        row_loss[r] = 0;
        if (dlogits != nullptr) std::fill(dlogits + r * vocab, dlogits + (r + 1) * vocab, 0.0f);
        continue;
      }
      const double lse_s = log_sum_exp(z), lse_t = log_sum_exp(t);
      double kl = 0;
      for (std::int64_t v = 0; v < vocab; ++v) {
        const double log_pt = t[v] - lse_t, pt = std::exp(log_pt);
        kl += pt * (log_pt - (z[v] - lse_s));
      }
      row_loss[r] = kl;
      if (dlogits != nullptr) {
        float* d = dlogits + r * vocab;  // may alias z: each element read before it is written
        for (std::int64_t v = 0; v < vocab; ++v)
          d[v] = static_cast<float>((std::exp(z[v] - lse_s) - std::exp(t[v] - lse_t)) * inv_scored);
      }
    }
  });
  double total = 0;
  for (std::int64_t r = 0; r < rows; ++r) total += row_loss[r];
  result.loss = total * inv_scored;
  return result;
}

}  // namespace headcount::train
