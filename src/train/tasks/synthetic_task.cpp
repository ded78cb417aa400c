// SyntheticTask: rows from counter-based generators, redrawn until they land on their side of
// the hash partition (7/8 of draws are training-side, so a training row costs 8/7 draws on
// average, a validation row 8), and the validation set built once at construction.
#include "train/tasks/synthetic_task.h"

#include <algorithm>

#include "headcount/error.h"
#include "train/tasks/config_reader.h"

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

HeldOut read_held_out(ConfigReader& read) {
  const std::string split = read.choice("split", "validation", {"validation", "dev", "test"});
  return split == "dev" ? HeldOut::dev : split == "test" ? HeldOut::test : HeldOut::all;
}

const char* held_out_name(HeldOut held_out) {
  switch (held_out) {
    case HeldOut::dev:
      return "dev";
    case HeldOut::test:
      return "test";
    default:
      return "validation";
  }
}

bool SyntheticTask::is_validation(const std::int32_t* tokens, std::int64_t seq_len) {
  return hash_tokens(tokens, seq_len) % kValidationBuckets == 0;
}

// dev and test are the two halves of bucket 0 by the hash's next bit (hash mod 2 * buckets is
// 0 or buckets), so they are disjoint and together make up the whole held-out side.
bool SyntheticTask::is_held_out(const std::int32_t* tokens, std::int64_t seq_len,
                                HeldOut held_out) {
  const std::uint64_t hash = hash_tokens(tokens, seq_len);
  if (hash % kValidationBuckets != 0) return false;
  if (held_out == HeldOut::all) return true;
  const bool upper = hash % (2 * kValidationBuckets) == kValidationBuckets;
  return upper == (held_out == HeldOut::test);
}

void SyntheticTask::draw(CounterRng& rng, const HeldOut* held_out, std::int32_t* tokens,
                         std::int32_t* targets) const {
  // Every task here has far more than kValidationBuckets distinct sequences (the constructors
  // require it), so this ends; the cap turns a bug into an error instead of a hang.
  for (int attempt = 0; attempt < 100000; ++attempt) {
    generate(rng, tokens, targets);
    if (held_out ? is_held_out(tokens, seq_len_, *held_out) : !is_validation(tokens, seq_len_))
      return;
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
    draw(rng, nullptr, out.tokens.data() + row * seq_len_, out.targets.data() + row * seq_len_);
  }
  return out;
}

void SyntheticTask::build_validation(std::int64_t sequences, HeldOut held_out) {
  validation_sequences_ = sequences;
  held_out_ = held_out;
  validation_ = Batch{.batch = sequences, .seq_len = seq_len_};
  validation_.tokens.resize(static_cast<std::size_t>(sequences * seq_len_));
  validation_.targets.resize(validation_.tokens.size());
  for (std::int64_t row = 0; row < sequences; ++row) {
    CounterRng rng(kValidationSeed, Stream::validation, 0, static_cast<std::uint64_t>(row));
    draw(rng, &held_out, validation_.tokens.data() + row * seq_len_,
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
  return {
      {"name", name()},
      {"vocab", vocab_size()},
      {"seq_len", seq_len_},
      {"causal", causal()},
      {"validation_sequences", validation_sequences_},
      {"split", held_out_name(held_out_)},
      {"validation_split", held_out_ == HeldOut::all
                               ? concat("sequences whose token hash is 0 mod ", kValidationBuckets,
                                        " (never drawn for training)")
                               : concat("sequences whose token hash is ",
                                        held_out_ == HeldOut::dev ? 0 : kValidationBuckets, " mod ",
                                        2 * kValidationBuckets, " (", held_out_name(held_out_),
                                        "; never drawn for training)")}};
}

}  // namespace headcount::train::tasks
