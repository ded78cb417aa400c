// SyntheticTask: rows from counter-based generators, redrawn until they land on their side of
// the hash partition (7/8 of draws are training-side, so a training row costs 8/7 draws on
// average, a validation row 8), and the validation set built once at construction.
#include "train/tasks/synthetic_task.h"

#include <algorithm>

#include "headcount/error.h"

namespace headcount::train::tasks {

using detail::concat;

void check_batch_request(std::int64_t batch, const char* what) {
  check(batch >= 1 && batch <= (1 << 20), concat(what, " batch"), "an integer in [1, 1048576]",
        batch);
}

Batch slice_rows(const Batch& all, std::int64_t first, std::int64_t count) {
  Batch out{.batch = count, .seq_len = all.seq_len};
  const auto begin = static_cast<std::ptrdiff_t>(first * all.seq_len);
  const auto end = static_cast<std::ptrdiff_t>((first + count) * all.seq_len);
  out.tokens.assign(all.tokens.begin() + begin, all.tokens.begin() + end);
  out.targets.assign(all.targets.begin() + begin, all.targets.begin() + end);
  return out;
}

bool SyntheticTask::is_validation(const std::int32_t* tokens, std::int64_t seq_len) {
  return hash_tokens(tokens, seq_len) % kValidationBuckets == 0;
}

void SyntheticTask::draw(CounterRng& rng, bool validation, std::int32_t* tokens,
                         std::int32_t* targets) const {
  // Every task here has far more than kValidationBuckets distinct sequences (the constructors
  // require it), so this ends; the cap turns a bug into an error instead of a hang.
  for (int attempt = 0; attempt < 100000; ++attempt) {
    generate(rng, tokens, targets);
    if (is_validation(tokens, seq_len_) == validation) return;
  }
  fail(name(),
       "could not draw a sequence on its side of the train/validation split: too few distinct "
       "sequences");
}

Batch SyntheticTask::train_batch(std::uint64_t seed, std::int64_t step, std::int64_t batch) const {
  check_batch_request(batch, "train_batch");
  check(step >= 0, "train_batch step", "a non-negative step", step);
  Batch out{.batch = batch, .seq_len = seq_len_};
  out.tokens.resize(static_cast<std::size_t>(batch * seq_len_));
  out.targets.resize(out.tokens.size());
  for (std::int64_t row = 0; row < batch; ++row) {
    CounterRng rng(seed, Stream::train, static_cast<std::uint64_t>(step),
                   static_cast<std::uint64_t>(row));
    draw(rng, false, out.tokens.data() + row * seq_len_, out.targets.data() + row * seq_len_);
  }
  return out;
}

void SyntheticTask::build_validation(std::int64_t sequences) {
  validation_sequences_ = sequences;
  validation_ = Batch{.batch = sequences, .seq_len = seq_len_};
  validation_.tokens.resize(static_cast<std::size_t>(sequences * seq_len_));
  validation_.targets.resize(validation_.tokens.size());
  for (std::int64_t row = 0; row < sequences; ++row) {
    CounterRng rng(kValidationSeed, Stream::validation, 0, static_cast<std::uint64_t>(row));
    draw(rng, true, validation_.tokens.data() + row * seq_len_,
         validation_.targets.data() + row * seq_len_);
  }
}

std::int64_t SyntheticTask::validation_batches(std::int64_t batch) const {
  check_batch_request(batch, "validation_batches");
  return (validation_sequences_ + batch - 1) / batch;
}

Batch SyntheticTask::validation_batch(std::int64_t index, std::int64_t batch) const {
  const std::int64_t count = validation_batches(batch);
  check(index >= 0 && index < count, "validation_batch index",
        concat("an index in [0, ", count, ")"), index);
  const std::int64_t first = index * batch;
  return slice_rows(validation_, first, std::min(batch, validation_sequences_ - first));
}

nlohmann::json SyntheticTask::describe_common() const {
  return {{"name", name()},
          {"vocab", vocab_size()},
          {"seq_len", seq_len_},
          {"causal", causal()},
          {"validation_sequences", validation_sequences_},
          {"validation_split", concat("sequences whose token hash is 0 mod ", kValidationBuckets,
                                      " (never drawn for training)")}};
}

}  // namespace headcount::train::tasks
