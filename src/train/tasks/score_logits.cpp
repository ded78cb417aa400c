// score_logits: per scored position, the cross-entropy -log softmax(logits)[target] computed
// as logsumexp - logit[target] in double (max subtracted first, so no overflow for any finite
// logits), and whether the argmax (the first maximum on ties) is the target. Per sequence,
// whether all its scored positions were right; sequences with no scored position do not count.
#include <cmath>

#include "headcount/error.h"
#include "headcount/train/task.h"

namespace headcount::train {

using detail::concat;

TaskMetrics score_logits(const Batch& batch, const float* logits, std::int64_t vocab) {
  check(vocab >= 1, "score_logits vocab", "at least 1", vocab);
  const std::int64_t positions = batch.batch * batch.seq_len;
  check(batch.batch >= 0 && batch.seq_len >= 0 &&
            static_cast<std::int64_t>(batch.targets.size()) == positions,
        "score_logits batch.targets", concat(positions, " targets (batch x seq_len)"),
        batch.targets.size());
  check(logits != nullptr || positions == 0, "score_logits logits",
        "a [batch, seq_len, vocab] buffer", "null");

  TaskMetrics metrics;
  double loss = 0;
  std::int64_t correct = 0, sequences = 0, sequences_right = 0;
  for (std::int64_t row = 0; row < batch.batch; ++row) {
    std::int64_t scored_here = 0;
    bool all_right = true;
    for (std::int64_t t = 0; t < batch.seq_len; ++t) {
      const std::int64_t position = row * batch.seq_len + t;
      const std::int32_t target = batch.targets[static_cast<std::size_t>(position)];
      if (target == Batch::kIgnore) continue;
      check(target >= 0 && target < vocab,
            concat("score_logits target at row ", row, ", position ", t),
            concat("a token in [0, ", vocab, ") or ", Batch::kIgnore), target);
      const float* z = logits + position * vocab;
      std::int64_t argmax = 0;
      for (std::int64_t v = 1; v < vocab; ++v)
        if (z[v] > z[argmax]) argmax = v;
      double sum = 0;
      for (std::int64_t v = 0; v < vocab; ++v)
        sum += std::exp(static_cast<double>(z[v]) - z[argmax]);
      // The difference first: with huge logits, log(sum) + z[argmax] would lose log(sum).
      loss += std::log(sum) + (static_cast<double>(z[argmax]) - z[target]);
      const bool right = argmax == target;
      correct += right;
      all_right = all_right && right;
      ++scored_here;
    }
    metrics.scored += scored_here;
    if (scored_here > 0) {
      ++sequences;
      sequences_right += all_right;
    }
  }
  if (metrics.scored > 0) {
    metrics.loss = loss / static_cast<double>(metrics.scored);
    metrics.accuracy = static_cast<double>(correct) / static_cast<double>(metrics.scored);
  }
  if (sequences > 0)
    metrics.sequence_accuracy =
        static_cast<double>(sequences_right) / static_cast<double>(sequences);
  return metrics;
}

}  // namespace headcount::train
