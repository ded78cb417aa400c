// copy (an induction-style task): L = seq_len / 2 random symbols, a separator, then the same
// symbols again. As a causal LM the model reads
//   tokens  = p0 p1 ... p(L-1) SEP p0 ... p(L-2)
//   targets =  -  -  ...   -    p0  p1 ... p(L-1)      (- = Batch::kIgnore)
// so only the repeated half is scored: predicting it needs attention to the token L positions
// back (or to what followed the previous occurrence of the current token), nothing else.
// Symbols are 0..alphabet-1, SEP = alphabet, vocab = alphabet + 1.
#include "headcount/error.h"
#include "train/tasks/config_reader.h"
#include "train/tasks/synthetic_task.h"
#include "train/tasks/tasks.h"

namespace headcount::train::tasks {
namespace {

class CopyTask final : public SyntheticTask {
 public:
  explicit CopyTask(const nlohmann::json& config) {
    ConfigReader read(config);
    seq_len_ = read.integer("seq_len", 32, 4, 1 << 16);
    check(seq_len_ % 2 == 0, ConfigReader::key("seq_len"),
          "an even length (prefix, separator, repeat)", seq_len_);
    alphabet_ = read.integer("alphabet", 16, 2, 1 << 20);
    prefix_ = seq_len_ / 2;
    check(count_sequences(alphabet_, prefix_) >= 64, ConfigReader::key("alphabet"),
          "at least 64 distinct prefixes (alphabet^(seq_len/2))", concat_count());
    const std::int64_t validation =
        read.integer("validation_sequences", kDefaultValidationSequences, 1, 1 << 20);
    read.finish();
    build_validation(validation);
  }

  std::string name() const override { return "copy"; }
  std::int64_t vocab_size() const override { return alphabet_ + 1; }
  bool causal() const override { return true; }
  nlohmann::json describe() const override {
    nlohmann::json d = describe_common();
    d["alphabet"] = alphabet_;
    d["separator"] = alphabet_;
    d["prefix_len"] = prefix_;
    d["rule"] =
        "tokens: L random symbols, SEP, the first L-1 again; scored targets: the L symbols after "
        "SEP";
    return d;
  }

 protected:
  void generate(CounterRng& rng, std::int32_t* tokens, std::int32_t* targets) const override {
    for (std::int64_t i = 0; i < prefix_; ++i) {
      tokens[i] = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(alphabet_)));
      targets[i] = Batch::kIgnore;
    }
    tokens[prefix_] = static_cast<std::int32_t>(alphabet_);
    for (std::int64_t i = 0; i < prefix_; ++i) {
      if (prefix_ + 1 + i < seq_len_) tokens[prefix_ + 1 + i] = tokens[i];
      targets[prefix_ + i] = tokens[i];
    }
  }

 private:
  std::string concat_count() const {
    return detail::concat(alphabet_, "^", prefix_, " = ", count_sequences(alphabet_, prefix_));
  }
  std::int64_t alphabet_ = 0, prefix_ = 0;
};

}  // namespace

std::unique_ptr<Task> make_copy(const nlohmann::json& config) {
  return std::make_unique<CopyTask>(config);
}

}  // namespace headcount::train::tasks
