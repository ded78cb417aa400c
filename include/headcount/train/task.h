// A training task: a seeded generator of token batches and the metric that scores a model's
// predictions on them. Every task is generated in C++ from (seed, step), so the data order is
// deterministic and a resumed run sees exactly the batches it would have seen.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json_fwd.hpp"

namespace headcount::train {

// One batch of sequences. Positions whose target is kIgnore are not scored (prompt tokens,
// padding): the loss is the mean cross-entropy over the scored positions.
struct Batch {
  static constexpr std::int32_t kIgnore = -1;
  std::int64_t batch = 0, seq_len = 0;
  std::vector<std::int32_t> tokens;   // [batch, seq_len], each in [0, vocab)
  std::vector<std::int32_t> targets;  // [batch, seq_len], in [0, vocab) or kIgnore
};

// What a task reports on a set of predictions.
struct TaskMetrics {
  double loss = 0;               // mean cross-entropy over scored positions (nats)
  double accuracy = 0;           // fraction of scored positions whose argmax is the target
  double sequence_accuracy = 0;  // fraction of sequences with every scored position right
  std::int64_t scored = 0;       // scored positions
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  virtual std::int64_t vocab_size() const = 0;
  virtual std::int64_t seq_len() const = 0;
  // Whether the model must be causal (a language model) or may see the whole sequence.
  virtual bool causal() const = 0;
  // The training batch of `step` for run seed `seed`: a pure function of (seed, step, batch);
  // row r depends only on (seed, step, r), so a smaller batch is a prefix of a larger one.
  virtual Batch train_batch(std::uint64_t seed, std::int64_t step, std::int64_t batch) const = 0;
  // The fixed validation set (the same for every seed of a task config, never drawn for
  // training), cut into validation_batches(batch) batches of `batch` rows; the last one holds
  // the remainder (its Batch::batch may be smaller). Index out of range: Error.
  virtual Batch validation_batch(std::int64_t index, std::int64_t batch) const = 0;
  virtual std::int64_t validation_batches(std::int64_t batch) const = 0;
  // The task's own description for reports (relations, vocab, lengths).
  virtual nlohmann::json describe() const = 0;
};

// Scores logits [batch, seq_len, vocab] (row-major float) against a batch's targets: loss in
// double via logsumexp, argmax = the first maximum; sequence_accuracy counts only sequences
// with at least one scored position. A target outside [0, vocab) other than kIgnore: Error.
TaskMetrics score_logits(const Batch& batch, const float* logits, std::int64_t vocab);

// Builds a task from its JSON config, e.g. {"name": "copy", "seq_len": 32, ...}; throws Error
// naming the field for an unknown name or a bad value. Known names are listed by task_names().
std::unique_ptr<Task> make_task(const nlohmann::json& config);
std::vector<std::string> task_names();

}  // namespace headcount::train
