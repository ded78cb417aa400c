// The shared half of the synthetic tasks (copy, assoc-recall, multi-relation): each says how
// to write one sequence from a CounterRng; this base turns that into training batches, row r
// of step s drawn from CounterRng(seed, train, s, r), and a fixed validation set drawn from a
// seed of its own. Train and validation are disjoint by construction: a sequence belongs to
// validation when the hash of its tokens falls in bucket 0 of kValidationBuckets, and each side
// redraws (from the same row's generator, so still deterministic) until it lands on its own
// side. Conditioning on a hash bucket leaves each side's distribution that of the task.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "headcount/train/task.h"
#include "nlohmann/json.hpp"
#include "train/tasks/random.h"

namespace headcount::train::tasks {

class SyntheticTask : public Task {
 public:
  static constexpr std::uint64_t kValidationBuckets = 8;
  static constexpr std::uint64_t kValidationSeed = 0x76616c6964617465ull;  // "validate"
  static constexpr std::int64_t kDefaultValidationSequences = 512;

  std::int64_t seq_len() const override { return seq_len_; }
  Batch train_batch(std::uint64_t seed, std::int64_t step, std::int64_t batch) const override;
  Batch validation_batch(std::int64_t index, std::int64_t batch) const override;
  std::int64_t validation_batches(std::int64_t batch) const override;
  // Whether a sequence of tokens is on the validation side of the partition.
  static bool is_validation(const std::int32_t* tokens, std::int64_t seq_len);

 protected:
  // Writes one sequence: seq_len() tokens and targets (kIgnore where unscored).
  virtual void generate(CounterRng& rng, std::int32_t* tokens, std::int32_t* targets) const = 0;
  // Call at the end of the derived constructor, once generate() can run.
  void build_validation(std::int64_t sequences);
  // The fields every synthetic task reports, for the derived describe().
  nlohmann::json describe_common() const;

  std::int64_t seq_len_ = 0;
  std::int64_t validation_sequences_ = 0;

 private:
  void draw(CounterRng& rng, bool validation, std::int32_t* tokens, std::int32_t* targets) const;
  Batch validation_;  // all validation sequences, [validation_sequences_, seq_len_]
};

// Checks of a (index, batch) request shared by every task.
void check_batch_request(std::int64_t batch, const char* what);
Batch slice_rows(const Batch& all, std::int64_t first, std::int64_t count);

}  // namespace headcount::train::tasks
