// The shared half of the synthetic tasks (copy, assoc-recall, multi-relation): each says how
// to write one sequence from a CounterRng; this base turns that into training batches, row r
// of step s drawn from CounterRng(seed, train, s, r), and a fixed validation set drawn from a
// seed of its own. Train and validation are disjoint by construction: a sequence belongs to
// validation when the hash of its tokens falls in bucket 0 of kValidationBuckets, and each side
// redraws (from the same row's generator, so still deterministic) until it lands on its own
// side. Conditioning on a hash bucket leaves each side's distribution that of the task.
// A task may draw its validation set from one half of the held-out side only ("split": "dev" or
// "test", a second bit of the same hash), so a protocol can pick on dev and report on test: the
// two halves are disjoint, and training never sees either.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "headcount/train/task.h"
#include "nlohmann/json.hpp"
#include "train/tasks/random.h"

namespace headcount::train::tasks {

class ConfigReader;

// Which held-out sequences the validation set holds.
enum class HeldOut { all, dev, test };
// "validation" (all of them), "dev" or "test", read from a task config's "split" field.
HeldOut read_held_out(ConfigReader& read);
const char* held_out_name(HeldOut held_out);

class SyntheticTask : public Task {
 public:
  static constexpr std::uint64_t kValidationBuckets = 8;
  static constexpr std::uint64_t kValidationSeed = 0x76616c6964617465ull;  // "validate"
  static constexpr std::int64_t kDefaultValidationSequences = 512;

  std::int64_t seq_len() const override { return seq_len_; }
  Batch train_batch(std::uint64_t seed, std::int64_t step, std::int64_t batch) const override;
  Batch validation_batch(std::int64_t index, std::int64_t batch) const override;
  std::int64_t validation_batches(std::int64_t batch) const override;
  // Whether a sequence of tokens is on the validation side of the partition, and on which half.
  static bool is_validation(const std::int32_t* tokens, std::int64_t seq_len);
  static bool is_held_out(const std::int32_t* tokens, std::int64_t seq_len, HeldOut held_out);

 protected:
  // Writes one sequence: seq_len() tokens and targets (kIgnore where unscored).
  virtual void generate(CounterRng& rng, std::int32_t* tokens, std::int32_t* targets) const = 0;
  // Call at the end of the derived constructor, once generate() can run.
  void build_validation(std::int64_t sequences, HeldOut held_out = HeldOut::all);
  // The fields every synthetic task reports, for the derived describe().
  nlohmann::json describe_common() const;

  std::int64_t seq_len_ = 0;
  std::int64_t validation_sequences_ = 0;
  HeldOut held_out_ = HeldOut::all;

 private:
  // Redraws until the sequence is a training one (held_out nullptr) or in *held_out.
  void draw(CounterRng& rng, const HeldOut* held_out, std::int32_t* tokens,
            std::int32_t* targets) const;
  Batch validation_;  // all validation sequences, [validation_sequences_, seq_len_]
};

// Checks of a (index, batch) request shared by every task.
void check_batch_request(std::int64_t batch, const char* what);
Batch slice_rows(const Batch& all, std::int64_t first, std::int64_t count);

}  // namespace headcount::train::tasks
